#include "driver/bdev/modules/passthru.h"

namespace pollux::bdev {
namespace {

// One writer (the channel's thread): load+store, no locked instruction.
inline void bump(std::atomic<uint64_t>& a) {
  a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct ChannelCounters {
  std::array<std::atomic<uint64_t>, kIoTypes> submitted{}, completed{}, failed{};
  void add_to(PassthruCounters& c) const {
    for (std::size_t i = 0; i < kIoTypes; ++i) {
      c.submitted[i] += submitted[i].load(std::memory_order_relaxed);
      c.completed[i] += completed[i].load(std::memory_order_relaxed);
      c.failed[i] += failed[i].load(std::memory_order_relaxed);
    }
  }
};

class PassthruBdev final : public VirtualBdev {
 public:
  PassthruBdev(VbdevModule& m, std::string name) : VirtualBdev(m, std::move(name)) {}

  PassthruCounters counters() {
    std::lock_guard lock(mu_);
    PassthruCounters c = retired_;
    for (const ChannelCounters* s : live_) s->add_to(c);
    return c;
  }

 protected:
  std::size_t io_ctx_size() const override { return sizeof(ChannelCounters*); }
  int channel_create(VbdevChannel& ch) override {
    auto* s = new ChannelCounters;
    ch.priv = s;
    std::lock_guard lock(mu_);
    live_.push_back(s);
    return 0;
  }
  void channel_destroy(VbdevChannel& ch) override {
    auto* s = static_cast<ChannelCounters*>(ch.priv);
    {
      std::lock_guard lock(mu_);
      s->add_to(retired_);
      live_.erase(std::find(live_.begin(), live_.end(), s));
    }
    delete s;
  }
  void submit(BdevIo& io, VbdevChannel& ch) override {
    auto* s = static_cast<ChannelCounters*>(ch.priv);
    *static_cast<ChannelCounters**>(io.module_ctx()) = s;
    bump(s->submitted[static_cast<std::size_t>(io.type())]);
    forward(io, ch, 0, &done, &io);
  }

 private:
  static void done(BdevIo& base_io, bool success, void* arg) {
    auto& io = *static_cast<BdevIo*>(arg);
    auto* s = *static_cast<ChannelCounters**>(io.module_ctx());
    const auto t = static_cast<std::size_t>(io.type());
    bump(s->completed[t]);
    if (!success) bump(s->failed[t]);
    complete_like(io, base_io);
  }

  std::mutex mu_;  // live_ and retired_ (channel set-up and readers only)
  std::vector<ChannelCounters*> live_;
  PassthruCounters retired_;
};

}  // namespace

Result<bool> PassthruModule::create(const PassthruOptions& o) {
  if (o.name.empty() || o.base_name.empty())
    return make_error(EINVAL, "passthru: name and base bdev name are required");
  const std::string name = o.name;
  return add_config(o.name, o.base_name, [this, name](VbdevBase& base) -> Result<int> {
    auto v = std::make_unique<PassthruBdev>(*this, name);
    auto r = register_vbdev(std::move(v), base,
                            inherit_properties(base.bdev(), name, "passthru"));
    if (!r) return r.error();
    return 1;
  });
}

int PassthruModule::remove(const std::string& name, event::MsgFn done, void* ctx) {
  return remove_config(name, done, ctx);
}

Result<PassthruCounters> PassthruModule::counters(const std::string& name) {
  auto* v = static_cast<PassthruBdev*>(find_vbdev(name));
  if (v == nullptr) return make_error(ENODEV, "passthru: no bdev named '" + name + "'");
  return v->counters();
}

}  // namespace pollux::bdev
