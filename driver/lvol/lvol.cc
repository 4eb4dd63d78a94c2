#include "driver/lvol/lvol.h"

#include <functional>
#include <mutex>

namespace pollux::lvol {
namespace {

const char kStoreName[] = "lvs.name";
const char kLvolName[] = "lvol.name";

// Heap closures behind the blobstore's (function pointer, arg) callbacks: set-up paths only.
struct OpBox {
  std::function<void(int)> f;
  static void cb(void* a, int rc) {
    auto* b = static_cast<OpBox*>(a);
    auto f = std::move(b->f);
    delete b;
    f(rc);
  }
};
struct IdBox {
  std::function<void(blob::BlobId, int)> f;
  static void cb(void* a, blob::BlobId id, int rc) {
    auto* b = static_cast<IdBox*>(a);
    auto f = std::move(b->f);
    delete b;
    f(id, rc);
  }
};
struct BlobBox {
  std::function<void(blob::Blob*, int)> f;
  static void cb(void* a, blob::Blob* bl, int rc) {
    auto* b = static_cast<BlobBox*>(a);
    auto f = std::move(b->f);
    delete b;
    f(bl, rc);
  }
};
struct StoreBox {
  std::function<void(blob::Blobstore*, int)> f;
  static void cb(void* a, blob::Blobstore* bs, int rc) {
    auto* b = static_cast<StoreBox*>(a);
    auto f = std::move(b->f);
    delete b;
    f(bs, rc);
  }
};

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, LvolStore*>& registry() {
  static std::map<std::string, LvolStore*> r;
  return r;
}

std::string internal_name(const blob::Blob* b, const char* key) {
  const void* v;
  std::size_t n;
  if (b->get_xattr(key, &v, &n, true) != 0) return "";
  return std::string(static_cast<const char*>(v), n);
}

bool valid_name(const std::string& n) { return !n.empty() && n.size() <= 63 && n.find('/') == std::string::npos; }

// ----------------------------------------------------------------------- the lvol bdev ----

class LvolBackend final : public bdev::Backend {
 public:
  struct Channel {
    blob::Blobstore* bs;
    event::IoChannel* ch;
  };
  struct IoCtx {
    event::Thread* thread;
    int rc;
  };
  LvolBackend(bdev::Manager& mgr, Lvol* lvol) : mgr_(mgr), lvol_(lvol), bs_(&lvol->lvs->blobstore()) {
    mgr_.framework().register_io_device(
        this,
        [](void* dev, void* ctx) {
          auto* self = static_cast<LvolBackend*>(dev);
          auto* c = static_cast<Channel*>(ctx);
          c->bs = self->bs_;
          c->ch = self->bs_->alloc_io_channel();
          return c->ch ? 0 : -ENOMEM;
        },
        [](void*, void* ctx) {
          auto* c = static_cast<Channel*>(ctx);
          if (c->ch) c->bs->free_io_channel(c->ch);
        },
        sizeof(Channel), "lvol");
  }
  bool supports(bdev::IoType t) const override {
    return t == bdev::IoType::kRead || t == bdev::IoType::kWrite || t == bdev::IoType::kFlush ||
           t == bdev::IoType::kWriteZeroes || t == bdev::IoType::kUnmap || t == bdev::IoType::kReset;
  }
  void* io_device() override { return this; }
  std::size_t io_ctx_size() const override { return sizeof(IoCtx); }
  void destruct() override { mgr_.framework().unregister_io_device(this, nullptr, nullptr); }

  static void done(void* arg, int rc) {
    static_cast<bdev::BdevIo*>(arg)->complete(rc == 0 ? bdev::IoStatus::kSuccess : bdev::IoStatus::kFailed);
  }
  void submit(bdev::BdevIo& io, void* ctx) override {
    auto* c = static_cast<Channel*>(ctx);
    blob::Blob* b = lvol_->blob;
    int rc = 0;
    switch (io.type()) {
      case bdev::IoType::kRead:
        rc = bs_->readv(b, c->ch, io.iovs(), io.iovcnt(), io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kWrite:
        rc = bs_->writev(b, c->ch, io.iovs(), io.iovcnt(), io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kWriteZeroes:
        rc = bs_->write_zeroes(b, c->ch, io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kUnmap:
        rc = bs_->unmap(b, c->ch, io.offset_blocks(), io.num_blocks(), done, &io);
        break;
      case bdev::IoType::kFlush: return flush(io);
      case bdev::IoType::kReset: return io.complete(bdev::IoStatus::kSuccess);
      default: rc = -ENOTSUP;
    }
    if (rc == -ENOMEM) io.complete(bdev::IoStatus::kNoMemory);
    else if (rc != 0) io.complete(bdev::IoStatus::kFailed);
  }

 private:
  // A flush syncs the blob's metadata on the metadata thread (which flushes the base), so
  // what thin writes allocated is durable too; it completes back on the submitting thread.
  void flush(bdev::BdevIo& io) {
    auto* x = static_cast<IoCtx*>(io.module_ctx());
    x->thread = event::Thread::current();
    mgr_.framework().send_reliably(bs_->md_thread(), on_md_thread, &io);
  }
  static void on_md_thread(void* arg) {
    auto* io = static_cast<bdev::BdevIo*>(arg);
    auto* self = static_cast<LvolBackend*>(io->bdev().backend().io_device());
    self->bs_->sync_md(self->lvol_->blob, synced, io);
  }
  static void synced(void* arg, int rc) {
    auto* io = static_cast<bdev::BdevIo*>(arg);
    auto* x = static_cast<IoCtx*>(io->module_ctx());
    x->rc = rc;
    auto* self = static_cast<LvolBackend*>(io->bdev().backend().io_device());
    self->mgr_.framework().send_reliably(x->thread, [](void* a) {
      auto* io = static_cast<bdev::BdevIo*>(a);
      done(io, static_cast<IoCtx*>(io->module_ctx())->rc);
    }, io);
  }

  bdev::Manager& mgr_;
  Lvol* lvol_;
  blob::Blobstore* bs_;
};

}  // namespace

std::string Lvol::bdev_name() const { return lvs->name() + "/" + name; }

LvolStore::~LvolStore() {
  std::lock_guard lock(registry_mu());
  auto it = registry().find(name_);
  if (it != registry().end() && it->second == this) registry().erase(it);
}

LvolStore* LvolStore::find(const std::string& name) {
  std::lock_guard lock(registry_mu());
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

std::vector<LvolStore*> LvolStore::loaded_on(const bdev::Manager& mgr) {
  std::lock_guard lock(registry_mu());
  std::vector<LvolStore*> out;
  for (const auto& [name, lvs] : registry()) {
    if (&lvs->mgr_ == &mgr) out.push_back(lvs);
  }
  return out;
}

Lvol* LvolStore::lvol(const std::string& name) {
  auto it = lvols_.find(name);
  return it == lvols_.end() ? nullptr : it->second.get();
}

std::vector<std::string> LvolStore::lvol_names() const {
  std::vector<std::string> out;
  for (const auto& [n, l] : lvols_) out.push_back(n);
  return out;
}

int LvolStore::register_bdev(Lvol* l) {
  bdev::BdevProperties p;
  p.name = l->bdev_name();
  p.product = "Logical Volume";
  p.block_size = static_cast<uint32_t>(bs_->io_unit_size());
  p.num_blocks = l->blob->num_io_units();
  p.write_cache = bs_->bdev().props().write_cache;
  if (p.num_blocks == 0) return 0;  // a zero-sized lvol has no bdev until it grows
  auto r = mgr_.register_bdev(std::move(p), std::make_unique<LvolBackend>(mgr_, l), "lvol");
  return r.ok() ? 0 : r.error().code;
}

void LvolStore::unregister_bdev(Lvol* l, std::function<void()> then) {
  auto* box = new std::function<void()>(std::move(then));
  const int rc = mgr_.unregister_bdev(l->bdev_name(), [](void* a) {
    auto* f = static_cast<std::function<void()>*>(a);
    auto fn = std::move(*f);
    delete f;
    fn();
  }, box);
  if (rc != 0) {  // no bdev (zero-sized)
    auto fn = std::move(*box);
    delete box;
    fn();
  }
}

void LvolStore::add_lvol(blob::Blob* b, const std::string& name, std::function<void(Lvol*, int)> done) {
  if (crashing_) return done(nullptr, -ENXIO);  // crash() unregisters only what it saw
  auto l = std::make_unique<Lvol>();
  l->lvs = this;
  l->name = name;
  l->blob = b;
  Lvol* raw = l.get();
  lvols_[name] = std::move(l);
  const int rc = register_bdev(raw);
  if (rc != 0) {
    lvols_.erase(name);
    return done(nullptr, rc);
  }
  done(raw, 0);
}

void LvolStore::open_and_add(blob::BlobId id, const std::string& name, LvolDoneFn cb, void* arg) {
  bs_->open_blob(id, BlobBox::cb, new BlobBox{[this, name, cb, arg](blob::Blob* b, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    add_lvol(b, name, [cb, arg](Lvol* l, int rc) { cb(arg, l, rc); });
  }});
}

// ----------------------------------------------------------------------- the store ----

void LvolStore::create(bdev::Manager& mgr, const std::string& base, const std::string& name,
                       uint32_t cluster_size, StoreDoneFn cb, void* arg,
                       env::MemoryRegistry* dma, uint64_t md_pages) {
  if (!valid_name(name)) return cb(arg, nullptr, -EINVAL);
  if (find(name) != nullptr) return cb(arg, nullptr, -EEXIST);
  auto self = std::make_shared<LvolStore*>(nullptr);
  blob::StoreOptions o = store_options(self, dma);
  o.cluster_size = cluster_size ? cluster_size : 4u << 20;
  o.md_pages = md_pages;
  blob::Blobstore::init(mgr, base, o, StoreBox::cb, new StoreBox{[&mgr, name, self, cb, arg](blob::Blobstore* bs, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    auto* lvs = new LvolStore(mgr, bs);
    *self = lvs;
    lvs->name_ = name;
    blob::BlobOptions so;
    so.thin = true;
    blob::Xattr x{kStoreName, std::vector<uint8_t>(name.begin(), name.end())};
    bs->create_blob(so, IdBox::cb, new IdBox{[lvs, bs, x, self, cb, arg](blob::BlobId id, int rc) {
      auto fail = [lvs, self, cb, arg](int rc) {
        *self = nullptr;
        lvs->bs_->abandon();
        delete lvs;
        cb(arg, nullptr, rc);
      };
      if (rc != 0) return fail(rc);
      blob::Blob* sb = bs->find(id);
      sb->set_xattr(x.name, x.value.data(), x.value.size(), true);
      bs->sync_md(sb, OpBox::cb, new OpBox{[lvs, bs, id, fail, cb, arg](int rc) {
        if (rc != 0) return fail(rc);
        bs->set_super_blob(id, OpBox::cb, new OpBox{[lvs, fail, cb, arg](int rc) {
          if (rc != 0) return fail(rc);
          {
            std::lock_guard lock(registry_mu());
            registry()[lvs->name_] = lvs;
          }
          cb(arg, lvs, 0);
        }});
      }});
    }});
  }});
}

void LvolStore::load(bdev::Manager& mgr, const std::string& base, StoreDoneFn cb, void* arg,
                     env::MemoryRegistry* dma) {
  auto self = std::make_shared<LvolStore*>(nullptr);
  blob::Blobstore::load(mgr, base, store_options(self, dma), StoreBox::cb, new StoreBox{[&mgr, self, cb, arg](blob::Blobstore* bs, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    blob::Blob* super = bs->find(bs->super_blob());
    const std::string name = super ? internal_name(super, kStoreName) : "";
    if (name.empty() || find(name) != nullptr) {
      bs->abandon();
      return cb(arg, nullptr, name.empty() ? -EILSEQ : -EEXIST);
    }
    auto* lvs = new LvolStore(mgr, bs);
    *self = lvs;
    lvs->name_ = name;
    {
      std::lock_guard lock(registry_mu());
      registry()[name] = lvs;
    }
    // Open every lvol, one after another, then report.
    auto ids = std::make_shared<std::vector<blob::BlobId>>();
    for (blob::BlobId id : bs->blob_ids())
      if (id != bs->super_blob() && !internal_name(bs->find(id), kLvolName).empty()) ids->push_back(id);
    auto next = std::make_shared<std::function<void(std::size_t)>>();
    *next = [lvs, ids, next, cb, arg](std::size_t i) {
      if (i == ids->size()) {
        LvolStore* store = lvs;  // copies: clearing the loop destroys this closure
        StoreDoneFn done = cb;
        void* done_arg = arg;
        auto keep = next;
        *next = nullptr;
        return done(done_arg, store, 0);
      }
      const std::string n = internal_name(lvs->bs_->find((*ids)[i]), kLvolName);
      struct Ctx {
        std::shared_ptr<std::function<void(std::size_t)>> next;
        std::size_t i;
        LvolStore* lvs;
        StoreDoneFn cb;
        void* arg;
        int rc;
      };
      lvs->open_and_add((*ids)[i], n, [](void* a, Lvol*, int rc) {
        auto* c = static_cast<Ctx*>(a);
        if (rc == 0) {
          auto next = c->next;
          const std::size_t i = c->i;
          delete c;
          return (*next)(i + 1);
        }
        // Half loaded: the lvol bdevs registered so far go, and the store with them (writing
        // nothing), before the caller hears of the failure.
        *c->next = nullptr;
        c->next.reset();
        c->rc = rc;
        c->lvs->crash([](void* a, int) {
          auto* c = static_cast<Ctx*>(a);
          const StoreDoneFn cb = c->cb;
          void* arg = c->arg;
          const int rc = c->rc;
          delete c;
          cb(arg, nullptr, rc);
        }, c);
      }, new Ctx{next, i, lvs, cb, arg, 0});
    };
    (*next)(0);
  }});
}

// The base's hot removal crashes the store (nothing can be written to a base that is gone).
blob::StoreOptions LvolStore::store_options(std::shared_ptr<LvolStore*> self,
                                            env::MemoryRegistry* dma) {
  blob::StoreOptions o;
  o.bstype = kBstype;
  o.registry = dma;
  o.on_base_removed = [self] {
    if (*self != nullptr) (*self)->crash(nullptr, nullptr);
  };
  return o;
}

void LvolStore::crash(DoneFn cb, void* arg) {
  if (crashing_) {
    if (cb) cb(arg, -EALREADY);
    return;
  }
  crashing_ = true;
  // Two things end before the store is freed: the blobstore (once its channels are gone) and
  // every lvol bdev's unregistration.
  struct Wait {
    LvolStore* lvs;
    DoneFn cb;
    void* arg;
    std::size_t left;
    void one() {
      if (--left > 0) return;
      LvolStore* s = lvs;
      DoneFn c = cb;
      void* a = arg;
      delete this;
      s->bs_ = nullptr;
      delete s;
      if (c) c(a, 0);
    }
  };
  const std::vector<std::string> names = lvol_names();
  auto* w = new Wait{this, cb, arg, names.size() + 1};
  bs_->crash([](void* a, int) { static_cast<Wait*>(a)->one(); }, w);
  for (const std::string& n : names) unregister_bdev(lvol(n), [w] { w->one(); });
}

void LvolStore::unload(DoneFn cb, void* arg) {
  auto names = std::make_shared<std::vector<std::string>>(lvol_names());
  auto step = std::make_shared<std::function<void(std::size_t)>>();
  *step = [this, names, step, cb, arg](std::size_t i) {
    if (i == names->size()) {
      LvolStore* self = this;  // copies: clearing the loop destroys this closure
      DoneFn done = cb;
      void* done_arg = arg;
      auto keep = step;
      *step = nullptr;
      self->bs_->unload(OpBox::cb, new OpBox{[self, done, done_arg](int rc) {
        if (rc == 0) delete self;
        done(done_arg, rc);
      }});
      return;
    }
    Lvol* l = lvol((*names)[i]);
    unregister_bdev(l, [this, l, step, i] {
      bs_->close_blob(l->blob, OpBox::cb, new OpBox{[this, l, step, i](int) {
        lvols_.erase(l->name);
        (*step)(i + 1);
      }});
    });
  };
  (*step)(0);
}

// ----------------------------------------------------------------------- the lvols ----

void LvolStore::create_lvol(const std::string& name, uint64_t size, bool thin, LvolDoneFn cb, void* arg) {
  if (!valid_name(name)) return cb(arg, nullptr, -EINVAL);
  if (lvols_.count(name)) return cb(arg, nullptr, -EEXIST);
  blob::BlobOptions o;
  o.num_clusters = (size + cluster_size() - 1) / cluster_size();
  o.thin = thin;
  blob::BlobOptions opts = o;
  bs_->create_blob(opts, IdBox::cb, new IdBox{[this, name, cb, arg](blob::BlobId id, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    blob::Blob* b = bs_->find(id);
    b->set_xattr(kLvolName, name.data(), name.size(), true);
    bs_->sync_md(b, OpBox::cb, new OpBox{[this, id, name, cb, arg](int rc) {
      if (rc != 0) return cb(arg, nullptr, rc);
      open_and_add(id, name, cb, arg);
    }});
  }});
}

void LvolStore::snapshot(Lvol* l, const std::string& snap, LvolDoneFn cb, void* arg) {
  if (!valid_name(snap)) return cb(arg, nullptr, -EINVAL);
  if (lvols_.count(snap)) return cb(arg, nullptr, -EEXIST);
  std::vector<blob::Xattr> none;
  bs_->snapshot(l->blob->id(), none, IdBox::cb, new IdBox{[this, snap, cb, arg](blob::BlobId id, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    blob::Blob* s = bs_->find(id);
    s->set_xattr(kLvolName, snap.data(), snap.size(), true);
    bs_->sync_md(s, OpBox::cb, new OpBox{[this, id, snap, cb, arg](int rc) {
      if (rc != 0) return cb(arg, nullptr, rc);
      open_and_add(id, snap, cb, arg);
    }});
  }});
}

void LvolStore::clone(Lvol* s, const std::string& name, LvolDoneFn cb, void* arg) {
  if (!valid_name(name)) return cb(arg, nullptr, -EINVAL);
  if (lvols_.count(name)) return cb(arg, nullptr, -EEXIST);
  std::vector<blob::Xattr> none;
  bs_->clone(s->blob->id(), none, IdBox::cb, new IdBox{[this, name, cb, arg](blob::BlobId id, int rc) {
    if (rc != 0) return cb(arg, nullptr, rc);
    blob::Blob* c = bs_->find(id);
    c->set_xattr(kLvolName, name.data(), name.size(), true);
    bs_->sync_md(c, OpBox::cb, new OpBox{[this, id, name, cb, arg](int rc) {
      if (rc != 0) return cb(arg, nullptr, rc);
      open_and_add(id, name, cb, arg);
    }});
  }});
}

void LvolStore::inflate(Lvol* l, DoneFn cb, void* arg) { bs_->inflate(l->blob->id(), cb, arg); }
void LvolStore::decouple_parent(Lvol* l, DoneFn cb, void* arg) { bs_->decouple_parent(l->blob->id(), cb, arg); }

// Resize and rename re-register the bdev (its size or name changes): users holding it open
// are told kRemove, as when any bdev goes.
void LvolStore::resize(Lvol* l, uint64_t size, DoneFn cb, void* arg) {
  const uint64_t clusters = (size + cluster_size() - 1) / cluster_size();
  unregister_bdev(l, [this, l, clusters, cb, arg] {
    bs_->resize(l->blob, clusters, OpBox::cb, new OpBox{[this, l, cb, arg](int rc) {
      bs_->sync_md(l->blob, OpBox::cb, new OpBox{[this, l, rc, cb, arg](int rc2) {
        const int reg = register_bdev(l);
        cb(arg, rc != 0 ? rc : rc2 != 0 ? rc2 : reg);
      }});
    }});
  });
}

void LvolStore::rename(Lvol* l, const std::string& new_name, DoneFn cb, void* arg) {
  if (!valid_name(new_name)) return cb(arg, -EINVAL);
  if (lvols_.count(new_name)) return cb(arg, -EEXIST);
  unregister_bdev(l, [this, l, new_name, cb, arg] {
    l->blob->set_xattr(kLvolName, new_name.data(), new_name.size(), true);
    bs_->sync_md(l->blob, OpBox::cb, new OpBox{[this, l, new_name, cb, arg](int rc) {
      if (rc == 0) {
        auto owned = std::move(lvols_[l->name]);
        lvols_.erase(l->name);
        l->name = new_name;
        lvols_[new_name] = std::move(owned);
      }
      const int reg = register_bdev(l);
      cb(arg, rc != 0 ? rc : reg);
    }});
  });
}

void LvolStore::destroy(Lvol* l, DoneFn cb, void* arg) {
  if (l->blob->clone_count() > 1) return cb(arg, -EBUSY);  // one clone: merged into it
  unregister_bdev(l, [this, l, cb, arg] {
    bs_->close_blob(l->blob, OpBox::cb, new OpBox{[this, l, cb, arg](int rc) {
      if (rc != 0) return cb(arg, rc);
      const blob::BlobId id = l->blob->id();
      lvols_.erase(l->name);
      bs_->delete_blob(id, cb, arg);
    }});
  });
}

}  // namespace pollux::lvol
