// nvme::Controller, fabrics: connecting queues step by step (the connection, then the Connect
// command), and the controller reset that runs that way — nothing here blocks the calling
// thread, so a reactor that resets one controller keeps serving the others (SPDK's bdev_nvme
// resets with spdk_nvme_ctrlr_reconnect_poll_async for the same reason).
#include <algorithm>
#include <cstring>

#include "driver/nvme/controller.h"
#include "driver/nvme/controller_internal.h"
#include "driver/nvme/status.h"

namespace pollux::nvme {

namespace nf = spec::nvmf;
using detail::host_id;

namespace {
const uint16_t kAbortedByRequest = sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest);

sn::SubmissionEntry property_command(uint8_t fctype, uint32_t offset, uint8_t attrib,
                                     uint64_t value = 0) {
  sn::SubmissionEntry cmd{};
  if (fctype == nf::fctype::kPropertyGet) {
    nf::PropertyGetCommand c{};
    c.opcode = nf::kOpcodeFabrics;
    c.fctype = fctype;
    c.attrib = attrib;
    c.ofst = offset;
    std::memcpy(&cmd, &c, sizeof cmd);
  } else {
    nf::PropertySetCommand c{};
    c.opcode = nf::kOpcodeFabrics;
    c.fctype = fctype;
    c.attrib = attrib;
    c.ofst = offset;
    c.value = value;
    std::memcpy(&cmd, &c, sizeof cmd);
  }
  return cmd;
}
}  // namespace

// ------------------------------------------------------------------ queue connects ---

// Fabrics Connect on `c.qp`: the admin queue creates the association (and learns the
// CNTLID), an I/O queue joins it. SQ flow control is turned off: completions then carry no SQ
// head (the queue pair counts completions instead) and C2H success needs no response capsule.
int Controller::send_connect(QueueConnect& c) {
  Qpair& qp = *c.qp;
  const bool admin = qp.id() == nf::connect::kAdminQid;
  nf::ConnectCommand cc{};
  cc.opcode = nf::kOpcodeFabrics;
  cc.fctype = nf::fctype::kConnect;
  cc.recfmt = nf::connect::kRecfmt;
  cc.qid = qp.id();
  cc.sqsize = static_cast<uint16_t>(qp.queue_size() - 1);
  cc.cattr = nf::connect::kCattrDisableSqFlowControl;
  cc.kato = admin ? options_.keep_alive_timeout_ms : 0;
  c.data = nf::ConnectData{};
  std::memcpy(c.data.hostid, host_id().data(), sizeof c.data.hostid);
  c.data.cntlid = admin ? nf::connect::kCntlidDynamic : cntlid_;
  const std::string subnqn = transport_->subsystem_nqn();
  if (subnqn.empty() || subnqn.size() > nf::kNqnMaxLength) {
    c.error = "connect: bad subsystem NQN";
    return -EINVAL;
  }
  if (hostnqn_.size() > nf::kNqnMaxLength) {
    c.error = "connect: host NQN longer than 223 bytes";
    return -EINVAL;
  }
  std::memcpy(c.data.subnqn, subnqn.data(), subnqn.size());
  std::memcpy(c.data.hostnqn, hostnqn_.data(), hostnqn_.size());
  sn::SubmissionEntry cmd;
  std::memcpy(&cmd, &cc, sizeof cmd);
  qp.begin_connect();  // the Connect goes first; the rest waits until it is done
  c.answered = false;
  const int rc = qp.submit_first(
      cmd, &c.data, sizeof c.data,
      [](void* ctx, const sn::CompletionEntry& cpl) {
        auto* q = static_cast<QueueConnect*>(ctx);
        q->cpl = cpl;
        q->answered = true;
      },
      &c);
  if (rc != 0) {
    c.error = "connect queue " + std::to_string(qp.id()) + " to " + subnqn + ": submit failed";
    return rc;
  }
  c.deadline = clock_.now() + clock_.us_to_ticks(options_.admin_timeout_us);
  return 0;
}

// The Connect's answer: the association, or why not; then in-band authentication when the
// controller asks for it or a controller key is given (synchronous: a few round trips on the
// connection just made). "" or what failed.
std::string Controller::finish_connect(QueueConnect& c) {
  Qpair& qp = *c.qp;
  const std::string what =
      "connect queue " + std::to_string(qp.id()) + " to " + transport_->subsystem_nqn();
  if (cpl_is_error(c.cpl)) return what + ": " + describe(Status::from_cqe(c.cpl.status));
  const uint16_t authreq = nf::connect::authreq(c.cpl.dw0);
  if (authreq & nf::connect::kAuthreqAscr)
    return what + ": the subsystem requires secure channel concatenation (TLS; not supported)";
  if (authreq & nf::connect::kAuthreqAtr) {
    if (!auth_) {
      return what +
             ": the subsystem requires in-band authentication (DH-HMAC-CHAP): give "
             "this host's key (dhchap_key)";
    }
    return authenticate_queue(qp);
  }
  if (auth_ && auth_->ctrlr_key) return authenticate_queue(qp);  // the controller proves itself
  return "";
}

int Controller::step_connect(QueueConnect& c) {
  Qpair& qp = *c.qp;
  auto fail = [&](int rc, std::string why) {
    qp.pause();  // not connected: nothing may go out on it until a reset connects it again
    // A connection without its association is of no use, and a broken one is what the health
    // check (connections_ok) looks for.
    qp.transport().disconnect();
    c.error = std::move(why);
    c.stage = QueueConnect::Stage::kFailed;
    return rc;
  };
  switch (c.stage) {
    case QueueConnect::Stage::kDone:
      return 0;
    case QueueConnect::Stage::kFailed:
      return -EIO;
    case QueueConnect::Stage::kTransport: {
      const int rc = qp.transport().poll_connect();
      if (rc == -EAGAIN) return rc;
      if (rc != 0) {
        return fail(-ECONNREFUSED, "connect queue " + std::to_string(qp.id()) + ": " +
                                       qp.transport().connect_error());
      }
      if (const int s = send_connect(c); s != 0) return fail(s, c.error);
      c.stage = QueueConnect::Stage::kCommand;
      [[fallthrough]];
    }
    case QueueConnect::Stage::kCommand: {
      const std::string what =
          "connect queue " + std::to_string(qp.id()) + " to " + transport_->subsystem_nqn();
      if (qp.process_completions() < 0) return fail(-ENODEV, what + ": gone");
      if (!c.answered) {
        const bool broken = qp.transport().broken();
        if (!broken && clock_.now() <= c.deadline) return -EAGAIN;
        qp.fail_all(kAbortedByRequest);
        return broken ? fail(-ECONNRESET, what + ": the connection broke")
                      : fail(-ETIMEDOUT, what + ": no answer in time");
      }
      if (std::string e = finish_connect(c); !e.empty()) return fail(-EIO, e);
      if (qp.id() == nf::connect::kAdminQid) cntlid_ = nf::connect::cntlid(c.cpl.dw0);
      qp.resume();
      c.stage = QueueConnect::Stage::kDone;
      return 0;
    }
  }
  return -EIO;
}

// The synchronous form (initialisation, alloc_io_qpair, the synchronous reset): the queue's
// transport has connected (or failed to); the Connect is polled to its end.
std::string Controller::connect_queue(Qpair& qp) {
  QueueConnect c;
  c.qp = &qp;
  int rc;
  while ((rc = step_connect(c)) == -EAGAIN) wait_turn();
  return rc == 0 ? "" : c.error;
}

Controller::QueueConnect& Controller::connect_state(Qpair* qp) {
  auto& c = connect_states_[qp];
  if (!c) c = std::make_unique<QueueConnect>();
  return *c;
}

Result<std::unique_ptr<Qpair>> Controller::alloc_io_qpair_async(const QpairOptions& options) {
  if (!transport_->fabrics()) return alloc_io_qpair(options);
  auto qp = new_io_qpair(options, /*connect=*/false);
  if (!qp) return qp;
  (void)(*qp)->transport().start_connect();
  std::lock_guard lock(admin_mu_);
  QueueConnect& c = connect_state(qp->get());
  c = QueueConnect{};
  c.qp = qp->get();
  io_connects_.insert(qp->get());
  return qp;
}

int Controller::poll_io_qpair_connect(Qpair& qp) {
  QueueConnect* c;
  {
    std::lock_guard lock(admin_mu_);
    if (!io_connects_.contains(&qp)) return qp.transport().broken() ? -ENOTCONN : 0;
    c = &connect_state(&qp);
  }
  // Stepped without the admin lock: the owner's thread, which a reset pauses before it takes
  // the queue over (so no reset runs meanwhile); the state lives as long as the queue pair.
  const int rc = step_connect(*c);
  if (rc == -EAGAIN) return rc;
  {
    std::lock_guard lock(admin_mu_);
    io_connects_.erase(&qp);
  }
  if (rc != 0) qp.transport().leave_path();
  return rc;
}

// ------------------------------------------------------------------ asynchronous reset ---

void Controller::drop_from_reset(const Qpair* qp) {
  std::erase_if(reset_run_->io, [qp](const QueueConnect* c) { return c->qp == qp; });
}

int Controller::reset() {
  if (!transport_->fabrics()) return reset_blocking();
  int rc = reset_start();
  while (rc == -EAGAIN) {
    rc = reset_poll();
    if (rc == -EAGAIN) wait_turn();
  }
  return rc;
}

// KATO as the target applies it (rounded up to its KAS, 100 ms units) plus its CQT. Without
// keep-alive the target never times the association out: only CQT is waited for (and the
// connection's own end is what bounds the risk).
void Controller::fence_writes() {
  const uint32_t unit_ms = uint32_t{cdata_.kas} * 100u;
  uint64_t kato_ms = options_.keep_alive_timeout_ms;
  if (kato_ms != 0 && unit_ms != 0) kato_ms = (kato_ms + unit_ms - 1) / unit_ms * unit_ms;
  const uint64_t until = clock_.now() + clock_.us_to_ticks((kato_ms + cdata_.cqt) * 1000);
  if (until > write_fence_until_.load(std::memory_order_relaxed))
    write_fence_until_.store(until, std::memory_order_release);
}

int Controller::reset_start() {
  if (!transport_->fabrics()) {
    reset_result_ = reset_blocking();
    return reset_result_;
  }
  std::unique_lock lock(admin_mu_);
  if (reset_run_) return -EAGAIN;  // one under way: this joins it
  lock.unlock();
  recovery_.store(kRecoveryIdle, std::memory_order_release);
  if (state_ == InitState::kFailed) return -ENODEV;
  ++stats_.resets;
  if (transport_->probe_gone()) return fail_reset(-ENODEV);
  fence_writes();
  lock.lock();
  // The I/O queues' connections go first (see reset_blocking()).
  for (Qpair* qp : io_qpairs_) qp->transport().disconnect();
  arm_cap_timeout();
  reset_run_ = std::make_unique<ResetRun>();
  reset_run_->before = state_;
  // An admin queue whose connection broke, or whose last Connect failed, holds no
  // association to disable: connecting again starts a fresh one.
  if (admin_->transport().broken() || admin_->resetting())
    reset_run_->step = ResetRun::Step::kConnectAdmin;
  reset_active_.store(true, std::memory_order_release);
  return -EAGAIN;
}

int Controller::reset_poll() {
  if (!transport_->fabrics()) return reset_result_;
  int rc;
  {
    std::lock_guard lock(admin_mu_);
    if (!reset_run_) return reset_result_;
    rc = reset_step(*reset_run_);
    if (rc == -EAGAIN) return rc;
  }
  return finish_reset_run(rc);
}

int Controller::finish_reset_run(int rc) {
  std::unique_ptr<ResetRun> r;
  {
    std::lock_guard lock(admin_mu_);
    r = std::move(reset_run_);
    reset_active_.store(false, std::memory_order_release);
  }
  if (rc == 0) {
    state_ = InitState::kReady;
    reset_failures_in_a_row_ = 0;
  } else {
    if (r->enabled) state_ = r->before;
    rc = fail_reset(rc);
  }
  reset_result_ = rc;
  return rc;
}

// One admin command of the reset, polled: -EAGAIN while it is out, 0 with r.cpl (success),
// else a negative errno (an error status: -EIO).
int Controller::reset_command(ResetRun& r, const sn::SubmissionEntry& cmd) {
  if (!r.command_out) {
    r.answered = false;
    const int rc = admin_->submit_raw(
        cmd, nullptr, 0,
        [](void* ctx, const sn::CompletionEntry& cpl) {
          auto* run = static_cast<ResetRun*>(ctx);
          run->cpl = cpl;
          run->answered = true;
        },
        &r);
    if (rc != 0) return rc;
    r.command_out = true;
    r.command_deadline = clock_.now() + clock_.us_to_ticks(options_.admin_timeout_us);
  }
  if (admin_->process_completions() < 0) {
    r.command_out = false;
    return -ENODEV;
  }
  if (!r.answered) {
    const bool broken = admin_->transport().broken();
    if (!broken && clock_.now() <= r.command_deadline) return -EAGAIN;
    admin_->fail_all(kAbortedByRequest);
    r.command_out = false;
    return broken ? -ECONNRESET : -ETIMEDOUT;
  }
  r.command_out = false;
  return cpl_is_error(r.cpl) ? -EIO : 0;
}

// The steps of reset() (controller_reset.cc), each advanced as far as it goes without
// waiting. Disabling is best effort on fabrics: a controller that cannot be reached is
// replaced by the fresh association the admin Connect makes.
int Controller::reset_step(ResetRun& r) {
  using Step = ResetRun::Step;
  const uint8_t k4 = nf::property::kSize4;
  for (;;) {
    switch (r.step) {
      case Step::kReadCc: {
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertyGet, sn::reg::kCc, k4));
        if (rc == -EAGAIN) return rc;
        r.cc = static_cast<uint32_t>(nf::property_value(r.cpl));
        r.step = (rc != 0 || r.cc == ~0u) ? Step::kConnectAdmin : Step::kDisable;
        continue;
      }
      case Step::kDisable: {
        const uint32_t cc = r.cc & ~(sn::cc::kEn | 3u << 14);
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertySet, sn::reg::kCc, k4, cc));
        if (rc == -EAGAIN) return rc;
        r.step = rc != 0 ? Step::kConnectAdmin : Step::kWaitNotReady;
        continue;
      }
      case Step::kWaitNotReady: {
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertyGet, sn::reg::kCsts, k4));
        if (rc == -EAGAIN) return rc;
        const uint32_t csts = static_cast<uint32_t>(nf::property_value(r.cpl));
        if (rc == 0 && (csts & sn::csts::kRdy) && clock_.now() <= deadline_) return -EAGAIN;
        r.step = Step::kConnectAdmin;
        continue;
      }
      case Step::kConnectAdmin: {
        if (!r.started) {
          r.started = true;
          // The admin queue's outstanding commands (the AERs) are gone with the controller.
          ++abort_epoch_;  // Aborts in flight end here, and are not failures
          // Aborts still queued name commands the reset ends: sent later they could hit a new
          // command that reuses the CID.
          for (uint32_t stale; abort_requests_.try_pop(stale);) {
          }
          admin_->reset_rings(kAbortedByRequest, /*connect_now=*/false);
          keep_alive_pending_ = false;  // the reset ended it
          admin_stuck_.store(false, std::memory_order_release);
          admin_connect_ = QueueConnect{};  // the rings' reset ended any Connect of it
          admin_connect_.qp = admin_.get();
        }
        const int rc = step_connect(admin_connect_);
        if (rc == -EAGAIN) return rc;
        r.started = false;
        if (rc != 0) {
          init_error_ = "reset: " + admin_connect_.error;
          return -ECONNRESET;
        }
        r.step = Step::kEnable;
        continue;
      }
      case Step::kEnable: {
        if (!r.started) {
          r.started = true;
          r.enabled = true;
          state_ = InitState::kEnable;
          transport_->program_admin_queue(admin_->transport());
          arm_cap_timeout();
        }
        const uint32_t cc =
            sn::cc::make(true, 0, 0, sn::cc::kAmsRoundRobin, sn::cc::kShnNone, 6, 4);
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertySet, sn::reg::kCc, k4, cc));
        if (rc == -EAGAIN) return rc;
        r.started = false;
        r.step = Step::kWaitReady;  // a failed write shows as RDY never set
        continue;
      }
      case Step::kWaitReady: {
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertyGet, sn::reg::kCsts, k4));
        if (rc == -EAGAIN) return rc;
        const uint32_t csts = static_cast<uint32_t>(nf::property_value(r.cpl));
        if (rc != 0) {
          init_error_ = "device reads all ones (removed?)";
          return -ETIMEDOUT;
        }
        if (csts & sn::csts::kCfs) {
          init_error_ = csts_problem_of(csts);
          return -ETIMEDOUT;
        }
        if (!(csts & sn::csts::kRdy)) {
          if (clock_.now() <= deadline_) return -EAGAIN;
          init_error_ = "timed out after CAP.TO";
          return -ETIMEDOUT;
        }
        r.step = Step::kSetQueues;
        continue;
      }
      case Step::kSetQueues: {
        const uint32_t pairs = std::max(io_queues_granted_, 1u);
        sn::SubmissionEntry cmd{};
        cmd.opcode = sn::admin::kSetFeatures;
        cmd.cdw10 = sn::feature::kNumberOfQueues;
        cmd.cdw11 = (pairs - 1) | (pairs - 1) << 16;
        const int rc = reset_command(r, cmd);
        if (rc == -EAGAIN) return rc;
        if (rc != 0) {
          init_error_ = "reset: set number of queues failed";
          return -EIO;
        }
        r.step = Step::kConnectIo;
        continue;
      }
      case Step::kConnectIo: {
        // Every I/O queue pair again, same id and memory, all connecting at once; queue
        // pairs created meanwhile join (their owners' own connects end here).
        const uint16_t retriable = sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion);
        for (Qpair* qp : io_qpairs_) {
          const bool known = std::any_of(r.io.begin(), r.io.end(),
                                         [qp](const QueueConnect* c) { return c->qp == qp; });
          if (known) continue;
          // The rings' reset ends an owner's Connect in flight (its callback writes into the
          // queue's connect state, which is reused here only afterwards).
          stats_.reset_aborted_ios += qp->reset_rings(retriable, /*connect_now=*/false);
          io_connects_.erase(qp);
          QueueConnect& c = connect_state(qp);
          c = QueueConnect{};
          c.qp = qp;
          r.io.push_back(&c);
        }
        bool waiting = false;
        for (QueueConnect* c : r.io) {
          const int rc = step_connect(*c);
          if (rc == -EAGAIN) {
            waiting = true;
          } else if (rc != 0) {
            init_error_ = "reset: " + c->error;
            return -EIO;
          }
        }
        if (waiting) return -EAGAIN;
        for (QueueConnect* c : r.io) c->qp->resume();  // waiting requests go out now
        r.step = Step::kAsyncEvents;
        continue;
      }
      case Step::kAsyncEvents:
      case Step::kAsyncEventsNoticesOnly: {
        // As enable_async_events(): SMART warnings and the notices OAES advertises; a
        // controller that refuses the SMART bits gets the notices alone.
        const bool notices_only = r.step == Step::kAsyncEventsNoticesOnly;
        sn::SubmissionEntry aec{};
        aec.opcode = sn::admin::kSetFeatures;
        aec.cdw10 = sn::feature::kAsyncEventConfig;
        aec.cdw11 = (notices_only ? 0 : 0xffu) | (cdata_.oaes & 0x300u);
        const int rc = reset_command(r, aec);
        if (rc == -EAGAIN) return rc;
        if (rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -ENODEV) {
          init_error_ = "reset: async event configuration: no answer";
          return -EIO;
        }
        if (rc != 0 && !notices_only && (cdata_.oaes & 0x300u) != 0) {
          r.step = Step::kAsyncEventsNoticesOnly;
          continue;
        }
        const uint32_t n = std::min<uint32_t>(options_.async_events, uint32_t{cdata_.aerl} + 1);
        for (uint32_t i = 0; i < n; ++i) arm_async_event();
        r.step = Step::kCheck;
        continue;
      }
      case Step::kCheck: {
        const int rc =
            reset_command(r, property_command(nf::fctype::kPropertyGet, sn::reg::kCsts, k4));
        if (rc == -EAGAIN) return rc;
        const std::string e =
            rc != 0 ? std::string("device reads all ones (removed?)")
                    : csts_problem_of(static_cast<uint32_t>(nf::property_value(r.cpl)));
        if (!e.empty()) {
          init_error_ = "reset: " + e;
          return -EIO;
        }
        return 0;
      }
    }
  }
}

}  // namespace pollux::nvme
