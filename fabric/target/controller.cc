// A controller's life: properties and the CC state machine, the keep-alive timer, AERs and
// notices, its I/O queues and the end of its association. The admin command set is admin.cc.
#include "fabric/target/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "fabric/target/internal.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target {

namespace {
constexpr uint32_t kMpsMin = 0, kMpsMax = 0;  // 4 KiB pages only (fabrics ignore it)
constexpr uint8_t kCapTimeout = 10;           // CAP.TO: 5 s for RDY to follow CC.EN
constexpr uint32_t kIosqes = 6, kIocqes = 4;  // 64-byte SQEs, 16-byte CQEs
}  // namespace

Controller::Controller(PollGroup& group, ControllerConfig config)
    : group_(group), cfg_(std::move(config)) {
  const auto& l = cfg_.limits;
  cap_ = sn::cap::make(static_cast<uint16_t>(l.max_queue_depth - 1), /*cqr=*/true, kCapTimeout,
                       /*dstrd=*/0, /*nssrs=*/false, static_cast<uint8_t>(sn::cap::kCssNvm),
                       kMpsMin, kMpsMax);
  vs_ = sn::make_version(1, 3);
  io_queues_ = l.max_io_qpairs_per_ctrlr;
  temp_threshold_ = 0x157;  // 343 K: the usual warning threshold
  set_kato(cfg_.kato_ms);
  if (cfg_.discovery && kato_ms_ == 0) kato_ms_ = kDiscoveryKatoMs;
}

Controller::~Controller() {
  stop_keep_alive();
}

void Controller::attach_admin(Qpair& admin) {
  admin_ = &admin;
  start_keep_alive();
}

// ---------------------------------------------------------------------- keep alive ---

void Controller::set_kato(uint32_t ms) {
  // Rounded up to the KAS granularity (100 ms units).
  const uint32_t unit = std::max<uint32_t>(1, cfg_.kas * 100u);
  kato_ms_ = ms == 0 ? 0 : (ms + unit - 1) / unit * unit;
}

void Controller::start_keep_alive() {
  stop_keep_alive();
  last_keep_alive_ = group_.thread()->clock().now();
  if (kato_ms_ == 0 || ending_) return;
  // Expiry is seen within KATO + 1% (at least 1 ms): part of what CQT promises a host.
  const uint64_t period_us = std::max<uint64_t>(1000, uint64_t{kato_ms_} * 10);
  kato_poller_ = group_.thread()->register_poller(keep_alive_poll, this, period_us, "nvmf_kato");
}

void Controller::stop_keep_alive() {
  if (kato_poller_ != nullptr) group_.thread()->unregister_poller(kato_poller_);
  kato_poller_ = nullptr;
}

event::PollStatus Controller::keep_alive_poll(void* arg) {
  auto& c = *static_cast<Controller*>(arg);
  const env::Clock& clock = c.group_.thread()->clock();
  if (clock.now() - c.last_keep_alive_ <= clock.us_to_ticks(uint64_t{c.kato_ms_} * 1000))
    return event::PollStatus::kIdle;
  fmt::print(stderr, "nvmf: controller {} of {} (host {}): keep-alive timeout ({} ms)\n",
             c.cntlid(), c.cfg_.subnqn, c.cfg_.hostnqn, c.kato_ms_);
  c.csts_ |= sn::csts::kCfs;
  c.disconnect_all("keep-alive timeout");
  return event::PollStatus::kBusy;
}

// ---------------------------------------------------------------------- properties ---

uint16_t Controller::property_get(Request& r) {
  nf::PropertyGetCommand c;
  std::memcpy(&c, &r.cmd, sizeof c);
  const uint8_t size = nf::property::size_bytes(c.attrib);
  if ((c.attrib & 7) > nf::property::kSize8) return generic(sn::sc::kInvalidField);
  uint64_t v;
  switch (c.ofst) {
    case sn::reg::kCap:
      v = size == 8 ? cap_ : cap_ & 0xffffffff;
      break;
    case sn::reg::kCap + 4:
      if (size != 4) return generic(sn::sc::kInvalidField);
      v = cap_ >> 32;
      break;
    case sn::reg::kVs:
      v = vs_;
      break;
    case sn::reg::kCc:
      v = cc_;
      break;
    case sn::reg::kCsts:
      v = csts_;
      break;
    case sn::reg::kNssr:
      v = 0;
      break;
    default:
      return generic(sn::sc::kInvalidField);
  }
  if (size == 8 && c.ofst != sn::reg::kCap) return generic(sn::sc::kInvalidField);
  r.rsp.dw0 = static_cast<uint32_t>(v);
  r.rsp.dw1 = static_cast<uint32_t>(v >> 32);
  return kSuccess;
}

uint16_t Controller::property_set(Request& r) {
  nf::PropertySetCommand c;
  std::memcpy(&c, &r.cmd, sizeof c);
  if ((c.attrib & 7) != nf::property::kSize4 || c.ofst != sn::reg::kCc)
    return generic(sn::sc::kInvalidField);  // CC is the only writable property here
  return set_cc(static_cast<uint32_t>(c.value));
}

uint16_t Controller::set_cc(uint32_t v) {
  namespace cc = sn::cc;
  const uint32_t old = cc_;
  const bool was_en = old & cc::kEn, en = v & cc::kEn;
  // What a fabrics controller supports: the NVM command set, 4 KiB pages, round robin.
  const bool fields_ok = cc::css(v) == 0 && cc::mps(v) >= kMpsMin && cc::mps(v) <= kMpsMax &&
                         cc::ams(v) == cc::kAmsRoundRobin && cc::shn(v) != 3;
  if (en && !fields_ok) return generic(sn::sc::kInvalidField);
  if (was_en && en && ((old ^ v) & 0x3ff0) != 0)
    return generic(sn::sc::kInvalidField);  // CSS/MPS/AMS are fixed while enabled
  if (v & 0xfe00000eu) return generic(sn::sc::kInvalidField);  // reserved bits
  cc_ = v;
  if (en && !was_en) {
    csts_ &= ~(3u << 2);  // SHST: normal
    if (!quiescing_)
      csts_ |= sn::csts::kRdy;
    else
      quiesce_waiters_.push_back([this] {
        if (cc_ & cc::kEn) csts_ |= sn::csts::kRdy;
      });
  } else if (!en && was_en) {
    // Controller reset: its I/O queues go (the host connects them again), held AERs end,
    // RDY drops once the queues are gone.
    std::vector<Request*> held = std::move(aers_);
    aers_.clear();
    for (Request* a : held) finish(*a, generic(sn::sc::kAbortedSqDeletion));
    events_.clear();
    ns_notice_masked_ = discovery_notice_masked_ = false;
    io_queues_set_ = false;
    io_queues_ = cfg_.limits.max_io_qpairs_per_ctrlr;
    quiesce_io([this] {
      if (!(cc_ & cc::kEn)) csts_ &= ~sn::csts::kRdy;
    });
  }
  if (cc::shn(v) != cc::shn(old)) {
    if (cc::shn(v) == cc::kShnNone) {
      csts_ &= ~(3u << 2);
    } else {
      // Shutdown: stop the I/O queues; complete when they are gone.
      csts_ = (csts_ & ~(3u << 2)) | sn::csts::kShstOccurring << 2;
      quiesce_io([this] {
        if (sn::cc::shn(cc_) != sn::cc::kShnNone)
          csts_ = (csts_ & ~(3u << 2)) | sn::csts::kShstComplete << 2;
      });
    }
  }
  return kSuccess;
}

// ---------------------------------------------------------------------- I/O queues ---

uint16_t Controller::join_io(uint16_t qid, PollGroup* group, uint64_t qpair_id, uint32_t) {
  auto bad_qid = [] {
    return status(sn::sct::kCommandSpecific, nf::sc::kConnectInvalidParameters);
  };
  if (ending_ || cfg_.discovery) return bad_qid();
  if (!(cc_ & sn::cc::kEn) || !(csts_ & sn::csts::kRdy) || quiescing_ ||
      sn::cc::shn(cc_) != sn::cc::kShnNone)
    return bad_qid();
  if (sn::cc::iosqes(cc_) != kIosqes || sn::cc::iocqes(cc_) != kIocqes) return bad_qid();
  if (qid > io_queues_ || io_qpairs_.count(qid))
    return specific(sn::sc_cmd::kInvalidQueueIdentifier);
  io_qpairs_[qid] = IoQueueRef{group, qpair_id};
  return kSuccess;
}

void Controller::io_gone(uint16_t qid, uint64_t qpair_id) {
  auto it = io_qpairs_.find(qid);
  if (it != io_qpairs_.end() && it->second.qpair_id == qpair_id) io_qpairs_.erase(it);
  check_quiesced();
  maybe_destroy();  // may delete this
}

void Controller::quiesce_io(std::function<void()> then) {
  quiescing_ = true;
  quiesce_waiters_.push_back(std::move(then));
  Target& t = group_.target();
  for (const auto& [qid, ref] : io_qpairs_) {
    t.run_on(ref.group->thread(), [g = ref.group, id = ref.qpair_id] {
      if (Qpair* q = g->qpair(id)) q->disconnect();
    });
  }
  check_quiesced();
}

void Controller::check_quiesced() {
  if (!quiescing_ || !io_qpairs_.empty()) return;
  quiescing_ = false;
  auto waiters = std::move(quiesce_waiters_);
  quiesce_waiters_.clear();
  for (auto& fn : waiters) fn();
}

// ------------------------------------------------------------- the association's end ---

void Controller::disconnect_all(const char*) {
  if (ending_) return;
  ending_ = true;
  stop_keep_alive();
  quiesce_io([] {});
  if (admin_ != nullptr) admin_->disconnect();  // its end calls admin_gone()
}

bool Controller::start_abort(Request& r) {
  const uint16_t sqid = r.cmd.cdw10 & 0xffff;
  const uint16_t cid = static_cast<uint16_t>(r.cmd.cdw10 >> 16);
  r.rsp.dw0 = 1;  // not aborted, unless the command ends aborted
  auto it = io_qpairs_.find(sqid);
  if (sqid == 0 || it == io_qpairs_.end()) return false;
  const uint64_t token = ++abort_serial_;
  pending_aborts_[token] = &r;
  const AbortReply reply{&group_, cfg_.id, token};
  group_.target().run_on(it->second.group->thread(),
                         [g = it->second.group, id = it->second.qpair_id, cid, reply] {
                           abort_command(*g, id, cid, reply);
                         });
  return true;
}

void Controller::abort_answered(uint64_t token, bool aborted) {
  auto it = pending_aborts_.find(token);
  if (it == pending_aborts_.end()) return;  // the admin queue went meanwhile
  Request& r = *it->second;
  pending_aborts_.erase(it);
  r.rsp.dw0 = aborted ? 0 : 1;
  finish(r, kSuccess);
}

void Controller::release_held(Qpair&) {
  // The last completion may end the admin queue, and with it this controller: nothing of it
  // is touched after the loop. Pending Aborts end too (not aborted, as far as they know).
  std::vector<Request*> held = std::move(aers_);
  aers_.clear();
  for (auto& [token, r] : pending_aborts_) {
    r->rsp.dw0 = 1;
    held.push_back(r);
  }
  pending_aborts_.clear();
  for (Request* a : held) finish(*a, generic(sn::sc::kAbortedSqDeletion));
}

void Controller::admin_gone() {
  admin_ = nullptr;
  admin_gone_ = true;
  if (!ending_) {
    ending_ = true;
    stop_keep_alive();
    quiesce_io([] {});
  }
  maybe_destroy();
}

void Controller::maybe_destroy() {
  if (!admin_gone_ || !io_qpairs_.empty()) return;
  group_.remove_controller(this);
  Target& t = group_.target();
  t.run_on(t.thread(), [&t, slot = cfg_.slot, cntlid = cfg_.cntlid, id = cfg_.id] {
    t.controller_gone(slot, cntlid, id);
  });
  delete this;
}

// ---------------------------------------------------------------------- events ---

void Controller::complete_aer(uint32_t dw0) {
  Request* r = aers_.front();
  aers_.erase(aers_.begin());
  r->rsp.dw0 = dw0;
  finish(*r, kSuccess);
}

void Controller::namespace_changed(uint32_t nsid) {
  if (!changed_ns_overflow_ &&
      std::find(changed_ns_.begin(), changed_ns_.end(), nsid) == changed_ns_.end()) {
    if (changed_ns_.size() == kChangedNsMax) {
      changed_ns_overflow_ = true;  // the log then says "more than 1024": FFFFFFFFh
      changed_ns_.clear();
    } else {
      changed_ns_.push_back(nsid);
    }
  }
  if (!(aec_ & (1u << 8)) || ns_notice_masked_ || ending_) return;
  ns_notice_masked_ = true;  // until the host reads the log page
  const uint32_t dw0 = sn::aer::make_dw0(sn::aer::kTypeNotice, sn::aer::kInfoNoticeNamespaceChanged,
                                         sn::log::kChangedNamespaceList);
  if (!aers_.empty()) return complete_aer(dw0);
  events_.push_back(dw0);
}

void Controller::discovery_changed() {
  if (!cfg_.discovery || !(aec_ & (1u << 31)) || discovery_notice_masked_ || ending_) return;
  discovery_notice_masked_ = true;
  const uint32_t dw0 = sn::aer::make_dw0(sn::aer::kTypeNotice, 0xf0, nf::kLogDiscovery);
  if (!aers_.empty()) return complete_aer(dw0);
  events_.push_back(dw0);
}

void Controller::log_error(const Request& r, uint16_t st) {
  if (error_log_.size() < kErrorLogEntries) error_log_.reserve(kErrorLogEntries);
  sn::ErrorLogEntry e{};
  e.error_count = ++error_count_;
  e.sqid = 0;
  e.cid = r.cmd.cid;
  e.status = st;
  e.parameter_error_location = 0xffff;
  e.nsid = r.cmd.nsid;
  e.trtype = cfg_.limits.discovery_trtype;
  if (error_log_.size() == kErrorLogEntries) error_log_.erase(error_log_.begin());
  error_log_.push_back(e);
}

}  // namespace pollux::fabric::target
