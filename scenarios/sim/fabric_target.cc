#include "scenarios/sim/fabric_target.h"

#include <algorithm>

#include "driver/bdev/modules/nvme.h"

namespace pollux::sim {

namespace ft = fabric::target;

std::unique_ptr<FabricTarget> FabricTarget::create(const env::Clock& clock,
                                                   fabric::net::Network& net,
                                                   FabricTargetOptions options,
                                                   std::string* error) {
  if (options.cores == 0 || options.cores > 64) {
    *error = "fabric target: cores must be 1-64, not " + std::to_string(options.cores);
    return nullptr;
  }
  std::unique_ptr<FabricTarget> t(new FabricTarget(clock, net, std::move(options)));
  for (uint32_t i = 0; i < t->o_.cores; ++i) t->cores_.emplace_back(t->drive_costs_);
  std::vector<int> mask(t->o_.cores);
  for (uint32_t i = 0; i < t->o_.cores; ++i) mask[i] = static_cast<int>(i);
  event::FrameworkOptions fo;
  fo.core_mask = event::format_core_mask(mask);
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &clock;
  auto fw = event::Framework::create(fo);
  if (!fw) {
    *error = "fabric target: " + fw.error().message;
    return nullptr;
  }
  t->fw_ = std::move(fw).value();
  t->fw_->set_cpu_clock(&t->cpu_clock_);
  t->thread_ = t->fw_->create_thread("sim-target", 0);
  auto mgr = bdev::Manager::create(*t->fw_);
  if (!mgr) {
    *error = "fabric target bdevs: " + mgr.error().message;
    return nullptr;
  }
  t->mgr_ = std::move(mgr).value();
  return t;
}

// Poll group i runs on reactor i (Target::create), so its commands are core i's.
uint64_t FabricTarget::commands_of(size_t core) const {
  if (!tgt_ || core >= tgt_->groups().size()) return 0;
  return tgt_->groups()[core]->stats().completed_nvme_io;
}

uint64_t FabricTarget::commands_completed() const {
  uint64_t n = 0;
  for (size_t i = 0; i < cores_.size(); ++i) n += commands_of(i);
  return n;
}

uint64_t FabricTarget::busy_ns() const {
  uint64_t n = 0;
  for (const Core& c : cores_) n += c.busy_ns;
  return n;
}

uint64_t FabricTarget::uncharged_ns(size_t core, bool* work) const {
  if (!o_.costs) return 0;
  const Core& c = cores_[core];
  const uint64_t n = commands_of(core);
  const uint64_t commands = n >= c.commands_charged ? n - c.commands_charged : n;  // restarted
  *work |= commands != 0;
  return commands * o_.costs->command_ns + c.drives.uncharged_ns(work);
}

// Between two pollers of the running core: where its CPU clock was when the iteration began,
// plus what the work done since costs. Realtime: the TSC on the virtual clock's scale.
uint64_t FabricTarget::cpu_now_ns() const {
  if (realtime_) return std::max(clock_.now(), wall_.now_ns());
  bool work = false;
  return std::max(clock_.now(), cores_[current_].busy_until) + uncharged_ns(current_, &work);
}

// The earliest a core busy with work is free again.
uint64_t FabricTarget::next_event_ns() const {
  uint64_t next = UINT64_MAX;
  if (realtime_) return next;
  for (const Core& c : cores_)
    if (c.busy_with_work && c.busy_until > clock_.now()) next = std::min(next, c.busy_until);
  return next;
}

// Each core runs an iteration of its reactor unless it is still on the last one's work.
bool FabricTarget::step() {
  const bool model = o_.costs && !realtime_;
  bool work = false;
  stores_at_ = 0;
  for (size_t i = 0; i < cores_.size(); ++i) {
    Core& c = cores_[i];
    if (model && clock_.now() < c.busy_until) continue;
    current_ = i;
    const bool did = fw_->reactor(i).run_once(model ? o_.costs->reactor_iteration_ns : 0);
    work |= did;
    if (!model) continue;
    bool charged = false;
    const uint64_t n = commands_of(i);
    const uint64_t cost = o_.costs->reactor_iteration_ns + uncharged_ns(i, &charged);
    c.drives.charge(&charged);
    c.commands_charged = n;
    c.busy_until = clock_.now() + cost;
    // Its doorbell stores: when the iteration's work is done (SPDK's target posts a poll's
    // work requests together at its end; at QD 1 an iteration holds one command).
    stores_at_ = std::max(stores_at_, c.busy_until);
    c.busy_with_work = did || charged;
    if (c.busy_with_work) c.busy_ns += cost;
  }
  current_ = 0;
  if (stopped_) {
    event::CurrentThreadScope scope(thread_);
    tgt_.reset();  // the transport's listener and connections close with it
    for (Core& c : cores_) c.commands_charged = 0;
    stopped_ = stopping_ = false;
  }
  return work;
}

void FabricTarget::set_realtime(bool on) {
  if (realtime_ && !on) {  // the CPU clocks never go back
    const uint64_t now = cpu_now_ns();
    for (Core& c : cores_) c.busy_until = now;
  }
  realtime_ = on;
  uint64_t from = clock_.now();
  for (const Core& c : cores_) from = std::max(from, c.busy_until);
  if (on) wall_.start(from);
}

// A drive's queue pair is charged to the core of the thread that made it (a poll group's
// channel to the drive); one made elsewhere to core 0.
std::function<void(nvme::Qpair*, bool, const std::string&)> FabricTarget::qpair_observer() {
  return [this](nvme::Qpair* qp, bool created, const std::string&) {
    if (!created) {
      for (Core& c : cores_) c.drives.unwatch(qp);
      return;
    }
    const event::Thread* t = event::Thread::current();
    const int r = t ? t->reactor_index() : -1;
    cores_[r >= 0 && static_cast<size_t>(r) < cores_.size() ? static_cast<size_t>(r) : 0]
        .drives.watch(qp);
  };
}

std::string FabricTarget::start_async(const std::vector<FabricSubsystem>& subsystems) {
  if (tgt_) return "fabric target: already running";
  settled_ = false;
  event::CurrentThreadScope scope(thread_);
  auto tg = ft::Target::create(*fw_, *mgr_);
  if (!tg) return "fabric target: " + tg.error().message;
  tgt_ = std::move(tg).value();
  const bool rdma = o_.trtype == "RDMA";
  if (rdma) {
    if (o_.rdma_context == nullptr) return "fabric target: RDMA needs the target's NIC";
    auto tr = fabric::rdma::RdmaTargetTransport::create(*tgt_, o_.rdma, *o_.rdma_context, &net_,
                                                        o_.registry);
    if (!tr) return "fabric target transport: " + tr.error().message;
    if (auto st = tgt_->add_transport(std::move(tr).value()); !st) return st.error().message;
  } else {
    auto tr = fabric::tcp::TcpTargetTransport::create(*tgt_, o_.tcp, &net_, o_.registry);
    if (!tr) return "fabric target transport: " + tr.error().message;
    if (auto st = tgt_->add_transport(std::move(tr).value()); !st) return st.error().message;
  }

  for (const FabricSubsystem& s : subsystems) {
    ft::SubsystemOptions so;
    so.nqn = s.nqn;
    so.allow_any_host = true;
    so.kas = o_.kas;
    so.cqt_ms = o_.cqt_ms;
    if (auto r = tgt_->create_subsystem(so); !r)
      return "subsystem " + s.nqn + ": " + r.error().message;
    for (const std::string& b : s.bdevs) {
      ft::NamespaceOptions no;
      no.bdev_name = b;
      if (auto n = tgt_->add_namespace(s.nqn, no); !n)
        return "namespace " + b + " of " + s.nqn + ": " + n.error().message;
    }
    for (const std::string& a : o_.addresses) {
      if (auto st = tgt_->add_listener(
              s.nqn, ft::ListenAddress{rdma ? "RDMA" : "TCP", "IPv4", a, o_.port});
          !st)
        return "listener " + a + ":" + o_.port + ": " + st.error().message;
    }
  }
  tgt_->when_settled([this] { settled_ = true; });
  return "";
}

std::string FabricTarget::start(const std::vector<FabricSubsystem>& subsystems,
                                const std::function<void()>& turn) {
  if (std::string e = start_async(subsystems); !e.empty()) return e;
  for (int i = 0; i < 1'000'000 && !settled_; ++i) turn();
  return settled_ ? "" : "fabric target: set-up did not settle";
}

void FabricTarget::begin_stop() {
  if (!tgt_ || stopping_) return;
  stopping_ = true;
  event::CurrentThreadScope scope(thread_);
  tgt_->stop([this] { stopped_ = true; });
}

void FabricTarget::stop(const std::function<void()>& turn) {
  begin_stop();
  for (int i = 0; i < 1'000'000 && tgt_; ++i) turn();
}

bool FabricTarget::shutdown(const std::function<void()>& turn) {
  stop(turn);
  if (!fw_) return true;
  if (tgt_) {
    // It could not stop (I/O held by a drive that never answers): tearing it down now would
    // run its continuations on exited threads. It is left as it is (leaked), and said.
    (void)tgt_.release();
    (void)mgr_.release();
    (void)fw_.release();
    return false;
  }
  if (mgr_) {  // drives attached with bdev_nvme let go first
    {
      event::CurrentThreadScope scope(thread_);
      for (const std::string& n : bdev::nvme_controller_names(*mgr_))
        bdev::nvme_detach_controller(*mgr_, n);
    }
    for (int i = 0; i < 1'000'000 && !bdev::nvme_controller_names(*mgr_).empty(); ++i) turn();
  }
  // The threads end first: the channels they hold go while the bdev manager still lives.
  fw_->stop(0);
  for (int i = 0; i < 1'000'000 && !fw_->finished(); ++i) fw_->step();
  mgr_.reset();
  return true;
}

FabricTarget::~FabricTarget() {
  if (fw_ && !fw_->finished()) shutdown([this] { step(); });
  fw_.reset();
}

}  // namespace pollux::sim
