// nvme::Controller recovery: reset (disable, reconnect or re-enable, recreate the I/O queues),
// shutdown, and the disable after a failed initialisation.
#include <algorithm>

#include "driver/nvme/controller.h"
#include "driver/nvme/controller_internal.h"
#include "driver/nvme/status.h"

namespace pollux::nvme {

// ---------------------------------------------------------------------------- reset ---

Result<sn::CompletionEntry> Controller::set_number_of_queues(uint32_t pairs) {
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kSetFeatures;
  cmd.cdw10 = sn::feature::kNumberOfQueues;
  cmd.cdw11 = (pairs - 1) | (pairs - 1) << 16;
  return admin_sync(cmd);
}

// Notices are sent only when enabled (Asynchronous Event Configuration): ask for SMART
// critical warnings plus whichever notices the controller advertises in OAES; a controller
// that refuses the SMART bits (Linux's nvmet takes only the notices) gets the notices alone,
// one that refuses both works without them. Then keep AERs outstanding. "" or what failed.
std::string Controller::enable_async_events() {
  sn::SubmissionEntry aec{};
  aec.opcode = sn::admin::kSetFeatures;
  aec.cdw10 = sn::feature::kAsyncEventConfig;
  aec.cdw11 = 0xff | (cdata_.oaes & 0x300u);
  if (!admin_sync(aec) && (cdata_.oaes & 0x300u) != 0) {
    aec.cdw11 = cdata_.oaes & 0x300u;
    (void)admin_sync(aec);
  }
  if (admin_stuck_.load(std::memory_order_acquire)) return "async event configuration: no answer";
  std::lock_guard lock(admin_mu_);
  const uint32_t n = std::min<uint32_t>(options_.async_events, uint32_t{cdata_.aerl} + 1);
  for (uint32_t i = 0; i < n; ++i) arm_async_event();
  return "";
}

// The transport's admin-queue set-up (PCIe: AQA/ASQ/ACQ), then CC.EN = 1; the caller waits
// for RDY (by CAP.TO).
void Controller::enable_controller() {
  transport_->program_admin_queue(admin_->transport());
  set_reg32(sn::reg::kCc, sn::cc::make(true, 0, 0, sn::cc::kAmsRoundRobin,
                                                 sn::cc::kShnNone, 6, 4));
  arm_cap_timeout();
}

// A queue pair on a queue of the transport's (created, not yet known to the controller).
Result<std::unique_ptr<Qpair>> Controller::make_queue(uint16_t qid, const QpairOptions& o,
                                                      bool connect) {
  QueueParams p;
  p.qid = qid;
  p.entries = o.queue_size;
  p.page_size = 4096;  // CC.MPS = 0
  p.prefer_sgl = o.prefer_sgl;
  p.sgl_supported = sgl_supported_;
  p.connect = connect;
  auto queue = transport_->create_queue(p);
  if (!queue) return queue.error();
  return Qpair::create(qctx_, std::move(queue).value(), qid, o);
}

// The queue comes into being on the controller (PCIe: Create I/O CQ, then SQ). "" or what
// failed.
std::string Controller::start_io_queue(Qpair& qp) {
  if (transport_->fabrics()) return connect_queue(qp);
  const AdminCommand admin = [this](const sn::SubmissionEntry& c) { return admin_sync(c); };
  return transport_->start_io_queue(qp.transport(), admin);
}

int Controller::recreate_io_queues() {
  const uint16_t retriable = sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion);
  std::vector<Qpair*> qps;
  {
    std::lock_guard lock(admin_mu_);
    qps = io_qpairs_;
  }
  for (Qpair* qp : qps) stats_.reset_aborted_ios += qp->reset_rings(retriable);
  for (Qpair* qp : qps) {
    if (std::string e = start_io_queue(*qp); !e.empty()) {
      init_error_ = "reset: " + e;
      return -EIO;
    }
  }
  for (Qpair* qp : qps) qp->resume();
  return 0;
}

int Controller::fail_reset(int rc) {
  ++stats_.reset_failures;
  // A removed device does not come back: fail at once, with the removal status.
  const bool gone = transport_->gone();
  if (!gone) transport_->path_failed();  // multipath: the next attempt takes the next path
  if (++reset_failures_in_a_row_ >= options_.max_reset_failures || gone) {
    state_ = InitState::kFailed;
    const uint16_t final_status =
        gone ? kRemovedStatus
             : sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion, /*dnr=*/true);
    std::lock_guard lock(admin_mu_);
    for (Qpair* qp : io_qpairs_) {
      qp->fail_all(final_status);
      qp->resume();  // reaping reports the failure (-ENODEV once removed; nothing otherwise)
    }
  }
  return rc;
}

bool Controller::healthy() {
  if (transport_->fabrics()) {
    // A register read is a round trip here: the connections and the Keep Alives tell.
    std::lock_guard lock(admin_mu_);
    return connections_ok() && !admin_stuck_.load(std::memory_order_acquire);
  }
  const uint32_t csts = reg32(sn::reg::kCsts);
  return csts != ~0u && !(csts & sn::csts::kCfs) && (csts & sn::csts::kRdy) &&
         !admin_stuck_.load(std::memory_order_acquire);
}

// The whole reset in one call: PCIe (registers by MMIO). Fabrics controllers reset step by
// step, the same steps through properties and connections (controller_connect.cc).
int Controller::reset_blocking() {
  // Whatever requested this reset (a timeout, or a caller that found the controller
  // unhealthy) is answered by it.
  recovery_.store(kRecoveryIdle, std::memory_order_release);
  if (state_ == InitState::kFailed) return -ENODEV;
  ++stats_.resets;
  if (transport_->probe_gone()) return fail_reset(-ENODEV);
  // 1. Disable. A controller in fatal status may not answer until EN is cleared.
  arm_cap_timeout();
  const uint32_t cc = reg32(sn::reg::kCc);
  if (cc == ~0u) return fail_reset(-ENODEV);
  set_reg32(sn::reg::kCc, cc & ~(sn::cc::kEn | 3u << 14));
  if (!wait_csts(sn::csts::kRdy, 0)) return fail_reset(-ETIMEDOUT);
  // 2. The admin queue's outstanding commands (the AERs) are gone with the controller.
  {
    std::lock_guard lock(admin_mu_);
    ++abort_epoch_;  // Aborts in flight end here, and are not failures
    // Aborts still queued name commands the reset ends: sent later they could hit a new
    // command that reuses the CID.
    for (uint32_t stale; abort_requests_.try_pop(stale);) {
    }
    admin_->reset_rings(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
    keep_alive_pending_ = false;  // the reset ended it
    admin_stuck_.store(false, std::memory_order_release);  // disabled: nothing is the device's
    admin_->resume();
  }
  // 3. Enable with the same admin queue, then what a fresh controller needs from us.
  const InitState before = state_;
  state_ = InitState::kEnable;  // admin_sync refuses a failed controller, not this
  enable_controller();
  if (!wait_csts(sn::csts::kRdy, sn::csts::kRdy)) {
    state_ = before;
    return fail_reset(-ETIMEDOUT);
  }
  if (!set_number_of_queues(std::max(io_queues_granted_, 1u))) {
    state_ = before;
    return fail_reset(-EIO);
  }
  // 4. Every I/O queue pair again, same id and memory; waiting requests go out after.
  if (const int rc = recreate_io_queues(); rc != 0) {
    state_ = before;
    return fail_reset(rc);
  }
  if (std::string e = enable_async_events(); !e.empty()) {
    init_error_ = "reset: " + e;
    state_ = before;
    return fail_reset(-EIO);
  }
  if (std::string e = csts_problem(); !e.empty()) {
    init_error_ = "reset: " + e;
    state_ = before;
    return fail_reset(-EIO);
  }
  state_ = InitState::kReady;
  reset_failures_in_a_row_ = 0;
  return 0;
}

void Controller::shutdown() {
  if (transport_->gone() || state_ != InitState::kReady) return;
  const uint32_t cc = reg32(sn::reg::kCc);
  set_reg32(sn::reg::kCc, (cc & ~(3u << 14)) | sn::cc::kShnNormal << 14);
  const uint64_t deadline = clock_.now() + clock_.us_to_ticks(
      std::max<uint64_t>(cdata_.rtd3e, 5'000'000));
  while (clock_.now() < deadline) {
    const uint32_t csts = reg32(sn::reg::kCsts);
    if (csts == ~0u || sn::csts::shst(csts) == sn::csts::kShstComplete) break;
    wait_turn();
  }
  set_reg32(sn::reg::kCc, 0);
}

// Initialisation failed after it set CC.EN: the controller is left disabled, stopped before
// its admin queue's memory goes, and found reset by whoever attaches next. Left enabled, it
// could drop RDY on its own meanwhile (a spontaneous disable during a hot-plug re-attach:
// chaos seed 7100416), and the next attach would wait out CAP.TO for a RDY that never comes.
void Controller::disable_after_failed_init() {
  if (state_ != InitState::kFailed || !init_enabled_ || transport_->fabrics() ||
      transport_->gone())
    return;
  stop_if_enabled();
}

Controller::~Controller() {
  shutdown();
  disable_after_failed_init();
  if (admin_) admin_->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
}

}  // namespace pollux::nvme
