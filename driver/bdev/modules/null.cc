#include "driver/bdev/modules/null.h"

namespace pollux::bdev {
namespace {

// Completes every I/O inside submit: no per-thread state is needed, but the layer wants an
// io_device, so the backend registers itself with an empty context.
class NullBackend final : public Backend {
 public:
  explicit NullBackend(event::Framework& fw) : fw_(fw) {
    fw_.register_io_device(this, [](void*, void*) { return 0; }, [](void*, void*) {}, 0,
                           "bdev_null");
  }
  bool supports(IoType t) const override {
    return t == IoType::kRead || t == IoType::kWrite || t == IoType::kWriteZeroes ||
           t == IoType::kUnmap || t == IoType::kFlush || t == IoType::kReset;
  }
  void* io_device() override { return this; }
  void submit(BdevIo& io, void*) override { io.complete(IoStatus::kSuccess); }
  void destruct() override { fw_.unregister_io_device(this, nullptr, nullptr); }

 private:
  event::Framework& fw_;
};

}  // namespace

Result<Bdev*> create_null_bdev(Manager& mgr, const NullOptions& o) {
  BdevProperties p;
  p.name = o.name;
  p.product = "Null disk";
  p.block_size = o.block_size;
  p.num_blocks = o.num_blocks;
  p.stores_data = false;  // reads leave the buffer untouched, as SPDK's null bdev
  return mgr.register_bdev(std::move(p), std::make_unique<NullBackend>(mgr.framework()), "null");
}

}  // namespace pollux::bdev
