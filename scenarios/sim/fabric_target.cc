#include "scenarios/sim/fabric_target.h"

#include <algorithm>

#include "driver/bdev/modules/nvme.h"

namespace pollux::sim {

namespace ft = fabric::target;

std::unique_ptr<FabricTarget> FabricTarget::create(const env::Clock& clock,
                                                   fabric::net::Network& net,
                                                   FabricTargetOptions options,
                                                   std::string* error) {
  std::unique_ptr<FabricTarget> t(new FabricTarget(clock, net, std::move(options)));
  event::FrameworkOptions fo;
  fo.core_mask = "0x1";
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

uint64_t FabricTarget::commands_completed() const {
  uint64_t n = 0;
  if (tgt_)
    for (const auto& g : tgt_->groups()) n += g->stats().completed_nvme_io;
  return n;
}

uint64_t FabricTarget::uncharged_ns(bool* work) const {
  if (!o_.costs) return 0;
  const uint64_t n = commands_completed();
  const uint64_t commands = n >= commands_charged_ ? n - commands_charged_ : n;  // restarted
  *work |= commands != 0;
  return commands * o_.costs->command_ns + drives_.uncharged_ns(work);
}

// Between two of its pollers: where its CPU clock was when the iteration began, plus what the
// work done since costs. Realtime: the TSC on the virtual clock's scale.
uint64_t FabricTarget::cpu_now_ns() const {
  if (realtime_) return std::max(clock_.now(), wall_.now_ns());
  bool work = false;
  return std::max(clock_.now(), busy_until_) + uncharged_ns(&work);
}

uint64_t FabricTarget::next_event_ns() const {
  return !realtime_ && busy_with_work_ && busy_until_ > clock_.now() ? busy_until_ : UINT64_MAX;
}

bool FabricTarget::step() {
  const bool model = o_.costs && !realtime_;
  if (model && clock_.now() < busy_until_) return false;  // still on the last iteration's work
  const bool work = fw_->step(model ? o_.costs->reactor_iteration_ns : 0);

  if (model) {
    bool charged = false;
    const uint64_t n = commands_completed();
    const uint64_t cost = o_.costs->reactor_iteration_ns + uncharged_ns(&charged);
    drives_.charge(&charged);
    commands_charged_ = n;
    busy_until_ = clock_.now() + cost;
    busy_with_work_ = work || charged;
    if (busy_with_work_) busy_ns_ += cost;
  }
  if (stopped_) {
    event::CurrentThreadScope scope(thread_);
    tgt_.reset();  // the transport's listener and connections close with it
    commands_charged_ = 0;
    stopped_ = stopping_ = false;
  }
  return work;
}

void FabricTarget::set_realtime(bool on) {
  if (realtime_ && !on) busy_until_ = cpu_now_ns();  // the CPU clock never goes back
  realtime_ = on;
  if (on) wall_.start(std::max(clock_.now(), busy_until_));
}

std::function<void(const nvme::Qpair*, bool, const std::string&)> FabricTarget::qpair_observer() {
  return [this](const nvme::Qpair* qp, bool created, const std::string&) {
    if (created)
      drives_.watch(qp);
    else
      drives_.unwatch(qp);
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
