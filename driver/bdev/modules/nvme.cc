// bdev_nvme: the public API (nvme.h) and the hot-plug poller.
#include "driver/bdev/modules/nvme_internal.h"

namespace pollux::bdev {

using namespace nvme_module;

// ------------------------------------------------------------------------ public API ----

Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr,
                                                        std::unique_ptr<nvme::Controller> ctrlr,
                                                        const NvmeBdevOptions& options) {
  if (ctrlr == nullptr) return make_error(EINVAL, "bdev_nvme: no controller");
  if (options.name.empty()) return make_error(EINVAL, "bdev_nvme: controller name is empty");
  event::Thread* thread = event::Thread::current();
  if (thread == nullptr)
    return make_error(EINVAL, "bdev_nvme: attach must run on a framework thread");
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    if (find_ctrlr(mgr, options.name) != nullptr)
      return make_error(EEXIST, "bdev_nvme: controller '" + options.name + "' already exists");
    c = new NvmeCtrlr(mgr, std::move(ctrlr), options);
    g_ctrlrs.push_back(c);
  }
  return c->start(thread);  // on failure c frees itself once its bdevs are gone
}

Result<std::vector<std::string>> nvme_attach_controller(Manager& mgr,
                                                        const nvme::TransportId& trid,
                                                        const NvmeBdevOptions& options,
                                                        nvme::ControllerOptions ctrlr_options) {
  if (ctrlr_options.registry == nullptr) ctrlr_options.registry = options.registry;
  {
    std::lock_guard lock(g_mu);
    if (find_ctrlr(mgr, options.name) != nullptr)
      return make_error(EEXIST, "bdev_nvme: controller '" + options.name + "' already exists");
  }
  auto c = nvme::connect(trid, ctrlr_options);
  if (!c) return make_error(c.error().code, "bdev_nvme: " + trid.to_string() + ": " + c.error().message);
  NvmeBdevOptions o = options;
  if (o.registry == nullptr) o.registry = ctrlr_options.registry;
  return nvme_attach_controller(mgr, std::move(c).value(), o);
}

void nvme_set_default_options(Manager& mgr, const NvmeBdevOptions& options) {
  std::lock_guard lock(g_mu);
  g_defaults[&mgr] = options;
}

NvmeBdevOptions nvme_default_options(Manager& mgr) {
  std::lock_guard lock(g_mu);
  auto d = g_defaults.find(&mgr);
  return d != g_defaults.end() ? d->second : NvmeBdevOptions{};
}

Result<std::vector<std::string>> nvme_attach_controller_by_address(
    Manager& mgr, const std::string& name, const NvmeAddress& a,
    const std::function<void(NvmeBdevOptions&)>& tune) {
  std::string text = "trtype:" + a.trtype + " traddr:" + a.traddr;
  if (!a.trsvcid.empty()) text += " trsvcid:" + a.trsvcid;
  if (!a.subnqn.empty()) text += " subnqn:" + a.subnqn;
  if (a.hdgst) text += " hdgst:1";
  if (a.ddgst) text += " ddgst:1";
  auto trid = nvme::parse_transport_id(text);
  if (!trid) return make_error(trid.error().code, "bdev_nvme_attach_controller: " + trid.error().message);
  if (a.multipath == "failover") {
    bool attached;
    {
      std::lock_guard lock(g_mu);
      attached = find_ctrlr(mgr, name) != nullptr;
    }
    if (attached) return nvme_add_path(mgr, name, *trid);
  } else if (a.multipath == "multipath") {
    return make_error(ENOTSUP,
                      "multipath 'multipath' (active-active) is not supported; 'failover' is");
  } else if (!a.multipath.empty() && a.multipath != "disable") {
    return make_error(EINVAL, "multipath '" + a.multipath + "': expected disable or failover");
  }
  NvmeBdevOptions o = nvme_default_options(mgr);
  o.name = name;
  if (tune) tune(o);
  nvme::ControllerOptions co;
  co.hostnqn = a.hostnqn;
  for (auto [value, out] : {std::pair{&a.dhchap_key, &co.dhchap_key},
                            std::pair{&a.dhchap_ctrlr_key, &co.dhchap_ctrlr_key}}) {
    if (value->empty()) continue;
    auto text = nvme::keyring::resolve(*value);
    if (!text) return make_error(text.error().code, "bdev_nvme_attach_controller: " + text.error().message);
    *out = std::move(text).value();
  }
  return nvme_attach_controller(mgr, *trid, o, std::move(co));
}

int nvme_detach_controller(Manager& mgr, const std::string& name, event::MsgFn done, void* ctx) {
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
    if (c == nullptr) return -ENODEV;
    c->add_detach_waiter(event::Thread::current(), done, ctx);
    if (c->detaching()) return 0;  // already going (hot-remove): done() runs when freed
    c->hold();
  }
  // The admin poller belongs to the attaching thread: tear down there.
  auto run = [](void* arg) {
    auto* self = static_cast<NvmeCtrlr*>(arg);
    self->teardown(false);
    self->release();
  };
  if (c->admin_thread() == event::Thread::current() || c->admin_thread()->send_msg(run, c) != 0)
    run(c);
  return 0;
}

int nvme_reset_controller(Manager& mgr, const std::string& name, ResetDoneFn done, void* ctx) {
  NvmeCtrlr* c;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
    if (c == nullptr || c->detaching()) return -ENODEV;
    c->hold();  // alive until reset_controller has taken its own hold
  }
  c->reset_controller(done, ctx);
  c->release();
  return 0;
}

// ------------------------------------------------------------------------- hot-plug ----

namespace {

struct Hotplug {
  Manager* mgr;
  event::Thread* thread;
  event::Poller* poller;
  std::vector<NvmeHotplugSlot> slots;
  NvmeBdevOptions base;
  NvmeHotplugStats stats;
};
std::vector<std::unique_ptr<Hotplug>> g_hotplugs;  // under g_mu

event::PollStatus hotplug_poll(void* arg) {
  auto* h = static_cast<Hotplug*>(arg);
  // The stats are read from any thread under g_mu; the rest of h is this thread's.
  auto count = [](uint64_t& field) {
    std::lock_guard lock(g_mu);
    ++field;
  };
  count(h->stats.polls);
  const std::vector<std::string> attached = nvme_controller_names(*h->mgr);
  int n = 0;
  for (const NvmeHotplugSlot& slot : h->slots) {
    if (std::find(attached.begin(), attached.end(), slot.name) != attached.end()) continue;
    if (slot.present && !slot.present()) continue;
    auto c = slot.connect();
    if (!c) {
      count(h->stats.connect_failures);  // tried again at the next period
      continue;
    }
    NvmeBdevOptions o = h->base;
    o.name = slot.name;
    if (nvme_attach_controller(*h->mgr, std::move(c).value(), o)) {
      count(h->stats.attaches);
      ++n;
    } else {
      count(h->stats.connect_failures);
    }
  }
  return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

}  // namespace

int nvme_hotplug_start(Manager& mgr, std::vector<NvmeHotplugSlot> slots, uint64_t period_us,
                       const NvmeBdevOptions& base) {
  event::Thread* t = event::Thread::current();
  if (t == nullptr) return -EINVAL;
  for (const NvmeHotplugSlot& s : slots)
    if (s.name.empty() || !s.connect) return -EINVAL;
  std::lock_guard lock(g_mu);
  for (const auto& h : g_hotplugs)
    if (h->mgr == &mgr) return -EEXIST;
  auto h = std::make_unique<Hotplug>(Hotplug{&mgr, t, nullptr, std::move(slots), base, {}});
  h->poller = t->register_poller(hotplug_poll, h.get(), period_us, "bdev_nvme_hotplug");
  g_hotplugs.push_back(std::move(h));
  return 0;
}

Result<NvmeHotplugSlot> nvme_hotplug_slot(const std::string& name, const std::string& trtype,
                                          const std::string& traddr) {
  auto trid = nvme::parse_transport_id("trtype:" + trtype + " traddr:" + traddr);
  if (!trid) return trid.error();
  NvmeHotplugSlot slot;
  slot.name = name;
  if (trid->trtype == nvme::TransportType::kPcie) {
    auto bdf = env::normalise_bdf(traddr);
    if (!bdf) return bdf.error();
    slot.present = [bdf = *bdf] { return env::vfio_pci_bound(bdf); };
  } else if (trid->trtype == nvme::TransportType::kVfioUser) {
    slot.present = [path = traddr] { return access(path.c_str(), F_OK) == 0; };
  } else {
    return make_error(ENOTSUP, "hot-plug slots are pcie or vfio-user addresses");
  }
  slot.connect = [t = *trid]() { return nvme::connect(t); };
  return slot;
}

void nvme_hotplug_stop(Manager& mgr) {
  std::unique_ptr<Hotplug> h;
  {
    std::lock_guard lock(g_mu);
    for (auto it = g_hotplugs.begin(); it != g_hotplugs.end(); ++it) {
      if ((*it)->mgr == &mgr) {
        h = std::move(*it);
        g_hotplugs.erase(it);
        break;
      }
    }
  }
  if (h) h->thread->unregister_poller(h->poller);
}

NvmeHotplugStats nvme_hotplug_stats(Manager& mgr) {
  std::lock_guard lock(g_mu);
  for (const auto& h : g_hotplugs)
    if (h->mgr == &mgr) return h->stats;
  return {};
}

Result<std::vector<std::string>> nvme_add_path(Manager& mgr, const std::string& name,
                                               const nvme::TransportId& trid) {
  std::lock_guard lock(g_mu);  // the controller stays while its path is added
  NvmeCtrlr* c = find_ctrlr(mgr, name);
  if (c == nullptr || c->detaching())
    return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  if (std::string e = c->ctrlr().add_path(trid); !e.empty())
    return make_error(EINVAL, "bdev_nvme: " + name + ": " + trid.to_string() + ": " + e);
  return c->bdev_names();
}

std::vector<std::string> nvme_controller_names(Manager& mgr) {
  std::lock_guard lock(g_mu);
  std::vector<std::string> names;
  for (NvmeCtrlr* c : g_ctrlrs)
    if (&c->mgr() == &mgr) names.push_back(c->name());
  return names;
}

Result<NvmeControllerStats> nvme_controller_stats(Manager& mgr, const std::string& name) {
  std::lock_guard lock(g_mu);
  NvmeCtrlr* c = find_ctrlr(mgr, name);
  if (c == nullptr) return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  NvmeControllerStats st = c->stats();
  const nvme::Transport::PathInfo p = c->ctrlr().paths();
  st.paths = static_cast<uint32_t>(p.addresses.size());
  st.active_path = static_cast<uint32_t>(p.active);
  st.failovers = p.failovers;
  return st;
}

Result<std::optional<NvmeEmulatorStatus>> nvme_emulator_status(Manager& mgr,
                                                               const std::string& name) {
  NvmeCtrlr* c = nullptr;
  {
    std::lock_guard lock(g_mu);
    c = find_ctrlr(mgr, name);
  }
  if (c == nullptr) return make_error(ENODEV, "bdev_nvme: no controller '" + name + "'");
  // Its admin poller runs on this thread too: the command cannot race it.
  if (c->admin_thread() != event::Thread::current())
    return make_error(EINVAL, "bdev_nvme: ask '" + name + "' on its admin thread");
  auto st = nvme::emulator_status(c->ctrlr());
  if (!st) return std::optional<NvmeEmulatorStatus>();
  return std::optional<NvmeEmulatorStatus>(NvmeEmulatorStatus{c->ctrlr().transport().address(), *st});
}

}  // namespace pollux::bdev
