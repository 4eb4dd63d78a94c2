#include "driver/lvol/config.h"

#include <cstring>

#include "driver/lvol/lvol.h"

namespace pollux::lvol {
namespace {

using bdev::ConfigContext;
using bdev::ConfigParams;
using bdev::Status;

struct Wait {
  bool done = false;
  int rc = 0;
  LvolStore* lvs = nullptr;
  Lvol* lvol = nullptr;
  static void op(void* a, int rc) { static_cast<Wait*>(a)->done = true, static_cast<Wait*>(a)->rc = rc; }
  static void with_store(void* a, LvolStore* s, int rc) {
    auto* w = static_cast<Wait*>(a);
    w->done = true, w->rc = rc, w->lvs = s;
  }
  static void with_lvol(void* a, Lvol* l, int rc) {
    auto* w = static_cast<Wait*>(a);
    w->done = true, w->rc = rc, w->lvol = l;
  }
  // Runs the calling thread's messages and pollers until the operation is done.
  int finish() {
    event::Thread* t = event::Thread::current();
    for (uint64_t i = 0; !done && t != nullptr && i < 100'000'000; ++i) {
      bool busy = false;
      t->poll(t->clock().now(), &busy);
    }
    return done ? rc : -ETIMEDOUT;
  }
};

// "lvs/lvol" → the lvol, or an error naming the field.
Result<Lvol*> find_lvol(const ConfigParams& p, const char* field) {
  auto full = p.string(field);
  if (!full) return full.error();
  const auto slash = full->find('/');
  if (slash == std::string::npos) return p.error(field, "expected \"<lvstore>/<lvol>\"");
  LvolStore* lvs = LvolStore::find(full->substr(0, slash));
  if (lvs == nullptr) return p.error(field, "no lvstore '" + full->substr(0, slash) + "'");
  Lvol* l = lvs->lvol(full->substr(slash + 1));
  if (l == nullptr) return p.error(field, "no lvol '" + *full + "'");
  return l;
}

Status result(const ConfigParams& p, const std::string& what, int rc) {
  if (rc == 0) return bdev::ok_status();
  return p.error(what + ": " + std::strerror(-rc));
}

}  // namespace

void register_lvol_config_methods(bdev::ConfigMethods& m) {
  m.replace("bdev_lvol_create_lvstore", [](ConfigContext& ctx, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"bdev_name", "lvs_name", "cluster_sz", "clear_method"}); !st) return st.error();
    auto base = p.string("bdev_name");
    if (!base) return base.error();
    auto name = p.string("lvs_name");
    if (!name) return name.error();
    auto cluster = p.u64_or("cluster_sz", 4u << 20);
    if (!cluster) return cluster.error();
    if (*cluster < 4096 || *cluster % 4096 || *cluster > (1u << 30))
      return p.error("cluster_sz", "a multiple of 4096 up to 1 GiB");
    Wait w;
    LvolStore::create(ctx.mgr, *base, *name, static_cast<uint32_t>(*cluster), Wait::with_store, &w);
    return result(p, "create lvstore " + *name + " on " + *base, w.finish());
  });
  m.replace("bdev_lvol_load_lvstore", [](ConfigContext& ctx, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"bdev_name"}); !st) return st.error();
    auto base = p.string("bdev_name");
    if (!base) return base.error();
    Wait w;
    LvolStore::load(ctx.mgr, *base, Wait::with_store, &w);
    return result(p, "load lvstore on " + *base, w.finish());
  });
  m.replace("bdev_lvol_create", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"lvol_name", "size_in_mib", "lvs_name", "thin_provision", "clear_method"}); !st)
      return st.error();
    auto name = p.string("lvol_name");
    if (!name) return name.error();
    auto mib = p.u64("size_in_mib");
    if (!mib) return mib.error();
    if (*mib > (uint64_t{1} << 30)) return p.error("size_in_mib", "too large");
    auto lvs_name = p.string("lvs_name");
    if (!lvs_name) return lvs_name.error();
    auto thin = p.bool_or("thin_provision", false);
    if (!thin) return thin.error();
    LvolStore* lvs = LvolStore::find(*lvs_name);
    if (lvs == nullptr) return p.error("lvs_name", "no lvstore '" + *lvs_name + "'");
    Wait w;
    lvs->create_lvol(*name, *mib << 20, *thin, Wait::with_lvol, &w);
    return result(p, "create lvol " + *name, w.finish());
  });
  m.replace("bdev_lvol_snapshot", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"lvol_name", "snapshot_name"}); !st) return st.error();
    auto l = find_lvol(p, "lvol_name");
    if (!l) return l.error();
    auto snap = p.string("snapshot_name");
    if (!snap) return snap.error();
    Wait w;
    (*l)->lvs->snapshot(*l, *snap, Wait::with_lvol, &w);
    return result(p, "snapshot " + *snap, w.finish());
  });
  m.replace("bdev_lvol_clone", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"snapshot_name", "clone_name"}); !st) return st.error();
    auto s = find_lvol(p, "snapshot_name");
    if (!s) return s.error();
    auto name = p.string("clone_name");
    if (!name) return name.error();
    Wait w;
    (*s)->lvs->clone(*s, *name, Wait::with_lvol, &w);
    return result(p, "clone " + *name, w.finish());
  });
  auto simple = [&m](const char* method, const char* what, void (LvolStore::*fn)(Lvol*, DoneFn, void*)) {
    m.replace(method, [what, fn](ConfigContext&, const ConfigParams& p) -> Status {
      if (auto st = p.allow_only({"name"}); !st) return st.error();
      auto l = find_lvol(p, "name");
      if (!l) return l.error();
      Wait w;
      ((*l)->lvs->*fn)(*l, Wait::op, &w);
      return result(p, what, w.finish());
    });
  };
  simple("bdev_lvol_inflate", "inflate", &LvolStore::inflate);
  simple("bdev_lvol_decouple_parent", "decouple", &LvolStore::decouple_parent);
  simple("bdev_lvol_delete", "delete", &LvolStore::destroy);
  m.replace("bdev_lvol_resize", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"name", "size_in_mib"}); !st) return st.error();
    auto l = find_lvol(p, "name");
    if (!l) return l.error();
    auto mib = p.u64("size_in_mib");
    if (!mib) return mib.error();
    if (*mib > (uint64_t{1} << 30)) return p.error("size_in_mib", "too large");
    Wait w;
    (*l)->lvs->resize(*l, *mib << 20, Wait::op, &w);
    return result(p, "resize", w.finish());
  });
  m.replace("bdev_lvol_rename", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"old_name", "new_name"}); !st) return st.error();
    auto l = find_lvol(p, "old_name");
    if (!l) return l.error();
    auto name = p.string("new_name");
    if (!name) return name.error();
    Wait w;
    (*l)->lvs->rename(*l, *name, Wait::op, &w);
    return result(p, "rename", w.finish());
  });
}

}  // namespace pollux::lvol
