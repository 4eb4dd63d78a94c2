#include "scenarios/sim/fabric_target.h"

#include "driver/bdev/modules/nvme.h"

namespace pollux::sim {

namespace ft = fabric::target;

std::unique_ptr<FabricTarget> FabricTarget::create(const env::Clock& clock,
                                                   fabric::net::Network& net,
                                                   FabricTargetOptions options,
                                                   std::string* error) {
  std::unique_ptr<FabricTarget> t(new FabricTarget(net, std::move(options)));
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
  t->thread_ = t->fw_->create_thread("sim-target", 0);
  auto mgr = bdev::Manager::create(*t->fw_);
  if (!mgr) {
    *error = "fabric target bdevs: " + mgr.error().message;
    return nullptr;
  }
  t->mgr_ = std::move(mgr).value();
  return t;
}

bool FabricTarget::step() {
  const bool work = fw_->step();
  if (stopped_) {
    event::CurrentThreadScope scope(thread_);
    tgt_.reset();  // the transport's listener and connections close with it
    stopped_ = stopping_ = false;
  }
  return work;
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
