// nvme::Controller: attach and initialisation, identify and namespaces, the admin queue
// (synchronous and asynchronous commands, Aborts, async events), I/O timeouts, queue-pair
// allocation. Fabrics: controller_fabrics.cc; recovery: controller_reset.cc.
#include "driver/nvme/controller.h"

#include "driver/nvme/controller_internal.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <random>

#include "driver/nvme/pcie.h"
#include "driver/nvme/status.h"
#include "spec/nvme_fabrics.h"

namespace pollux::nvme {

namespace {

std::string hex32(uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

constexpr std::size_t kScratchBytes = 64 * 1024;

// Opcode bits [1:0]: 01 host→controller data, 10 controller→host, 11 both.
bool to_device(uint8_t opcode) { return opcode & 1; }
bool from_device(uint8_t opcode) { return opcode & 2; }

namespace nf = spec::nvmf;

std::string uuid_text(const std::array<uint8_t, 16>& u) {
  char b[37];
  std::snprintf(b, sizeof b,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return b;
}

}  // namespace

// This process's host identifier (a random UUID, version 4), the same on every fabrics
// Connect: a target tells its hosts apart by it.
const std::array<uint8_t, 16>& detail::host_id() {
  static const std::array<uint8_t, 16> id = [] {
    std::array<uint8_t, 16> u{};
    std::random_device rd;
    for (auto& b : u) b = static_cast<uint8_t>(rd());
    u[6] = static_cast<uint8_t>((u[6] & 0x0f) | 0x40);
    u[8] = static_cast<uint8_t>((u[8] & 0x3f) | 0x80);
    return u;
  }();
  return id;
}

const char* to_string(TimeoutAction a) {
  switch (a) {
    case TimeoutAction::kNone: return "none";
    case TimeoutAction::kAbort: return "abort";
    case TimeoutAction::kReset: return "reset";
  }
  return "?";
}

const char* Controller::to_string(InitState s) {
  switch (s) {
    case InitState::kConnect: return "connect the admin queue";
    case InitState::kReadCap: return "read CAP";
    case InitState::kDisable: return "disable";
    case InitState::kWaitNotReady: return "wait for CSTS.RDY = 0";
    case InitState::kEnable: return "enable";
    case InitState::kWaitReady: return "wait for CSTS.RDY = 1";
    case InitState::kIdentify: return "identify controller";
    case InitState::kSetQueues: return "set number of queues";
    case InitState::kIdentifyNamespaces: return "identify namespaces";
    case InitState::kArmAer: return "arm asynchronous events";
    case InitState::kReady: return "ready";
    case InitState::kFailed: return "failed";
  }
  return "?";
}

Controller::Controller(std::unique_ptr<Transport> transport, ControllerOptions options)
    : transport_(std::move(transport)),
      options_(options),
      registry_(options.registry ? *options.registry : env::MemoryRegistry::global()),
      clock_(options.clock ? *options.clock : env::system_clock()),
      timeout_action_(options.timeout_action) {
  qctx_.gone = &transport_->gone_flag();
  qctx_.clock = &clock_;
  hostnqn_ = options_.hostnqn.empty()
                 ? std::string(nf::kNqnUuidPrefix) + uuid_text(detail::host_id())
                 : options_.hostnqn;
}

Result<std::unique_ptr<Controller>> Controller::attach(std::unique_ptr<env::PciDevice> device,
                                                       ControllerOptions options) {
  if (!device) return make_error(EINVAL, "no device");
  env::MemoryRegistry& registry =
      options.registry ? *options.registry : env::MemoryRegistry::global();
  return attach(std::make_unique<PcieTransport>(std::move(device), registry), options);
}

Result<std::unique_ptr<Controller>> Controller::attach(std::unique_ptr<Transport> transport,
                                                       ControllerOptions options) {
  if (!transport) return make_error(EINVAL, "no transport");
  auto ctrl = std::unique_ptr<Controller>(new Controller(std::move(transport), options));
  auto scratch = env::DmaRegion::create(ctrl->registry_, kScratchBytes);
  if (!scratch) return scratch.error();
  ctrl->scratch_ = std::move(scratch).value();
  const ControllerOptions& o = ctrl->options_;
  if (!o.dhchap_key.empty() || !o.dhchap_ctrlr_key.empty()) {
    if (!ctrl->transport_->fabrics())
      return make_error(EINVAL, ctrl->transport_->address() +
                                    ": dhchap_key: in-band authentication is for fabrics "
                                    "controllers (NVMe/TCP, NVMe/RDMA)");
    auto creds = dhchap::make_host_credentials(o.dhchap_key, o.dhchap_ctrlr_key, o.dhchap_digests,
                                               o.dhchap_dhgroups, ctrl->hostnqn_,
                                               ctrl->transport_->subsystem_nqn());
    if (!creds) return make_error(EINVAL, ctrl->transport_->address() + ": " + creds.error().message);
    ctrl->auth_ = std::move(creds).value();
    auto buf = env::DmaRegion::create(ctrl->registry_, dhchap::kMessageBufferSize);
    if (!buf) return buf.error();
    ctrl->auth_buf_ = std::move(buf).value();
  }
  while (!ctrl->process_init()) {
  }
  if (ctrl->state_ != InitState::kReady) {
    return make_error(EIO, ctrl->transport_->address() + ": controller initialisation failed at '" +
                               to_string(ctrl->failed_at_) + "': " + ctrl->init_error_);
  }
  return ctrl;
}

void Controller::wait_turn() {
  if (options_.wait_hook) {
    options_.wait_hook();
  } else {
    sched_yield();
  }
}

// Reads CSTS until (CSTS & mask) == value or the deadline passes. Set-up path only. Waiting
// for a state other than "disabled", fatal status ends the wait even if RDY is set; waiting
// for RDY = 0 it does not: clearing CC.EN is how a controller in fatal status is recovered.
bool Controller::wait_csts(uint32_t mask, uint32_t value) {
  for (;;) {
    const uint32_t csts = reg32(sn::reg::kCsts);
    if (csts == ~0u) {
      init_error_ = "device reads all ones (removed?)";
      return false;
    }
    if (value != 0 && (csts & sn::csts::kCfs)) {
      init_error_ = "controller fatal status (CSTS.CFS, CSTS 0x" + hex32(csts) + ")";
      return false;
    }
    if ((csts & mask) == value) return true;
    if (clock_.now() > deadline_) {
      init_error_ = "timed out after CAP.TO";
      return false;
    }
    wait_turn();
  }
}

// "" while the enabled controller is sound, else what is wrong with it.
std::string Controller::csts_problem() { return csts_problem_of(reg32(sn::reg::kCsts)); }

std::string Controller::csts_problem_of(uint32_t csts) {
  if (csts == ~0u) return "device reads all ones (removed?)";
  if (csts & sn::csts::kCfs) {
    return "controller fatal status (CSTS.CFS, CSTS 0x" + hex32(csts) + ")";
  }
  if (!(csts & sn::csts::kRdy)) return "controller not ready (CSTS 0x" + hex32(csts) + ")";
  return "";
}

bool Controller::process_init() {
  auto fail = [this](std::string why) {
    if (!why.empty()) init_error_ = std::move(why);
    failed_at_ = state_;
    state_ = InitState::kFailed;
    return true;
  };
  // Once enabled, a controller can go fatal and still complete commands (SPDK's vfio-user
  // target does when it cannot raise an interrupt), so a command's success says nothing about
  // CSTS: look before every admin step, and once more before calling the controller ready.
  switch (state_) {
    case InitState::kIdentify:
    case InitState::kSetQueues:
    case InitState::kIdentifyNamespaces:
    case InitState::kArmAer:
      if (std::string e = csts_problem(); !e.empty()) return fail(e);
      break;
    default:
      break;
  }
  switch (state_) {
    case InitState::kConnect: {
      // Fabrics: the admin queue is a connection and a Connect before any register can be
      // read (they are properties, reached through it). PCIe has nothing to do here.
      if (transport_->fabrics()) {
        QpairOptions o;
        o.queue_size = std::clamp<uint32_t>(options_.admin_queue_size, 2, 4096);
        o.num_requests = o.queue_size - 1 + options_.async_events;
        o.batch_doorbells = false;
        auto admin = make_queue(0, o);
        if (!admin) return fail(admin.error().message);
        admin_ = std::move(admin).value();
        if (std::string e = connect_queue(*admin_); !e.empty()) return fail(e);
      }
      state_ = InitState::kReadCap;
      return false;
    }
    case InitState::kReadCap: {
      if (const int rc = transport_->prepare(); rc == -ENODEV) {
        return fail("CAP reads all ones (device gone?)");
      } else if (rc < 0) {
        return fail("transport set-up failed: error " + std::to_string(-rc));
      }
      cap_ = reg64(sn::reg::kCap);
      if (cap_ == ~0ull) return fail("CAP reads all ones (device gone?)");
      version_ = reg32(sn::reg::kVs);
      if (!(sn::cap::css(cap_) & sn::cap::kCssNvm)) return fail("NVM command set not supported");
      if (sn::cap::mpsmin(cap_) != 0) return fail("device does not support 4 KiB pages");
      state_ = InitState::kDisable;
      return false;
    }
    case InitState::kDisable: {
      arm_cap_timeout();
      const uint32_t cc = reg32(sn::reg::kCc);
      if (cc & sn::cc::kEn) {
        // A controller being enabled should finish becoming ready before it is disabled (as
        // SPDK waits); one in fatal status (CFS) never will, nor will one that dropped RDY on
        // its own (a spontaneous disable) — clearing EN is their recovery, so a wait that
        // runs out of CAP.TO clears it all the same. Only a device that is gone fails here.
        const uint32_t csts = reg32(sn::reg::kCsts);
        if (!(csts & sn::csts::kCfs) && !wait_csts(sn::csts::kRdy, sn::csts::kRdy) &&
            reg32(sn::reg::kCsts) == ~0u) {
          return fail("");
        }
        init_error_.clear();
        set_reg32(sn::reg::kCc, cc & ~sn::cc::kEn);
        // RDY may take its own CAP.TO to clear: the wait above may have used this one up.
        arm_cap_timeout();
      }
      state_ = InitState::kWaitNotReady;
      return false;
    }
    case InitState::kWaitNotReady:
      if (!wait_csts(sn::csts::kRdy, 0)) return fail("");
      state_ = InitState::kEnable;
      return false;
    case InitState::kEnable: {
      if (!admin_) {  // PCIe: the admin queue's memory, for AQA/ASQ/ACQ
        const uint32_t qsize = std::min<uint32_t>(options_.admin_queue_size, 4096);
        QpairOptions o;
        o.queue_size = std::min<uint32_t>(qsize, max_queue_entries());
        o.num_requests = o.queue_size - 1 + options_.async_events;
        o.batch_doorbells = false;
        auto admin = make_queue(0, o);
        if (!admin) return fail(admin.error().message);
        admin_ = std::move(admin).value();
      }
      enable_controller();
      init_enabled_ = true;
      state_ = InitState::kWaitReady;
      return false;
    }
    case InitState::kWaitReady:
      if (!wait_csts(sn::csts::kRdy, sn::csts::kRdy)) return fail("");
      state_ = InitState::kIdentify;
      return false;
    case InitState::kIdentify: {
      sn::SubmissionEntry cmd{};
      cmd.opcode = sn::admin::kIdentify;
      cmd.cdw10 = sn::cns::kController;
      auto cpl = admin_sync(cmd, &cdata_, sizeof cdata_);
      if (!cpl) return fail("identify controller: " + cpl.error().message);
      // MDTS (0 = unlimited), within what the transport can describe in one command.
      qctx_.max_transfer = transport_->max_transfer();
      if (cdata_.mdts != 0 && cdata_.mdts < 20) {
        const uint32_t mdts = (1u << cdata_.mdts) * 4096;
        if (qctx_.max_transfer == 0 || mdts < qctx_.max_transfer) qctx_.max_transfer = mdts;
      }
      sgl_supported_ = (cdata_.sgls & 3) != 0;
      transport_->identified(cdata_);
      abort_slots_.assign(uint32_t{cdata_.acl} + 1, AbortSlot{});
      state_ = InitState::kSetQueues;
      return false;
    }
    case InitState::kSetQueues: {
      auto cpl = set_number_of_queues(std::clamp<uint32_t>(options_.io_queues_requested, 1, 65535));
      if (!cpl) return fail("set number of queues: " + cpl.error().message);
      const uint32_t nsq = (cpl->dw0 & 0xffff) + 1, ncq = (cpl->dw0 >> 16) + 1;
      io_queues_granted_ = std::min(nsq, ncq);
      qid_used_.assign(io_queues_granted_ + 1, false);
      qid_used_[0] = true;
      state_ = InitState::kIdentifyNamespaces;
      return false;
    }
    case InitState::kIdentifyNamespaces:
      if (!identify_namespaces()) return fail("");
      state_ = InitState::kArmAer;
      return false;
    case InitState::kArmAer: {
      if (std::string e = enable_async_events(); !e.empty()) return fail(e);
      if (std::string e = csts_problem(); !e.empty()) return fail(e + " after initialisation");
      state_ = InitState::kReady;
      init_enabled_ = false;  // initialised: a later failure is a reset's, not this
      return true;
    }
    case InitState::kReady:
    case InitState::kFailed:
      return true;
  }
  return true;
}

bool Controller::identify_namespaces() {
  std::array<uint32_t, 1024> list{};
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kIdentify;
  cmd.cdw10 = sn::cns::kActiveNamespaceList;
  auto cpl = admin_sync(cmd, list.data(), sizeof list);
  if (!cpl) {
    init_error_ = "active namespace list: " + cpl.error().message;
    return false;
  }
  for (uint32_t nsid : list) {
    if (nsid == 0) break;
    auto ns = std::make_unique<Namespace>();
    auto usable = identify_namespace(nsid, ns.get());
    if (!usable) {
      init_error_ = "identify namespace " + std::to_string(nsid) + ": " + usable.error().message;
      return false;
    }
    if (!*usable) continue;  // not a usable format: skip the namespace
    nsids_.push_back(nsid);
    namespaces_[nsid] = std::move(ns);
  }
  return true;
}

Result<bool> Controller::identify_namespace(uint32_t nsid, Namespace* ns) {
  ns->id = nsid;
  sn::SubmissionEntry id{};
  id.opcode = sn::admin::kIdentify;
  id.nsid = nsid;
  id.cdw10 = sn::cns::kNamespace;
  auto r = admin_sync(id, &ns->data, sizeof ns->data);
  if (!r) return r.error();
  const sn::LbaFormat& f = ns->data.lbaf[ns->data.flbas & 0xf];
  if (f.lbads < 9 || f.lbads > 16 || ns->data.nsze == 0) return false;
  ns->block_size = 1u << f.lbads;
  ns->num_blocks = ns->data.nsze;
  ns->max_io_blocks = qctx_.max_transfer ? qctx_.max_transfer / ns->block_size : 0;
  return true;
}

Result<std::vector<uint32_t>> Controller::refresh_namespaces() {
  // The log page first: reading it (RAE clear) lets the controller report the next change.
  std::array<uint32_t, 1024> changed{};
  sn::SubmissionEntry log{};
  log.opcode = sn::admin::kGetLogPage;
  log.nsid = 0xffffffff;
  log.cdw10 = sn::log::kChangedNamespaceList | ((sizeof changed / 4 - 1) << 16);
  if (auto r = admin_sync(log, changed.data(), sizeof changed); !r) {
    return make_error(EIO, "changed namespace list: " + r.error().message);
  }
  std::array<uint32_t, 1024> list{};
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kIdentify;
  cmd.cdw10 = sn::cns::kActiveNamespaceList;
  if (auto r = admin_sync(cmd, list.data(), sizeof list); !r) {
    return make_error(EIO, "active namespace list: " + r.error().message);
  }
  std::vector<uint32_t> active;
  std::map<uint32_t, std::unique_ptr<Namespace>> next;
  for (uint32_t nsid : list) {
    if (nsid == 0) break;
    auto ns = std::make_unique<Namespace>();
    auto usable = identify_namespace(nsid, ns.get());
    if (!usable) {
      return make_error(EIO, "identify namespace " + std::to_string(nsid) + ": " +
                                 usable.error().message);
    }
    if (!*usable) continue;
    auto old = namespaces_.find(nsid);
    if (old != namespaces_.end() && old->second->block_size == ns->block_size &&
        old->second->num_blocks == ns->num_blocks &&
        std::memcmp(old->second->data.nguid, ns->data.nguid, sizeof ns->data.nguid) == 0) {
      next[nsid] = std::move(old->second);  // the same namespace: its pointer stays
    } else {
      next[nsid] = std::move(ns);
    }
    active.push_back(nsid);
  }
  for (auto& [nsid, ns] : namespaces_)
    if (ns) retired_.push_back(std::move(ns));
  namespaces_ = std::move(next);
  nsids_ = active;
  return active;
}

const Namespace* Controller::ns(uint32_t nsid) const {
  auto it = namespaces_.find(nsid);
  return it == namespaces_.end() ? nullptr : it->second.get();
}

int Controller::admin_submit(const sn::SubmissionEntry& cmd, void* buf, uint32_t len,
                             CompletionFn cb, void* ctx) {
  std::lock_guard lock(admin_mu_);
  if (state_ == InitState::kFailed || admin_stuck_.load(std::memory_order_acquire)) return -EIO;
  return admin_->submit_raw(cmd, buf, len, cb, ctx);
}

// The device is wanted back but still works: disable it (CC.EN = 0 until CSTS.RDY = 0: the
// controller has stopped every command, so it no longer reads or writes their buffers), then
// let the removal proceed. Without this, ending the commands it holds would hand their buffers
// back to the application while the device may still write them to the media (a HIL test saw
// a later write's data land at an earlier write's LBA).
void Controller::quiesce_for_removal() {
  stop_if_enabled();
  transport_->finish_removal();
}

// CC.EN (and SHN) cleared, then CSTS.RDY = 0 awaited: stopped, gone, or out of time.
void Controller::stop_if_enabled() {
  const uint32_t cc = reg32(sn::reg::kCc);
  if (cc == ~0u || !(cc & sn::cc::kEn)) return;
  set_reg32(sn::reg::kCc, cc & ~(sn::cc::kEn | 3u << 14));
  arm_cap_timeout();
  (void)wait_csts(sn::csts::kRdy, 0);
}

void Controller::arm_cap_timeout() {
  deadline_ = clock_.now() + clock_.us_to_ticks(sn::cap::to(cap_) * 500'000 + 500'000);
}

int Controller::process_admin_completions() {
  // The control path looks for removal; an orderly one (the device still works) is quiesced.
  if (!transport_->probe_gone() && transport_->removal_requested()) quiesce_for_removal();
  if (transport_->gone()) {
    std::lock_guard lock(admin_mu_);
    if (!admin_removal_handled_) {
      admin_removal_handled_ = true;
      // The admin queue pair sees the removal too and ends everything it holds, once.
      (void)admin_->process_completions();
      stats_.admin_failed_on_removal += admin_->stats().failed_on_removal;
    }
    return -ENODEV;
  }
  // An asynchronous reset owns the admin queue until it ends (reset_poll()).
  if (reset_active_.load(std::memory_order_acquire)) return 0;
  if (recovery_.load(std::memory_order_acquire) == kRecoveryRequested) [[unlikely]] {
    if (const int rc = poll_recovery(); rc < 0) return rc;
  }
  std::lock_guard lock(admin_mu_);
  if (reset_run_) return 0;
  send_aborts();
  keep_alive();
  const int rc = admin_->process_completions();
  send_aborts();  // slots the completions freed
  return rc;
}

// Queued Aborts go out while the controller's limit (ACL) allows; the rest wait in the queue.
void Controller::send_aborts() {
  for (AbortSlot& slot : abort_slots_) {
    if (slot.busy) continue;
    uint32_t req;
    if (!abort_requests_.try_pop(req)) return;
    sn::SubmissionEntry cmd{};
    cmd.opcode = sn::admin::kAbort;
    cmd.cdw10 = (req & 0xffff) << 16 | req >> 16;  // CID in [31:16], SQID in [15:0]
    slot = AbortSlot{this, req, abort_epoch_, true};
    if (admin_->submit_raw(cmd, nullptr, 0, on_abort_done, &slot) == 0) {
      ++stats_.aborts_sent;
    } else {
      slot.busy = false;
      request_reset();  // no Abort possible: the command can only end by a reset
    }
  }
}

// Runs with admin_mu_ held (inside the admin queue's process_completions).
void Controller::on_abort_done(void* ctx, const sn::CompletionEntry& cpl) {
  auto* slot = static_cast<AbortSlot*>(ctx);
  Controller* self = slot->ctrl;
  slot->busy = false;
  if (slot->epoch != self->abort_epoch_) return;  // ended by a reset: that is the answer
  if (cpl_is_error(cpl)) {
    ++self->stats_.aborts_failed;
    self->request_reset();
  } else if (cpl.dw0 & 1) {
    ++self->stats_.aborts_not_aborted;  // overdue one timeout later if it never completes
  }
}

void Controller::request_abort(uint16_t sqid, uint16_t cid) {
  // No room to queue it: a controller this far behind is a case for a reset.
  if (!abort_requests_.try_push(uint32_t{sqid} << 16 | cid)) request_reset();
}

Result<sn::CompletionEntry> Controller::admin_sync(const sn::SubmissionEntry& cmd, void* data,
                                                   uint32_t len) {
  if (len > kScratchBytes) return make_error(E2BIG, "admin data larger than the scratch area");
  struct Wait {
    bool done = false;
    sn::CompletionEntry cpl{};
  } wait;
  std::lock_guard lock(admin_mu_);  // one synchronous command at a time: the scratch is shared
  if (state_ == InitState::kFailed) return make_error(EIO, "controller failed");
  if (reset_run_) return make_error(EBUSY, "the controller is being reset");
  if (admin_stuck_.load(std::memory_order_acquire))
    return make_error(EIO, "admin queue stopped: the controller needs a reset");
  // Fabrics: an admin queue whose Connect failed is paused until a reset connects it again;
  // a command on it would never go out, only wait out the admin timeout.
  if (admin_->resetting())
    return make_error(ENOTCONN, "admin queue not connected: the controller needs a reset");
  void* buf = len ? scratch_->data() : nullptr;
  if (len && to_device(cmd.opcode)) std::memcpy(buf, data, len);
  const int rc = admin_->submit_raw(
      cmd, buf, len,
      [](void* ctx, const sn::CompletionEntry& cpl) {
        auto* w = static_cast<Wait*>(ctx);
        w->cpl = cpl;
        w->done = true;
      },
      &wait);
  if (rc != 0) return make_error(rc, "admin submit failed");
  const uint64_t deadline = clock_.now() + clock_.us_to_ticks(options_.admin_timeout_us);
  const uint64_t check_period = clock_.us_to_ticks(options_.admin_health_check_us);
  uint64_t next_check = clock_.now() + check_period;
  while (!wait.done) {
    if (admin_->process_completions() < 0) return make_error(ENODEV, "device gone");
    // Fabrics: a broken connection is a flag in memory, not a register read: seen at once
    // rather than at the next health check (a reset's reconnect waits on it).
    if (!wait.done && transport_->fabrics() && admin_->transport().broken()) {
      admin_->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
      admin_stuck_.store(true, std::memory_order_release);
      return make_error(ECONNRESET, "the admin connection broke under a command");
    }
    if (!wait.done && options_.wait_hook) options_.wait_hook();
    if (!wait.done && clock_.now() > next_check) {
      // A controller that lost power, dropped RDY or reports fatal status has stopped
      // processing commands (and DMA): this one will never complete, so don't wait out the
      // timeout; whoever called us resets it.
      next_check = clock_.now() + check_period;
      // Fabrics: CSTS is itself an admin command away; the connection is what can fail here.
      const uint32_t csts = transport_->fabrics()
                                ? (admin_->transport().broken() ? ~0u : sn::csts::kRdy)
                                : transport_->read32(sn::reg::kCsts);
      if (csts == ~0u || (csts & sn::csts::kCfs) || !(csts & sn::csts::kRdy)) {
        admin_->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
        admin_stuck_.store(true, std::memory_order_release);
        if (transport_->fabrics()) {
          return make_error(ECONNRESET, "the admin connection broke under a command");
        }
        return make_error(csts == ~0u ? ENODEV : EIO,
                          "controller stopped (CSTS 0x" + hex32(csts) +
                              ") while an admin command was outstanding");
      }
    }
    if (!wait.done && clock_.now() > deadline) {
      // The device still owns the command (its CID, maybe a DMA into the scratch area): the
      // controller cannot be trusted any more. Fail every admin request and refuse further
      // admin use until it is reset (the reset's disable takes the command back).
      admin_->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
      admin_stuck_.store(true, std::memory_order_release);
      return make_error(ETIMEDOUT, "admin command timed out: the controller needs a reset");
    }
  }
  if (cpl_is_error(wait.cpl))
    return make_error(EIO, describe(Status::from_cqe(wait.cpl.status)));
  if (len && from_device(cmd.opcode)) std::memcpy(data, buf, len);
  return wait.cpl;
}

int Controller::abort(uint16_t sqid, uint16_t cid) {
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kAbort;
  cmd.cdw10 = uint32_t{cid} << 16 | sqid;
  ++stats_.aborts_sent;
  return admin_submit(cmd, nullptr, 0, nullptr, nullptr);
}

void Controller::set_async_event_callback(AsyncEventFn fn, void* ctx) {
  aer_fn_ = fn;
  aer_ctx_ = ctx;
}

void Controller::arm_async_event() {
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kAsyncEventRequest;
  admin_->submit_raw(cmd, nullptr, 0, on_async_event, this);
}

// Runs with admin_mu_ held (inside process_completions), so it may use admin_ directly.
void Controller::on_async_event(void* ctx, const sn::CompletionEntry& cpl) {
  auto* self = static_cast<Controller*>(ctx);
  if (cpl_is_error(cpl)) return;  // aborted (reset, shutdown) or refused: don't re-arm
  ++self->stats_.async_events;
  if (self->aer_fn_) self->aer_fn_(self->aer_ctx_, cpl);
  self->arm_async_event();
}

void Controller::on_io_timeout(void* ctx, Qpair& qp, uint16_t cid) {
  auto* hook = static_cast<TimeoutHook*>(ctx);
  Controller* self = hook->ctrl;
  ++self->stats_.io_timeouts;
  if (hook->user_cb) hook->user_cb(hook->user_ctx, qp, cid);
  switch (self->timeout_action()) {
    case TimeoutAction::kNone:
      break;
    case TimeoutAction::kAbort:
      self->request_abort(qp.id(), cid);  // no admin lock on the I/O thread
      break;
    case TimeoutAction::kReset:
      self->request_reset();  // never inline: the admin poll acts on it
      break;
  }
}

// A command that timed out is still outstanding one timeout later: the Abort (or a reset) did
// not end it. Only a reset takes it back from the device.
void Controller::on_io_overdue(void* ctx, Qpair&, uint16_t) {
  Controller* self = static_cast<TimeoutHook*>(ctx)->ctrl;
  ++self->stats_.io_overdue;
  if (self->timeout_action() != TimeoutAction::kNone) self->request_reset();
}

void Controller::request_reset() {
  uint8_t expected = kRecoveryIdle;
  // Only the first timeout of a stall asks; later ones find the request already pending.
  if (recovery_.compare_exchange_strong(expected, kRecoveryRequested, std::memory_order_acq_rel))
    ++stats_.reset_requests;
}

int Controller::poll_recovery() {
  if (recovery_.load(std::memory_order_acquire) != kRecoveryRequested) return 0;
  if (options_.on_reset_request) {
    uint8_t expected = kRecoveryRequested;
    if (recovery_.compare_exchange_strong(expected, kRecoveryNotified, std::memory_order_acq_rel))
      options_.on_reset_request();  // the owner quiesces its I/O threads, then calls reset()
    return 0;
  }
  return reset();  // same thread as the I/O queue pairs (the documented contract)
}

Result<std::unique_ptr<Qpair>> Controller::alloc_io_qpair(const QpairOptions& options) {
  return new_io_qpair(options, /*connect=*/true);
}

Result<std::unique_ptr<Qpair>> Controller::new_io_qpair(const QpairOptions& options, bool connect) {
  // During an asynchronous reset a queue pair may be created unconnected: the reset (or its
  // owner, afterwards) connects it.
  if (state_ != InitState::kReady && (connect || !reset_in_progress()))
    return make_error(ENODEV, "controller not ready");
  QpairOptions o = options;
  o.queue_size = std::min(o.queue_size, max_queue_entries());
  uint16_t qid = 0;
  {
    std::lock_guard lock(admin_mu_);
    for (uint32_t i = 1; i < qid_used_.size(); ++i) {
      if (!qid_used_[i]) {
        qid = static_cast<uint16_t>(i);
        qid_used_[i] = true;
        break;
      }
    }
  }
  if (qid == 0) return make_error(EBUSY, "all granted I/O queues are in use");
  auto release_qid = [this, qid] {
    std::lock_guard lock(admin_mu_);
    qid_used_[qid] = false;
  };
  std::unique_ptr<TimeoutHook> hook;
  if (o.timeout_us) {
    hook = std::make_unique<TimeoutHook>(TimeoutHook{this, o.timeout_cb, o.timeout_ctx});
    o.timeout_cb = on_io_timeout;
    o.overdue_cb = on_io_overdue;
    o.timeout_ctx = hook.get();
  }
  auto qp = make_queue(qid, o, connect);
  if (!qp) {
    release_qid();
    return qp.error();
  }
  if (!connect) {
    (*qp)->pause();  // nothing goes out until a reset connects it (recreate_io_queues)
  } else if (std::string e = start_io_queue(**qp); !e.empty()) {
    release_qid();
    return make_error(EIO, e);
  }
  std::lock_guard lock(admin_mu_);
  if (hook) timeout_hooks_[qid] = std::move(hook);
  io_qpairs_.push_back(qp->get());
  return std::move(qp).value();
}

int Controller::free_io_qpair(std::unique_ptr<Qpair> qp) {
  if (!qp) return -EINVAL;
  const uint16_t qid = qp->id();
  int rc = 0;
  // Its connect state outlives what the queue pair ends below (a Connect in flight).
  std::unique_ptr<QueueConnect> connect_state;
  {
    // Not connected by anyone any more (an asynchronous reset, its owner).
    std::lock_guard lock(admin_mu_);
    io_connects_.erase(qp.get());
    std::erase(io_qpairs_, qp.get());
    if (reset_run_) drop_from_reset(qp.get());
    if (auto it = connect_states_.find(qp.get()); it != connect_states_.end()) {
      connect_state = std::move(it->second);
      connect_states_.erase(it);
    }
  }
  // Nothing is reaped or placed any more: waiting requests must not go into a queue that is
  // being deleted. What the queue held, and what waited for room in it, ends after it is gone.
  qp->pause();
  if (!transport_->gone()) {
    const AdminCommand admin = [this](const sn::SubmissionEntry& c) { return admin_sync(c); };
    if (!transport_->stop_io_queue(qp->transport(), admin).empty()) rc = -EIO;
  }
  qp->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion));
  std::lock_guard lock(admin_mu_);
  qid_used_[qid] = false;
  timeout_hooks_.erase(qid);
  return rc;
}

}  // namespace pollux::nvme
