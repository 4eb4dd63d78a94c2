#include "fabric/tgt/app.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "driver/bdev/modules/config_methods.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/lvol/config.h"
#include "driver/lvol/lvol.h"
#include "driver/metrics/bdev_source.h"
#include "driver/nvme/keyring.h"

namespace pollux::fabric::tgt {

namespace {
constexpr uint64_t kBdevStatsPeriodUs = 500'000;
}

TargetApp::~TargetApp() = default;

// Every bdev method goes through a recorder: save_config writes back the entries whose bdevs
// still exist (the bdev layer keeps no description of how a bdev was made).
void TargetApp::record_bdev_methods() {
  bdev::ConfigMethods& base = bdev::global_config_methods();
  for (const std::string& name : base.methods()) {
    bdev::ConfigHandler orig = *base.find(name);
    bdev_methods_.replace(name,
                          [this, name, orig](bdev::ConfigContext& c, const bdev::ConfigParams& p) {
                            const auto before = mgr_->bdev_names();
                            bdev::Status st = orig(c, p);
                            if (!st) return st;
                            const auto after = mgr_->bdev_names();
                            std::set<std::string> old(before.begin(), before.end());
                            Record r{name, p.json(), {}};
                            for (const std::string& b : after)
                              if (!old.count(b)) r.created.push_back(b);
                            records_.push_back(std::move(r));
                            return st;
                          });
  }
}

Result<std::monostate> TargetApp::start(const AppOptions& o) {
  auto m = bdev::Manager::create(fw_, o.bdev_options);
  if (!m) return make_error(-1, m.error().message);  // not bad input: exit status 1
  mgr_ = std::move(m).value();
  modules_ = std::make_unique<bdev::StandardModules>(*mgr_);
  bdev::register_nvme_config_methods(bdev::global_config_methods());
  bdev::register_uring_config_methods(bdev::global_config_methods());
  lvol::register_lvol_config_methods(bdev::global_config_methods());
  record_bdev_methods();
  auto t = target::Target::create(fw_, *mgr_);
  if (!t) return make_error(-1, t.error().message);
  tgt_ = std::move(t).value();
  register_nvmf_config_methods(nvmf_methods_, *tgt_, &nvmf_result_, o.tcp_network);
  bdev::register_keyring_config_methods(keyring_methods_);

  if (!o.json.empty()) {
    auto j = bdev::read_config_file(o.json);
    if (!j) return make_error(EINVAL, j.error().message);
    if (auto st =
            apply_target_config(*j, *modules_, keyring_methods_, bdev_methods_, nvmf_methods_);
        !st)
      return make_error(EINVAL, st.error().message);
  }
  if (o.bdev_metrics) collector_ = metrics::BdevCollector::start(*mgr_, kBdevStatsPeriodUs);
  if (!o.rpc.empty() || o.rpc_in_process) {
    auto r = o.rpc.empty() ? RpcServer::in_process() : RpcServer::start(o.rpc, o.rpc_group);
    if (!r) return make_error(EINVAL, r.error().message);
    rpc_ = std::move(r).value();
    register_rpc_methods();
  }
  return std::monostate{};
}

void TargetApp::stop(std::function<void()> done) {
  rpc_.reset();
  if (!mgr_) return done();
  auto after_target = [this, done = std::move(done)]() mutable {
    // The lvol stores first (their blobs write through the base bdevs, which may be NVMe).
    unload_lvol_stores([this, done = std::move(done)] { detach_and_finish(done); });
  };
  if (tgt_) {
    tgt_->stop(std::move(after_target));
  } else {
    after_target();
  }
}

// Unloads every lvol store on this target's bdevs, one after another (the target is stopped:
// no namespace holds an lvol open); a store that refuses (-EBUSY) is crashed instead, which
// frees it writing nothing: its next load is a dirty load.
void TargetApp::unload_lvol_stores(std::function<void()> then) {
  const auto stores = lvol::LvolStore::loaded_on(*mgr_);
  if (stores.empty()) return then();
  struct Ctx {
    TargetApp* app;
    std::function<void()> then;
    lvol::LvolStore* lvs;
  };
  auto* c = new Ctx{this, std::move(then), stores.front()};
  c->lvs->unload(
      [](void* a, int rc) {
        std::unique_ptr<Ctx> c(static_cast<Ctx*>(a));
        if (rc != 0) {
          std::fprintf(stderr, "pollux-tgt: lvol store %s did not unload (%s): left dirty\n",
                       c->lvs->name().c_str(), std::strerror(-rc));
          auto* again = new Ctx{c->app, std::move(c->then), nullptr};
          c->lvs->crash(
              [](void* a, int) {
                std::unique_ptr<Ctx> c(static_cast<Ctx*>(a));
                c->app->unload_lvol_stores(std::move(c->then));
              },
              again);
          return;
        }
        c->app->unload_lvol_stores(std::move(c->then));
      },
      c);
}

void TargetApp::detach_and_finish(std::function<void()> done) {
  // bdev_nvme controllers (their admin pollers live on this thread), then the collector.
  bdev::nvme_hotplug_stop(*mgr_);
  const auto names = bdev::nvme_controller_names(*mgr_);
  auto left = std::make_shared<std::size_t>(names.size() + 1);
  auto finish = std::make_shared<std::function<void()>>([this, done] {
    if (collector_) {
      auto* d = new std::function<void()>(done);
      collector_->stop(
          [](void* a) {
            std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(a));
            (*f)();
          },
          d);
      return;
    }
    done();
  });
  struct Ctx {
    std::shared_ptr<std::size_t> left;
    std::shared_ptr<std::function<void()>> finish;
  };
  auto one = [](void* a) {
    std::unique_ptr<Ctx> c(static_cast<Ctx*>(a));
    if (--*c->left == 0) (*c->finish)();
  };
  for (const auto& n : names) {
    auto* c = new Ctx{left, finish};
    if (bdev::nvme_detach_controller(*mgr_, n, one, c) != 0) one(c);
  }
  one(new Ctx{left, finish});
}

nlohmann::json TargetApp::save_config() const {
  nlohmann::json bdev_cfg = nlohmann::json::array();
  const auto names = mgr_->bdev_names();
  const std::set<std::string> live(names.begin(), names.end());
  for (const Record& r : records_) {
    // An lvstore and its lvols live on their base bdev: a restart loads the store (as SPDK's
    // examine does) and never formats it again; creating lvols again would fail or duplicate.
    if (r.method.rfind("bdev_lvol_", 0) == 0) {
      const bool made = r.method == "bdev_lvol_create_lvstore" && r.params.contains("lvs_name") &&
                        r.params["lvs_name"].is_string() &&
                        lvol::LvolStore::find(r.params["lvs_name"].get<std::string>()) != nullptr;
      if (made || r.method == "bdev_lvol_load_lvstore") {
        bdev_cfg.push_back({{"method", "bdev_lvol_load_lvstore"},
                            {"params", {{"bdev_name", r.params.value("bdev_name", "")}}}});
      }
      continue;
    }
    bool keep = r.created.empty();
    for (const std::string& b : r.created) keep = keep || live.count(b) != 0;
    if (r.method == "bdev_set_qos_limit" && r.params.contains("name") &&
        r.params["name"].is_string())
      keep = live.count(r.params["name"].get<std::string>()) != 0;
    if (keep) bdev_cfg.push_back({{"method", r.method}, {"params", r.params}});
  }
  nlohmann::json keyring_cfg = nlohmann::json::array();
  for (const auto& [name, path] : nvme::keyring::list())
    keyring_cfg.push_back(
        {{"method", "keyring_file_add_key"}, {"params", {{"name", name}, {"path", path}}}});
  return {{"subsystems",
           {{{"subsystem", "keyring"}, {"config", keyring_cfg}},
            {{"subsystem", "bdev"}, {"config", bdev_cfg}},
            {{"subsystem", "nvmf"}, {"config", nvmf_config_json(*tgt_)}}}}};
}

}  // namespace pollux::fabric::tgt
