#include "driver/blob/crash/cut_switch.h"

#include <memory>

namespace pollux::blob::crash {

struct CutSwitch::Backend final : public bdev::Backend {
  struct Channel {
    event::IoChannel* base = nullptr;
  };
  struct IoCtx {
    bool last_before_cut;
  };
  Backend(bdev::Manager& mgr, bdev::Desc* base, std::unique_ptr<CutSwitch> sw)
      : mgr(mgr), base(base), sw(std::move(sw)) {
    mgr.framework().register_io_device(
        this,
        [](void* dev, void* ctx) {
          auto* self = static_cast<Backend*>(dev);
          auto* ch = new (ctx) Channel;
          ch->base = self->mgr.get_io_channel(self->base);
          return ch->base ? 0 : -ENOMEM;
        },
        [](void* dev, void* ctx) {
          auto* self = static_cast<Backend*>(dev);
          auto* ch = static_cast<Channel*>(ctx);
          if (ch->base) self->mgr.put_io_channel(ch->base);
          ch->~Channel();
        },
        sizeof(Channel), "cut_switch");
  }
  bool supports(bdev::IoType t) const override {
    return (t == bdev::IoType::kRead || t == bdev::IoType::kWrite || t == bdev::IoType::kFlush ||
            t == bdev::IoType::kWriteZeroes || t == bdev::IoType::kUnmap) &&
           base->bdev().supports(t);
  }
  void* io_device() override { return this; }
  std::size_t io_ctx_size() const override { return sizeof(IoCtx); }
  // The bdev layer frees this backend right after destruct(): the base is closed, once the
  // io_device is gone, from what the callback owns.
  void destruct() override {
    struct Closing {
      bdev::Manager* mgr;
      bdev::Desc* base;
    };
    mgr.framework().unregister_io_device(
        this,
        [](void* arg) {
          std::unique_ptr<Closing> c(static_cast<Closing*>(arg));
          c->mgr->close(c->base);
        },
        new Closing{&mgr, base});
  }
  static void done(bdev::BdevIo& base_io, bool ok, void* arg) {
    (void)base_io;
    auto* io = static_cast<bdev::BdevIo*>(arg);
    auto* self = static_cast<Backend*>(io->bdev().backend().io_device());
    if (static_cast<IoCtx*>(io->module_ctx())->last_before_cut) {
      self->sw->dead_ = true;
      self->sw->cut_requested_ = true;
    }
    io->complete(ok ? bdev::IoStatus::kSuccess : bdev::IoStatus::kFailed);
  }
  void submit(bdev::BdevIo& io, void* ctx) override {
    CutSwitch& s = *sw;
    if (s.dead_) return io.complete(bdev::IoStatus::kRemoved);
    ++s.commands_;
    static_cast<IoCtx*>(io.module_ctx())->last_before_cut = s.cut_after_ != 0 && s.commands_ == s.cut_after_;
    event::IoChannel* ch = static_cast<Channel*>(ctx)->base;
    int rc;
    switch (io.type()) {
      case bdev::IoType::kRead:
        rc = mgr.readv(base, ch, io.iovs(), io.iovcnt(), io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kWrite:
        rc = mgr.writev(base, ch, io.iovs(), io.iovcnt(), io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kWriteZeroes:
        rc = mgr.write_zeroes(base, ch, io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kUnmap:
        rc = mgr.unmap(base, ch, io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kFlush:
        rc = mgr.flush(base, ch, io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      default:
        rc = -ENOTSUP;
    }
    if (rc == -ENOMEM) return io.complete(bdev::IoStatus::kNoMemory);  // the layer retries
    if (rc != 0) io.complete(bdev::IoStatus::kFailed);
  }
  bdev::Manager& mgr;
  bdev::Desc* base;
  std::unique_ptr<CutSwitch> sw;
};

Result<CutSwitch*> CutSwitch::create(bdev::Manager& mgr, const std::string& base,
                                     const std::string& name, uint64_t max_blocks) {
  auto sw = std::unique_ptr<CutSwitch>(new CutSwitch);
  CutSwitch* raw = sw.get();
  raw->mgr_ = &mgr;
  raw->name_ = name;
  auto d = mgr.open(base, true, on_base_event, raw);
  if (!d.ok()) return d.error();
  bdev::Bdev& b = d.value()->bdev();
  bdev::BdevProperties p;
  p.name = name;
  p.product = "cut switch";
  p.block_size = b.block_size();
  p.num_blocks = max_blocks ? std::min(max_blocks, b.num_blocks()) : b.num_blocks();
  p.write_cache = b.props().write_cache;
  p.required_alignment = b.props().required_alignment;
  p.max_transfer_blocks = b.props().max_transfer_blocks;
  auto r = mgr.register_bdev(std::move(p), std::make_unique<Backend>(mgr, d.value(), std::move(sw)),
                             "cut_switch");
  if (!r.ok()) {
    mgr.close(d.value());
    return r.error();
  }
  return raw;
}

void CutSwitch::on_base_event(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
  auto* self = static_cast<CutSwitch*>(ctx);
  if (e == bdev::DescEvent::kRemove) (void)self->mgr_->unregister_bdev(self->name_);
}

}  // namespace pollux::blob::crash
