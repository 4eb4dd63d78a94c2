#include "driver/bdev/modules/vbdev.h"

#include <algorithm>
#include <new>

namespace pollux::bdev {

// The Backend the bdev layer sees: owns the VirtualBdev until the layer destructs it, then
// hands it to the teardown chain (which outlives the Bdev object).
class VbdevBackend final : public Backend {
 public:
  explicit VbdevBackend(std::unique_ptr<VirtualBdev> v) : v_(std::move(v)) {}
  bool supports(IoType t) const override { return v_->supports(t); }
  void* io_device() override { return v_.get(); }
  void submit(BdevIo& io, void* ctx) override {
    v_->submit(io, *static_cast<VbdevChannel*>(ctx));
  }
  void abort(BdevIo& io, void* ctx) override { v_->abort(io, *static_cast<VbdevChannel*>(ctx)); }
  void destruct() override { v_.release()->on_destruct(); }
  std::size_t io_ctx_size() const override { return v_->io_ctx_size(); }

 private:
  std::unique_ptr<VirtualBdev> v_;
};

BdevProperties inherit_properties(const Bdev& base, std::string name, std::string product) {
  BdevProperties p;
  p.name = std::move(name);
  p.product = std::move(product);
  p.block_size = base.block_size();
  p.num_blocks = base.num_blocks();
  p.optimal_io_boundary = base.props().optimal_io_boundary;
  p.write_cache = base.props().write_cache;
  p.stores_data = base.props().stores_data;
  return p;
}

// ---------------------------------------------------------------------- VirtualBdev ----

VirtualBdev::VirtualBdev(VbdevModule& module, std::string name)
    : module_(module), mgr_(module.manager()), name_(std::move(name)) {}

Desc* VirtualBdev::base_desc() const { return base_->desc(); }
Bdev& VirtualBdev::base() const { return base_->bdev(); }
bool VirtualBdev::supports(IoType t) const { return base_->bdev().supports(t); }

int VirtualBdev::io_channel_create(void* io_device, void* ctx) {
  auto* v = static_cast<VirtualBdev*>(io_device);
  auto* ch = new (ctx) VbdevChannel;
  ch->vbdev = v;
  ch->base_ch = v->mgr_.get_io_channel(v->base_desc());
  if (ch->base_ch == nullptr) return -ENOMEM;
  const int rc = v->channel_create(*ch);
  if (rc != 0) {
    v->mgr_.put_io_channel(ch->base_ch);
    return rc;
  }
  return 0;
}

void VirtualBdev::io_channel_destroy(void* io_device, void* ctx) {
  auto* v = static_cast<VirtualBdev*>(io_device);
  auto* ch = static_cast<VbdevChannel*>(ctx);
  v->channel_destroy(*ch);
  v->mgr_.put_io_channel(ch->base_ch);
}

int VirtualBdev::remove(event::MsgFn done, void* ctx) {
  if (removing_.exchange(true, std::memory_order_acq_rel)) return -EALREADY;
  struct Removal {  // not v itself: someone may unregister it directly meanwhile
    Manager* mgr;
    std::string name;
    event::MsgFn done;
    void* ctx;
  };
  mgr_.framework().for_each_channel(
      this,
      [](event::ChannelIter& it) {
        auto* ch = static_cast<VbdevChannel*>(it.channel()->ctx());
        ch->vbdev->channel_quiesce(*ch);
        it.next(0);
      },
      new Removal{&mgr_, name_, done, ctx},
      [](void* arg, int) {
        auto* r = static_cast<Removal*>(arg);
        if (r->mgr->unregister_bdev(r->name, r->done, r->ctx) != 0 && r->done)
          r->done(r->ctx);  // already unregistered by someone else
        delete r;
      });
  return 0;
}

void VirtualBdev::on_destruct() {
  mgr_.framework().unregister_io_device(
      this,
      [](void* arg) {
        auto* v = static_cast<VirtualBdev*>(arg);
        if (v->registered_) v->module_.detach(v);  // else register_vbdev undid its own steps
        delete v;
      },
      this);
}

void VirtualBdev::complete_with(BdevIo& io, IoStatus status, uint16_t nvme_status,
                                uint32_t nvme_cdw0) {
  const bool nvme = nvme_status != 0 || nvme_cdw0 != 0;
  if (nvme && (status == IoStatus::kSuccess || status == IoStatus::kNvmeError ||
               status == IoStatus::kMiscompare)) {
    io.complete_nvme(nvme_status, nvme_cdw0);  // yields the same status, keeps SCT/SC/DW0
  } else {
    io.complete(status);
  }
}

void VirtualBdev::complete_like(BdevIo& io, const BdevIo& base_io) {
  complete_with(io, base_io.status(), base_io.nvme_status(), base_io.nvme_cdw0());
}

void VirtualBdev::complete_from_base(BdevIo& base_io, bool, void* cb_arg) {
  complete_like(*static_cast<BdevIo*>(cb_arg), base_io);
}

void VirtualBdev::abort(BdevIo& io, VbdevChannel& ch) {
  mgr_.abort(base_desc(), ch.base_ch, &io);
}

void VirtualBdev::forward(BdevIo& io, VbdevChannel& ch, uint64_t shift, IoCompletionFn cb,
                          void* arg) {
  Desc* d = base_desc();
  event::IoChannel* bch = ch.base_ch;
  const uint64_t off = io.offset_blocks() + shift;
  const uint64_t n = io.num_blocks();
  int rc = -ENOTSUP;
  switch (io.type()) {
    case IoType::kRead: rc = mgr_.readv(d, bch, io.iovs(), io.iovcnt(), off, n, cb, arg); break;
    case IoType::kWrite: rc = mgr_.writev(d, bch, io.iovs(), io.iovcnt(), off, n, cb, arg); break;
    case IoType::kWriteZeroes: rc = mgr_.write_zeroes(d, bch, off, n, cb, arg); break;
    case IoType::kUnmap: rc = mgr_.unmap(d, bch, off, n, cb, arg); break;
    case IoType::kFlush: rc = mgr_.flush(d, bch, off, n, cb, arg); break;
    case IoType::kReset: rc = mgr_.reset(d, bch, cb, arg); break;
    case IoType::kCompare:
      // The core has no vectored compare: one buffer only.
      if (io.iovcnt() == 1) rc = mgr_.compare(d, bch, io.iovs()[0].iov_base, off, n, cb, arg);
      break;
    case IoType::kCompareAndWrite:
      if (io.iovcnt() == 1 && io.write_iovcnt() == 1)
        rc = mgr_.compare_and_write(d, bch, io.iovs()[0].iov_base, io.write_iovs()[0].iov_base,
                                    off, n, cb, arg);
      break;
    case IoType::kNvmePassthru:
      rc = mgr_.nvme_passthru(d, bch, io.nvme_cmd(), io.iovcnt() ? io.iovs()[0].iov_base : nullptr,
                              io.iovcnt() ? io.iovs()[0].iov_len : 0, cb, arg);
      break;
    default: break;
  }
  if (rc != 0) io.complete(rc == -ENOMEM ? IoStatus::kNoMemory : IoStatus::kFailed);
}

// ------------------------------------------------------------------------ VbdevBase ----

void VbdevBase::on_event(DescEvent e, Bdev&, void* ctx) {
  auto* b = static_cast<VbdevBase*>(ctx);
  if (e == DescEvent::kRemove) b->module_->remove_all(b);
}

// ---------------------------------------------------------------------- VbdevModule ----

VbdevModule::VbdevModule(Manager& mgr, std::string name) : mgr_(mgr), name_(std::move(name)) {
  mgr_.add_virtual_module(this);
}

VbdevModule::~VbdevModule() = default;

void VbdevModule::examine(Manager&, Bdev& base) {
  std::vector<Config*> unbuilt;
  {
    std::lock_guard lock(mu_);
    for (auto& c : configs_) {
      if (c->base != nullptr || c->building) continue;
      bool match = c->base_name == base.name();
      for (const auto& a : base.props().aliases) match |= c->base_name == a;
      if (!match) continue;
      c->building = true;
      unbuilt.push_back(c.get());
    }
  }
  // A failure here has no caller to report to: the configuration stays, unbuilt (configs()).
  for (Config* c : unbuilt) (void)build(c);
}

Result<int> VbdevModule::build(Config* c) {
  auto finish = [&](Result<int> r) {
    std::lock_guard lock(mu_);
    c->building = false;
    return r;
  };
  auto owned = std::make_unique<VbdevBase>();
  VbdevBase* b = owned.get();
  b->module_ = this;
  b->config_id_ = c->id;
  auto d = mgr_.open(c->base_name, false, &VbdevBase::on_event, b);
  if (!d) return finish(make_error(d.error().code, name_ + " " + c->id + ": " + d.error().message));
  b->desc_ = d.value();
  if (int rc = mgr_.claim(b->desc_, name_); rc != 0) {
    mgr_.close(b->desc_);
    return finish(make_error(rc, name_ + " " + c->id + ": base bdev '" + c->base_name +
                                     "' is already claimed or opened for writing"));
  }
  {
    std::lock_guard lock(mu_);
    bases_.push_back(std::move(owned));
    c->base = b;
  }
  Result<int> r = c->build(*b);
  bool empty;
  {
    std::lock_guard lock(mu_);
    empty = b->vbdevs_.empty();
    if (empty) {
      c->base = nullptr;
      owned = std::move(*std::find_if(bases_.begin(), bases_.end(),
                                      [b](auto& p) { return p.get() == b; }));
      bases_.erase(std::find(bases_.begin(), bases_.end(), nullptr));
    }
  }
  if (empty) {
    mgr_.close(b->desc_);
  } else if (!r) {
    remove_all(b);  // undo the vbdevs built before the failure
  }
  return finish(std::move(r));
}

Result<bool> VbdevModule::add_config(std::string id, std::string base_name, BuildFn build_fn) {
  Config* c;
  {
    std::lock_guard lock(mu_);
    for (auto& other : configs_)
      if (other->id == id) return make_error(EEXIST, name_ + ": '" + id + "' is already configured");
    auto owned = std::make_unique<Config>();
    owned->id = std::move(id);
    owned->base_name = std::move(base_name);
    owned->build = std::move(build_fn);
    c = owned.get();
    if (mgr_.find(c->base_name) != nullptr) c->building = true;
    configs_.push_back(std::move(owned));
  }
  if (!c->building) return false;
  Result<int> r = build(c);
  if (!r) {
    // A refused create leaves no configuration behind (vbdevs it built are being removed).
    std::lock_guard lock(mu_);
    configs_.erase(std::find_if(configs_.begin(), configs_.end(),
                                [c](auto& p) { return p.get() == c; }));
    return r.error();
  }
  return true;
}

int VbdevModule::remove_config(const std::string& id, event::MsgFn done, void* ctx) {
  std::vector<VirtualBdev*> victims;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(configs_.begin(), configs_.end(), [&](auto& c) { return c->id == id; });
    if (it == configs_.end()) return -ENOENT;
    if ((*it)->base != nullptr) victims = (*it)->base->vbdevs_;
    configs_.erase(it);
  }
  struct Count {
    std::atomic<std::size_t> left;
    event::MsgFn done;
    void* ctx;
    static void one(void* arg) {
      auto* c = static_cast<Count*>(arg);
      if (c->left.fetch_sub(1) != 1) return;
      if (c->done) c->done(c->ctx);
      delete c;
    }
  };
  auto* count = new Count{victims.size() + 1, done, ctx};  // +1: a guard until all are started
  for (VirtualBdev* v : victims)
    if (v->remove(&Count::one, count) != 0) Count::one(count);
  Count::one(count);
  return 0;
}

Result<Bdev*> VbdevModule::register_vbdev(std::unique_ptr<VirtualBdev> v, VbdevBase& base,
                                          BdevProperties props) {
  VirtualBdev* raw = v.get();
  raw->base_ = &base;
  props.name = raw->name_;
  event::Framework& fw = mgr_.framework();
  fw.register_io_device(raw, &VirtualBdev::io_channel_create, &VirtualBdev::io_channel_destroy,
                        sizeof(VbdevChannel), name_ + ":" + raw->name_);
  auto r = mgr_.register_bdev(std::move(props), std::make_unique<VbdevBackend>(std::move(v)), name_);
  if (!r) {
    // The core refused it: it either destructed the backend (raw is deleted once its
    // io_device is gone, without detach()) or just dropped it (raw is deleted already). This
    // call is then a no-op or the unregistration; raw is only a key here.
    fw.unregister_io_device(raw, nullptr, nullptr);
    return r.error();
  }
  std::lock_guard lock(mu_);
  raw->bdev_ = r.value();
  raw->registered_ = true;
  base.vbdevs_.push_back(raw);
  vbdevs_.push_back(raw);
  return r;
}

void VbdevModule::detach(VirtualBdev* v) {
  Desc* to_close = nullptr;
  std::unique_ptr<VbdevBase> gone;
  {
    std::lock_guard lock(mu_);
    vbdevs_.erase(std::find(vbdevs_.begin(), vbdevs_.end(), v));
    VbdevBase* b = v->base_;
    auto& list = b->vbdevs_;
    list.erase(std::find(list.begin(), list.end(), v));
    if (list.empty()) {
      for (auto& c : configs_)
        if (c->base == b) c->base = nullptr;
      auto it = std::find_if(bases_.begin(), bases_.end(), [b](auto& p) { return p.get() == b; });
      gone = std::move(*it);
      bases_.erase(it);
      to_close = b->desc_;
    }
  }
  if (to_close != nullptr) mgr_.close(to_close);
}

void VbdevModule::remove_all(VbdevBase* b) {
  std::vector<VirtualBdev*> victims;
  {
    std::lock_guard lock(mu_);
    victims = b->vbdevs_;
  }
  for (VirtualBdev* v : victims) (void)v->remove();
}

VirtualBdev* VbdevModule::find_vbdev(const std::string& name) {
  std::lock_guard lock(mu_);
  for (VirtualBdev* v : vbdevs_)
    if (v->name() == name) return v;
  return nullptr;
}

std::vector<std::string> VbdevModule::vbdev_names() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (VirtualBdev* v : vbdevs_) out.push_back(v->name());
  return out;
}

std::vector<std::pair<std::string, std::string>> VbdevModule::unbuilt() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& c : configs_)
    if (c->base == nullptr && !c->building) out.emplace_back(c->id, c->base_name);
  return out;
}

std::vector<std::pair<std::string, bool>> VbdevModule::configs() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, bool>> out;
  for (auto& c : configs_) out.emplace_back(c->id, c->base != nullptr);
  return out;
}

}  // namespace pollux::bdev
