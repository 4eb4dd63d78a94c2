// The registry: bdevs, names and aliases, descriptors, claims, virtual-module examine and the
// unregister chain. Set-up paths: they take the manager's mutex.
#include <algorithm>

#include "driver/bdev/bounce.h"
#include "driver/bdev/channel.h"

namespace pollux::bdev {

const char* to_string(IoType t) {
  static const char* names[] = {"read", "write", "write_zeroes", "unmap", "flush", "reset",
                                "compare", "compare_and_write", "nvme_passthru"};
  return t < IoType::kCount ? names[static_cast<int>(t)] : "?";
}

const char* to_string(IoStatus s) {
  switch (s) {
    case IoStatus::kPending: return "pending";
    case IoStatus::kSuccess: return "success";
    case IoStatus::kFailed: return "failed";
    case IoStatus::kNvmeError: return "nvme error";
    case IoStatus::kNoMemory: return "no memory";
    case IoStatus::kAborted: return "aborted";
    case IoStatus::kRemoved: return "removed";
    case IoStatus::kMiscompare: return "miscompare";
  }
  return "?";
}

void IoStats::merge(const IoStats& o) {
  for (std::size_t i = 0; i < kIoTypes; ++i) by_type[i].merge(o.by_type[i]);
  read_latency.merge(o.read_latency);
  write_latency.merge(o.write_latency);
  other_latency.merge(o.other_latency);
  retries += o.retries;
  splits += o.splits;
  bounced += o.bounced;
  qos_queued += o.qos_queued;
  reset_queued += o.reset_queued;
}

Manager::Manager(event::Framework& fw, ManagerOptions o)
    : fw_(fw), opts_(o), io_pool_(o.io_pool_size) {}

Manager::~Manager() = default;

Result<std::unique_ptr<Manager>> Manager::create(event::Framework& fw, ManagerOptions o) {
  if (o.io_pool_size == 0 || o.io_cache_size == 0) return make_error(EINVAL, "empty bdev_io pool");
  auto m = std::unique_ptr<Manager>(new Manager(fw, o));
  // bdev_io objects in chunks: allocated once, never per I/O.
  constexpr std::size_t kChunk = 1024;
  for (std::size_t made = 0; made < o.io_pool_size; made += kChunk) {
    const std::size_t n = std::min(kChunk, o.io_pool_size - made);
    m->io_chunks_.push_back(std::make_unique<BdevIo[]>(n));
    for (std::size_t i = 0; i < n; ++i) m->io_pool_.try_push(&m->io_chunks_.back()[i]);
  }
  m->bounce_ = std::make_unique<Bounce>();
  if (o.bounce_buffers) {
    auto pool = env::DmaBufferPool::create(env::MemoryRegistry::global(), o.bounce_buffer_size,
                                           o.bounce_buffers);
    if (!pool) return pool.error();
    m->bounce_->pool = std::move(pool).value();
  }
  return m;
}

Bdev* Manager::find(const std::string& name) {
  std::lock_guard lock(mu_);
  for (auto& b : bdevs_) {
    if (b->removing_) continue;
    if (b->props_.name == name) return b.get();
    for (const auto& a : b->props_.aliases)
      if (a == name) return b.get();
  }
  return nullptr;
}

std::vector<std::string> Manager::bdev_names() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (auto& b : bdevs_)
    if (!b->removing_) out.push_back(b->name());
  return out;
}

std::vector<Bdev*> Manager::bdevs() {
  std::lock_guard lock(mu_);
  std::vector<Bdev*> out;
  for (auto& b : bdevs_)
    if (!b->removing_) out.push_back(b.get());
  return out;
}

Result<Bdev*> Manager::register_bdev(BdevProperties props, std::unique_ptr<Backend> backend,
                                     std::string module) {
  if (!backend) return make_error(EINVAL, "bdev " + props.name + ": no backend");
  // A refused backend still gets destruct(): it may have registered an io_device already.
  auto refuse = [&backend](int code, std::string why) {
    backend->destruct();
    return make_error(code, std::move(why));
  };
  if (props.name.empty()) return refuse(EINVAL, "bdev needs a name");
  if (props.num_blocks == 0 || props.block_size == 0 || props.block_size % 512 != 0)
    return refuse(EINVAL, "bdev " + props.name + ": bad size (" +
                              std::to_string(props.num_blocks) + " blocks of " +
                              std::to_string(props.block_size) + " B)");
  if (backend->io_ctx_size() > BdevIo::kMaxModuleCtx)
    return refuse(EINVAL, "bdev " + props.name + ": module context too large");
  Bdev* b;
  std::vector<VirtualModule*> examiners;
  {
    std::lock_guard lock(mu_);
    std::vector<std::string> names = props.aliases;
    names.push_back(props.name);
    for (auto& other : bdevs_) {
      if (other->removing_) continue;
      std::vector<std::string> theirs = other->props_.aliases;
      theirs.push_back(other->props_.name);
      for (const auto& n : names)
        if (std::find(theirs.begin(), theirs.end(), n) != theirs.end())
          return refuse(EEXIST, "bdev name '" + n + "' is already taken");
    }
    auto owned = std::make_unique<Bdev>();
    owned->props_ = std::move(props);
    owned->backend_ = std::move(backend);
    owned->module_ = std::move(module);
    owned->mgr_ = this;
    b = owned.get();
    bdevs_.push_back(std::move(owned));
    examiners = vmodules_;
  }
  fw_.register_io_device(b, channel_create, channel_destroy, sizeof(Channel), b->name());
  for (VirtualModule* m : examiners) m->examine(*this, *b);
  return b;
}

void Manager::add_virtual_module(VirtualModule* m) {
  std::vector<Bdev*> existing;
  {
    std::lock_guard lock(mu_);
    vmodules_.push_back(m);
  }
  for (Bdev* b : bdevs()) m->examine(*this, *b);
}

void Manager::notify(Desc* d, DescEvent e) {
  if (d->event_fn_ == nullptr) return;
  struct Note {
    Manager* mgr;
    uint64_t desc_id;
    DescEvent e;
  };
  auto* n = new Note{this, d->id_, e};
  auto run = [](void* arg) {
    std::unique_ptr<Note> note(static_cast<Note*>(arg));
    DescEventFn fn = nullptr;
    void* ctx = nullptr;
    Bdev* bdev = nullptr;
    {
      std::lock_guard lock(note->mgr->mu_);
      for (auto& desc : note->mgr->descs_) {
        if (desc->id_ == note->desc_id) {
          fn = desc->event_fn_;
          ctx = desc->event_ctx_;
          bdev = desc->bdev_;
        }
      }
    }
    if (fn != nullptr) fn(note->e, *bdev, ctx);  // closed meanwhile: nobody to tell
  };
  if (d->thread_ == nullptr || !fw_.send_reliably(d->thread_, run, n)) run(n);
}

int Manager::unregister_bdev(const std::string& name, event::MsgFn done, void* ctx) {
  Bdev* b = find(name);
  if (b == nullptr) return -ENODEV;
  std::vector<Desc*> to_tell;
  {
    std::lock_guard lock(mu_);
    b->removing_ = true;
    b->unregister_thread_ = event::Thread::current();
    b->unregister_done_ = done;
    b->unregister_ctx_ = ctx;
    to_tell = b->descs_;
  }
  for (Desc* d : to_tell) notify(d, DescEvent::kRemove);
  maybe_destruct(b);
  return 0;
}

// Once a removed bdev has no descriptor left: stop its QoS poller (on its own thread), wait
// for its channels, destruct, forget it.
void Manager::maybe_destruct(Bdev* b) {
  {
    std::lock_guard lock(mu_);
    if (!b->removing_ || !b->descs_.empty() || b->destructing_) return;
    b->destructing_ = true;
  }
  stop_qos_poller(
      *b, [](void* arg) {
        auto* bdev = static_cast<Bdev*>(arg);
        bdev->mgr_->destruct_when_unused(bdev);
      },
      b);
}

void Manager::destruct_when_unused(Bdev* b) {
  fw_.unregister_io_device(
      b,
      [](void* arg) {
        auto* bdev = static_cast<Bdev*>(arg);
        Manager* mgr = bdev->mgr_;
        bdev->backend_->destruct();
        event::Thread* t = bdev->unregister_thread_;
        event::MsgFn done = bdev->unregister_done_;
        void* ctx = bdev->unregister_ctx_;
        {
          std::lock_guard lock(mgr->mu_);
          auto& v = mgr->bdevs_;
          v.erase(std::find_if(v.begin(), v.end(), [&](auto& p) { return p.get() == bdev; }));
        }
        if (done != nullptr && (t == nullptr || t->send_msg(done, ctx) != 0)) done(ctx);
      },
      b);
}

Result<Desc*> Manager::open(const std::string& name, bool write, DescEventFn fn, void* ctx) {
  Bdev* b = find(name);
  if (b == nullptr) return make_error(ENODEV, "no bdev named '" + name + "'");
  std::lock_guard lock(mu_);
  if (b->removing_) return make_error(ENODEV, "bdev '" + name + "' is being removed");
  if (write && b->claimed_by_ != nullptr)
    return make_error(EPERM, "bdev '" + name + "' is claimed by " + b->claim_module_);
  auto d = std::make_unique<Desc>();
  d->bdev_ = b;
  d->id_ = next_desc_id_++;
  d->write_ = write;
  d->event_fn_ = fn;
  d->event_ctx_ = ctx;
  d->thread_ = event::Thread::current();
  b->descs_.push_back(d.get());
  descs_.push_back(std::move(d));
  return descs_.back().get();
}

std::string Manager::claim_module(Bdev& bdev) {
  std::lock_guard lock(mu_);
  return bdev.claimed_by_ != nullptr ? bdev.claim_module_ : std::string();
}

void Manager::close(Desc* d) {
  Bdev* b = d->bdev_;
  {
    std::lock_guard lock(mu_);
    auto& v = b->descs_;
    v.erase(std::remove(v.begin(), v.end(), d), v.end());
    if (b->claimed_by_ == d) {
      b->claimed_by_ = nullptr;
      b->claim_module_.clear();
    }
    descs_.erase(std::find_if(descs_.begin(), descs_.end(),
                              [d](auto& p) { return p.get() == d; }));
  }
  maybe_destruct(b);
}

int Manager::claim(Desc* d, const std::string& module) {
  std::lock_guard lock(mu_);
  Bdev* b = d->bdev_;
  if (b->claimed_by_ != nullptr) return -EPERM;
  for (Desc* other : b->descs_)
    if (other != d && other->write_) return -EPERM;
  b->claimed_by_ = d;
  b->claim_module_ = module;
  d->write_ = true;
  return 0;
}

void Manager::release_claim(Bdev& b) {
  std::lock_guard lock(mu_);
  b.claimed_by_ = nullptr;
  b.claim_module_.clear();
}

}  // namespace pollux::bdev
