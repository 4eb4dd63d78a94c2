#include "driver/lvol/config.h"

#include <cstring>

#include "driver/lvol/lvol.h"

namespace pollux::lvol {
namespace {

using bdev::ConfigContext;
using bdev::ConfigParams;
using bdev::Status;

// The callback of an lvol operation, as the lvol API's (function, argument) pair.
struct Box {
  std::function<void(int)> done;
  static Box* make(std::function<void(int)> d) { return new Box{std::move(d)}; }
  static void op(void* a, int rc) { finish(a, rc); }
  static void with_store(void* a, LvolStore*, int rc) { finish(a, rc); }
  static void with_lvol(void* a, Lvol*, int rc) { finish(a, rc); }
  static void finish(void* a, int rc) {
    auto* b = static_cast<Box*>(a);
    auto d = std::move(b->done);
    delete b;
    d(rc);
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

// The outcome of an operation for `done`: ok, or an error naming the method (the parameters
// object may be gone by then: only its place in the configuration is kept).
std::function<void(int)> ended(const ConfigParams& p, std::string what, AsyncDone done) {
  return [where = p.where(), what = std::move(what), done = std::move(done)](int rc) {
    if (rc == 0) return done(bdev::ok_status());
    done(make_error(-rc, where + ": " + what + ": " + std::strerror(-rc)));
  };
}

}  // namespace

std::vector<std::pair<std::string, AsyncMethod>> lvol_async_methods() {
  std::vector<std::pair<std::string, AsyncMethod>> m;
  auto add = [&m](const char* name, AsyncMethod f) { m.emplace_back(name, std::move(f)); };
  add("bdev_lvol_create_lvstore",
      [](ConfigContext& ctx, const ConfigParams& p, AsyncDone done) -> Status {
        if (auto st = p.allow_only({"bdev_name", "lvs_name", "cluster_sz", "clear_method"}); !st)
          return st.error();
        auto base = p.string("bdev_name");
        if (!base) return base.error();
        auto name = p.string("lvs_name");
        if (!name) return name.error();
        auto cluster = p.u64_or("cluster_sz", 4u << 20);
        if (!cluster) return cluster.error();
        if (*cluster < 4096 || *cluster % 4096 || *cluster > (1u << 30))
          return p.error("cluster_sz", "a multiple of 4096 up to 1 GiB");
        LvolStore::create(ctx.mgr, *base, *name, static_cast<uint32_t>(*cluster), Box::with_store,
                          Box::make(ended(p, "create lvstore " + *name + " on " + *base, done)));
        return bdev::ok_status();
      });
  add("bdev_lvol_load_lvstore",
      [](ConfigContext& ctx, const ConfigParams& p, AsyncDone done) -> Status {
        if (auto st = p.allow_only({"bdev_name"}); !st) return st.error();
        auto base = p.string("bdev_name");
        if (!base) return base.error();
        LvolStore::load(ctx.mgr, *base, Box::with_store,
                        Box::make(ended(p, "load lvstore on " + *base, done)));
        return bdev::ok_status();
      });
  add("bdev_lvol_create", [](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
    if (auto st = p.allow_only(
            {"lvol_name", "size_in_mib", "lvs_name", "thin_provision", "clear_method"});
        !st)
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
    lvs->create_lvol(*name, *mib << 20, *thin, Box::with_lvol,
                     Box::make(ended(p, "create lvol " + *name, done)));
    return bdev::ok_status();
  });
  add("bdev_lvol_snapshot", [](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
    if (auto st = p.allow_only({"lvol_name", "snapshot_name"}); !st) return st.error();
    auto l = find_lvol(p, "lvol_name");
    if (!l) return l.error();
    auto snap = p.string("snapshot_name");
    if (!snap) return snap.error();
    (*l)->lvs->snapshot(*l, *snap, Box::with_lvol, Box::make(ended(p, "snapshot " + *snap, done)));
    return bdev::ok_status();
  });
  add("bdev_lvol_clone", [](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
    if (auto st = p.allow_only({"snapshot_name", "clone_name"}); !st) return st.error();
    auto s = find_lvol(p, "snapshot_name");
    if (!s) return s.error();
    auto name = p.string("clone_name");
    if (!name) return name.error();
    (*s)->lvs->clone(*s, *name, Box::with_lvol, Box::make(ended(p, "clone " + *name, done)));
    return bdev::ok_status();
  });
  auto simple = [&add](const char* method, const char* what,
                       void (LvolStore::*fn)(Lvol*, DoneFn, void*)) {
    add(method, [what, fn](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
      if (auto st = p.allow_only({"name"}); !st) return st.error();
      auto l = find_lvol(p, "name");
      if (!l) return l.error();
      ((*l)->lvs->*fn)(*l, Box::op, Box::make(ended(p, what, done)));
      return bdev::ok_status();
    });
  };
  simple("bdev_lvol_inflate", "inflate", &LvolStore::inflate);
  simple("bdev_lvol_decouple_parent", "decouple", &LvolStore::decouple_parent);
  simple("bdev_lvol_delete", "delete", &LvolStore::destroy);
  add("bdev_lvol_resize", [](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
    if (auto st = p.allow_only({"name", "size_in_mib"}); !st) return st.error();
    auto l = find_lvol(p, "name");
    if (!l) return l.error();
    auto mib = p.u64("size_in_mib");
    if (!mib) return mib.error();
    if (*mib > (uint64_t{1} << 30)) return p.error("size_in_mib", "too large");
    (*l)->lvs->resize(*l, *mib << 20, Box::op, Box::make(ended(p, "resize", done)));
    return bdev::ok_status();
  });
  add("bdev_lvol_rename", [](ConfigContext&, const ConfigParams& p, AsyncDone done) -> Status {
    if (auto st = p.allow_only({"old_name", "new_name"}); !st) return st.error();
    auto l = find_lvol(p, "old_name");
    if (!l) return l.error();
    auto name = p.string("new_name");
    if (!name) return name.error();
    (*l)->lvs->rename(*l, *name, Box::op, Box::make(ended(p, "rename", done)));
    return bdev::ok_status();
  });
  return m;
}

// A configuration step is synchronous: it waits for the operation by running the calling
// thread's messages and pollers (only that thread: operations that need other threads — a
// snapshot of an lvol with I/O channels elsewhere — belong to an asynchronous caller, such
// as pollux-tgt's RPC server).
void register_lvol_config_methods(bdev::ConfigMethods& m) {
  for (auto& entry : lvol_async_methods()) {
    // Not a structured binding: clang before 16 (the fuzz toolchain) cannot capture one.
    const AsyncMethod method = entry.second;
    m.replace(entry.first, [method](ConfigContext& ctx, const ConfigParams& p) -> Status {
      auto out = std::make_shared<std::optional<Status>>();
      if (Status st = method(ctx, p, [out](Status s) { *out = std::move(s); }); !st) return st;
      event::Thread* t = event::Thread::current();
      for (uint64_t i = 0; !out->has_value() && t != nullptr && i < 100'000'000; ++i) {
        bool busy = false;
        t->poll(t->clock().now(), &busy);
      }
      if (!out->has_value()) return p.error(std::string("timed out: ") + std::strerror(ETIMEDOUT));
      return std::move(**out);
    });
  }
}

}  // namespace pollux::lvol
