#include "driver/bdev/modules/split.h"

namespace pollux::bdev {
namespace {

class SplitPart final : public VirtualBdev {
 public:
  SplitPart(VbdevModule& m, std::string name, uint64_t first_block)
      : VirtualBdev(m, std::move(name)), first_(first_block) {}

 protected:
  bool supports(IoType t) const override {
    return t != IoType::kNvmePassthru && VirtualBdev::supports(t);  // LBAs inside the command
  }
  void submit(BdevIo& io, VbdevChannel& ch) override {
    forward(io, ch, first_, &complete_from_base, &io);
  }

 private:
  uint64_t first_;
};

}  // namespace

Result<bool> SplitModule::create(const SplitOptions& o) {
  if (o.base_name.empty()) return make_error(EINVAL, "split: base bdev name is required");
  if (o.split_count == 0) return make_error(EINVAL, "split " + o.base_name + ": split_count must be >= 1");
  const SplitOptions opt = o;
  return add_config(o.base_name, o.base_name, [this, opt](VbdevBase& base) -> Result<int> {
    const Bdev& b = base.bdev();
    uint64_t part = opt.part_blocks;
    if (part == 0 && opt.split_size_mb != 0) {
      const uint64_t bytes = opt.split_size_mb << 20;
      if (bytes % b.block_size() != 0)
        return make_error(EINVAL, "split " + b.name() + ": split_size_mb is not a whole number of blocks");
      part = bytes / b.block_size();
    }
    if (part == 0) part = b.num_blocks() / opt.split_count;
    if (part == 0 || part > b.num_blocks() / opt.split_count)
      return make_error(EINVAL, "split " + b.name() + ": " + std::to_string(opt.split_count) +
                                    " parts of " + std::to_string(part) + " blocks exceed " +
                                    std::to_string(b.num_blocks()) + " blocks");
    for (uint32_t i = 0; i < opt.split_count; ++i) {
      const std::string name = b.name() + "p" + std::to_string(i);
      BdevProperties p = inherit_properties(b, name, "split");
      p.num_blocks = part;
      auto r = register_vbdev(std::make_unique<SplitPart>(*this, name, i * part), base, p);
      if (!r) return r.error();
    }
    return static_cast<int>(opt.split_count);
  });
}

int SplitModule::remove(const std::string& base_name, event::MsgFn done, void* ctx) {
  return remove_config(base_name, done, ctx);
}

}  // namespace pollux::bdev
