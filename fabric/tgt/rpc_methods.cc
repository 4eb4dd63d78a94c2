// The JSON-RPC methods of pollux-tgt: every configuration method (bdev and nvmf) answered once
// its effect has reached every poll group, and the queries, in SPDK's shapes where SPDK has the
// method.
#include <fmt/format.h>

#include <memory>

#include "driver/event/reactor.h"
#include "driver/event/thread.h"
#include "driver/lvol/config.h"
#include "driver/metrics/bdev_source.h"
#include "driver/nvme/keyring.h"
#include "fabric/target/poll_group.h"
#include "fabric/tgt/app.h"

namespace pollux::fabric::tgt {

namespace {

using Reply = RpcServer::Reply;
using json = nlohmann::json;

Error bad(const std::string& msg) {
  return make_error(EINVAL, msg);
}

Result<std::string> optional_name(const json& params) {
  for (const auto& [k, v] : params.items())
    if (k != "name") return bad("unknown parameter '" + k + "'");
  if (!params.contains("name")) return std::string();
  if (!params["name"].is_string()) return bad("'name': expected a string");
  return params["name"].get<std::string>();
}

json bdev_json(bdev::Manager& mgr, bdev::Bdev& b) {
  const bdev::BdevProperties& p = b.props();
  json types = json::object();
  for (int t = 0; t < static_cast<int>(bdev::IoType::kCount); ++t)
    types[bdev::to_string(static_cast<bdev::IoType>(t))] = b.supports(static_cast<bdev::IoType>(t));
  const std::string claim = mgr.claim_module(b);
  json j = {{"name", p.name},
            {"aliases", p.aliases},
            {"product_name", p.product},
            {"block_size", p.block_size},
            {"num_blocks", p.num_blocks},
            {"claimed", !claim.empty()},
            {"write_cache", p.write_cache},
            {"supported_io_types", types},
            {"driver_specific", {{"module", b.module()}}}};
  if (!claim.empty()) j["claim_module"] = claim;
  if (!p.uuid.empty()) j["uuid"] = p.uuid;
  return j;
}

json iostat_json(const std::string& name, const bdev::IoStats& s) {
  auto at = [&](bdev::IoType t) { return s.by_type[static_cast<int>(t)]; };
  const auto rd = at(bdev::IoType::kRead), wr = at(bdev::IoType::kWrite),
             un = at(bdev::IoType::kUnmap), wz = at(bdev::IoType::kWriteZeroes),
             fl = at(bdev::IoType::kFlush);
  uint64_t errors = 0;
  for (const auto& t : s.by_type) errors += t.errors;
  return {{"name", name},
          {"bytes_read", rd.bytes},
          {"num_read_ops", rd.ops},
          {"bytes_written", wr.bytes},
          {"num_write_ops", wr.ops},
          {"bytes_unmapped", un.bytes},
          {"num_unmap_ops", un.ops},
          {"num_write_zeroes_ops", wz.ops},
          {"num_flush_ops", fl.ops},
          {"read_latency_ticks", rd.latency_ticks},
          {"write_latency_ticks", wr.latency_ticks},
          {"unmap_latency_ticks", un.latency_ticks},
          {"io_errors", errors},
          {"retries", s.retries},
          {"splits", s.splits}};
}

}  // namespace

// A configuration method as an RPC: the same handler, answered once the change has reached
// every poll group (a host that hears "done" finds it everywhere).
void TargetApp::config_method_rpc(const std::string& method, const bdev::ConfigMethods& table) {
  const bdev::ConfigHandler* h = table.find(method);
  if (h == nullptr) return;
  bdev::ConfigHandler handler = *h;
  const bool nvmf = &table == &nvmf_methods_;
  rpc_->add(method, [this, method, handler, nvmf](const json& params, Reply reply) {
    auto ctx = modules_->context();
    bdev::Status st = handler(ctx, bdev::ConfigParams(params, method));
    if (!st) return reply(st.error());
    json result = true;
    if (nvmf) {
      result = nvmf_result_.value;
    } else if (params.contains("name") && params["name"].is_string() &&
               method.find("_create") != std::string::npos) {
      result = params["name"];  // SPDK answers a bdev creation with its name
    }
    tgt_->when_settled([reply, result] { reply(result); });
  });
}

void TargetApp::register_rpc_methods() {
  for (const std::string& m : keyring_methods_.methods()) config_method_rpc(m, keyring_methods_);
  rpc_->add("keyring_get_keys", [](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("keyring_get_keys takes no parameters"));
    json out = json::array();  // names and paths, never the keys
    for (const auto& [name, path] : nvme::keyring::list())
      out.push_back({{"name", name}, {"module", "keyring_file"}, {"path", path}});
    reply(out);
  });
  for (const std::string& m : bdev_methods_.methods()) config_method_rpc(m, bdev_methods_);
  for (const std::string& m : nvmf_methods_.methods()) config_method_rpc(m, nvmf_methods_);
  // Lvol operations answer when they end, without blocking the RPC thread: a snapshot of an
  // lvol that a namespace exports freezes I/O on the poll groups' threads, which may share
  // this reactor.
  for (auto& entry : lvol::lvol_async_methods()) {
    // Not a structured binding: clang before 16 (the fuzz toolchain) cannot capture one.
    const std::string name = entry.first;
    const lvol::AsyncMethod method = entry.second;
    rpc_->add(name, [this, name, method](const json& params, Reply reply) {
      auto ctx = modules_->context();
      auto done = [this, name, params, reply](bdev::Status st) {
        if (!st) return reply(st.error());
        records_.push_back(Record{name, params, {}});  // save_config: see there
        tgt_->when_settled([reply] { reply(json(true)); });
      };
      if (bdev::Status st = method(ctx, bdev::ConfigParams(params, name), done); !st)
        reply(st.error());
    });
  }

  // Deleting bdevs (a namespace on one goes with it: hot removal).
  for (const char* m : {"bdev_malloc_delete", "bdev_null_delete"}) {
    const std::string module = std::string(m) == "bdev_malloc_delete" ? "malloc" : "null";
    rpc_->add(m, [this, module](const json& params, Reply reply) {
      auto name = optional_name(params);
      if (!name) return reply(name.error());
      if (name->empty()) return reply(bad("'name': missing"));
      bdev::Bdev* b = mgr_->find(*name);
      if (b == nullptr || b->module() != module)
        return reply(make_error(ENODEV, fmt::format("no {} bdev named '{}'", module, *name)));
      auto* r = new Reply(std::move(reply));
      const int rc = mgr_->unregister_bdev(
          *name,
          [](void* a) {
            std::unique_ptr<Reply> rep(static_cast<Reply*>(a));
            (*rep)(json(true));
          },
          r);
      if (rc != 0) {
        std::unique_ptr<Reply> rep(r);
        (*rep)(make_error(rc, "unregister failed"));
      }
    });
  }

  rpc_->add("rpc_get_methods", [this](const json&, Reply reply) { reply(json(rpc_->methods())); });

  rpc_->add("save_config", [this](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("save_config takes no parameters"));
    tgt_->when_settled([this, reply] { reply(save_config()); });
  });

  rpc_->add("bdev_get_bdevs", [this](const json& params, Reply reply) {
    auto name = optional_name(params);
    if (!name) return reply(name.error());
    json out = json::array();
    for (bdev::Bdev* b : mgr_->bdevs()) {
      if (!name->empty() && b->name() != *name) continue;
      out.push_back(bdev_json(*mgr_, *b));
    }
    if (!name->empty() && out.empty())
      return reply(make_error(ENODEV, "no bdev named '" + *name + "'"));
    reply(out);
  });

  // Statistics are merged from every channel, on the channels' threads: one bdev after another.
  rpc_->add("bdev_get_iostat", [this](const json& params, Reply reply) {
    auto name = optional_name(params);
    if (!name) return reply(name.error());
    struct Walk {
      TargetApp* app;
      std::vector<std::string> names;
      std::size_t next = 0;
      json bdevs = json::array();
      Reply reply;
      static void step(Walk* w) {
        while (w->next < w->names.size()) {
          const std::string& n = w->names[w->next++];
          bdev::Bdev* b = w->app->mgr_->find(n);
          if (b == nullptr) continue;  // gone meanwhile
          w->app->mgr_->get_stats(
              *b,
              [](const bdev::IoStats& s, void* a) {
                auto* wk = static_cast<Walk*>(a);
                wk->bdevs.push_back(iostat_json(wk->names[wk->next - 1], s));
                step(wk);
              },
              w);
          return;
        }
        const env::Clock& clock = w->app->fw_.clock();
        std::unique_ptr<Walk> own(w);
        own->reply(json{{"tick_rate", clock.ticks_per_second()},
                        {"ticks", clock.now()},
                        {"bdevs", own->bdevs}});
      }
    };
    auto* w = new Walk{this, {}, 0, json::array(), std::move(reply)};
    for (const std::string& n : mgr_->bdev_names())
      if (name->empty() || n == *name) w->names.push_back(n);
    if (!name->empty() && w->names.empty()) {
      std::unique_ptr<Walk> own(w);
      return own->reply(make_error(ENODEV, "no bdev named '" + *name + "'"));
    }
    Walk::step(w);
  });

  rpc_->add("nvmf_get_subsystems", [this](const json& params, Reply reply) {
    if (!params.empty() && !(params.size() == 1 && params.contains("nqn")))
      return reply(bad("nvmf_get_subsystems takes [nqn]"));
    json all = nvmf_subsystems_json(*tgt_);
    if (params.contains("nqn")) {
      json one = json::array();
      for (const auto& s : all)
        if (s["nqn"] == params["nqn"]) one.push_back(s);
      if (one.empty()) return reply(make_error(ENODEV, "no subsystem " + params["nqn"].dump()));
      return reply(one);
    }
    reply(all);
  });

  // Counters of every poll group, read on its own thread.
  rpc_->add("nvmf_get_stats", [this](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("nvmf_get_stats takes no parameters"));
    auto groups = std::make_shared<json>(json::array());
    std::vector<target::Transport*> ts = tgt_->transports();
    tgt_->for_each_group(
        [groups, ts](target::PollGroup& g, std::function<void()> next) {
          const target::PollGroupStats& s = g.stats();
          json j = {{"name", g.thread()->name()},
                    {"admin_qpairs", s.admin_qpairs.load()},
                    {"io_qpairs", s.io_qpairs.load()},
                    {"current_admin_qpairs", s.current_admin_qpairs.load()},
                    {"current_io_qpairs", s.current_io_qpairs.load()},
                    {"pending_bdev_io", s.pending_bdev_io.load()},
                    {"completed_nvme_io", s.completed_nvme_io.load()},
                    {"authentications", s.authentications.load()},
                    {"authentication_failures", s.authentication_failures.load()},
                    {"io_errors", s.io_errors.load()},
                    {"bdev_io_retries", s.bdev_io_retries.load()},
                    {"transports", json::array()}};
          for (target::Transport* t : ts) j["transports"].push_back(t->group_stats(g));
          groups->push_back(std::move(j));
          next();
        },
        [this, groups, reply] {
          reply(json{{"tick_rate", fw_.clock().ticks_per_second()}, {"poll_groups", *groups}});
        });
  });

  rpc_->add("framework_get_reactors", [this](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("framework_get_reactors takes no parameters"));
    json reactors = json::array();
    const auto threads = fw_.threads();
    for (std::size_t i = 0; i < fw_.reactor_count(); ++i) {
      const event::Reactor& r = fw_.reactor(i);
      json lw = json::array();
      for (const event::Thread* t : threads) {
        if (t->exited() || t->reactor_index() != static_cast<int>(i)) continue;
        lw.push_back({{"name", t->name()},
                      {"id", t->id()},
                      {"elapsed", t->stats().busy_ticks.load() + t->stats().idle_ticks.load()}});
      }
      reactors.push_back({{"lcore", r.core()},
                          {"busy", r.stats().busy_ticks.load()},
                          {"idle", r.stats().idle_ticks.load()},
                          {"iterations", r.stats().iterations.load()},
                          {"in_interrupt", false},
                          {"lw_threads", lw}});
    }
    reply(json{{"tick_rate", fw_.clock().ticks_per_second()}, {"reactors", reactors}});
  });

  auto thread_json = [this](bool pollers) {
    json out = json::array();
    for (const event::Thread* t : fw_.threads()) {
      if (t->exited()) continue;
      json active = json::array(), timed = json::array(), paused = json::array();
      for (const event::PollerSample& p : t->poller_samples()) {
        json pj = {{"name", p.name},
                   {"state", p.paused ? "paused" : "waiting"},
                   {"run_count", p.runs},
                   {"busy_count", p.busy_runs},
                   {"busy_ticks", p.busy_ticks}};
        if (p.period_ticks) pj["period_ticks"] = p.period_ticks;
        (p.paused ? paused : p.period_ticks ? timed : active).push_back(pj);
      }
      json j = {{"name", t->name()},
                {"id", t->id()},
                {"cpumask", event::format_core_mask(t->cpumask())},
                {"reactor", t->reactor_index()}};
      if (pollers) {
        j["active_pollers"] = active;
        j["timed_pollers"] = timed;
        j["paused_pollers"] = paused;
      } else {
        j["busy"] = t->stats().busy_ticks.load();
        j["idle"] = t->stats().idle_ticks.load();
        j["messages"] = t->stats().messages.load();
        j["active_pollers_count"] = active.size();
        j["timed_pollers_count"] = timed.size();
        j["paused_pollers_count"] = paused.size();
      }
      out.push_back(j);
    }
    return json{{"tick_rate", fw_.clock().ticks_per_second()}, {"threads", out}};
  };
  rpc_->add("thread_get_pollers", [thread_json](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("thread_get_pollers takes no parameters"));
    reply(thread_json(true));
  });
  rpc_->add("thread_get_stats", [thread_json](const json& params, Reply reply) {
    if (!params.empty()) return reply(bad("thread_get_stats takes no parameters"));
    reply(thread_json(false));
  });
}

}  // namespace pollux::fabric::tgt
