// Registers, lifecycle, queues, doorbells, poll loop, completions and asynchronous events.
// Commands: admin.cc, io.cc (with PRP/SGL data transfer).
#include "emulator/nvme/controller.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "emulator/nvme/controller_internal.h"

namespace pollux::emu::nvme {

namespace {

constexpr uint32_t kCcWritableMask = 0x00fffff1;  // EN, CSS, MPS, AMS, SHN, IOSQES, IOCQES
constexpr uint32_t kMpsMax = 4;                   // memory pages of 4 KiB .. 64 KiB
constexpr uint8_t kTimeout500ms = 20;             // CAP.TO: 10 s

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

// ------------------------------------------------------------------------- creation ---

Controller::Controller(const ControllerConfig& config, DmaSpace& dma) : config_(config), dma_(dma) {
  cap_ = sp::cap::make(static_cast<uint16_t>(config_.max_queue_entries - 1), /*cqr=*/true,
                       kTimeout500ms, static_cast<uint8_t>(config_.doorbell_stride),
                       /*nssrs=*/true, static_cast<uint8_t>(sp::cap::kCssNvm), 0, kMpsMax);
  if (config_.weighted_round_robin) cap_ |= uint64_t{1} << 17;  // CAP.AMS: WRR with urgent
  internal_db_.assign(doorbell_bytes() / 4, 0);
  db_ = internal_db_.data();
  sqs_.resize(size_t{config_.max_io_queue_pairs} + 1);
  cqs_.resize(size_t{config_.max_io_queue_pairs} + 1);
  active_io_sqs_.reserve(sqs_.size());
  active_cqs_.reserve(cqs_.size());
  segments_.reserve(config_.mdts ? (size_t{1} << config_.mdts) + 2 : 256);
  admin_buf_.assign(4096, 0);
  error_log_.assign(kErrorLogEntries, sp::ErrorLogEntry{});
  vector_cd_.assign(size_t{config_.max_io_queue_pairs} + 1, 0);
  aer_cids_.reserve(kAerLimit);
  pending_events_.reserve(16);
  changed_ns_.reserve(1024);
  reset_features();
}

Controller::~Controller() = default;

Result<std::unique_ptr<Controller>> Controller::create(const ControllerConfig& config,
                                                       DmaSpace& dma) {
  if (Status s = validate(config); !s) return Error{s.error()};
  std::unique_ptr<Controller> c(new Controller(config, dma));
  for (size_t i = 0; i < config.namespaces.size(); ++i) {
    const NamespaceConfig& nc = config.namespaces[i];
    auto store = open_store(nc.backing, nc.size_bytes);
    if (!store) {
      return Error{"namespaces[" + std::to_string(i) + "].backing: " + store.error()};
    }
    auto ns = std::make_unique<Namespace>();
    ns->nsid = static_cast<uint32_t>(i + 1);
    ns->store = std::move(store).value();
    ns->size_bytes = nc.size_bytes;
    ns->shift = nc.lba_size == 4096 ? 12 : 9;
    ns->flbas = nc.lba_size == 4096 ? 1 : 0;
    ns->nsze = ns->size_bytes >> ns->shift;
    // Stable identifiers derived from the serial number and the NSID.
    uint64_t h = fnv1a(0xcbf29ce484222325ull, config.serial.data(), config.serial.size());
    h = fnv1a(h, &ns->nsid, sizeof ns->nsid);
    const uint64_t h2 = fnv1a(h, "nguid", 5);
    const uint64_t h3 = fnv1a(h, "uuid", 4);
    const uint64_t h4 = fnv1a(h3, "uuid2", 5);
    std::memcpy(ns->nguid, &h, 8);
    std::memcpy(ns->nguid + 8, &h2, 8);
    std::memcpy(ns->eui64, &h2, 8);
    std::memcpy(ns->uuid, &h3, 8);
    std::memcpy(ns->uuid + 8, &h4, 8);
    ns->uuid[6] = static_cast<uint8_t>((ns->uuid[6] & 0x0f) | 0x40);  // version 4
    ns->uuid[8] = static_cast<uint8_t>((ns->uuid[8] & 0x3f) | 0x80);  // RFC 4122 variant
    c->namespaces_.push_back(std::move(ns));
  }
  return c;
}

NamespaceStore* Controller::namespace_store(uint32_t nsid) {
  Namespace* ns = find_ns(nsid);
  return ns ? ns->store.get() : nullptr;
}

uint32_t Controller::lba_size(uint32_t nsid) const {
  if (nsid == 0 || nsid > namespaces_.size()) return 0;
  return 1u << namespaces_[nsid - 1]->shift;
}

Controller::Namespace* Controller::find_ns(uint32_t nsid) {
  if (nsid == 0 || nsid > namespaces_.size()) return nullptr;
  return namespaces_[nsid - 1].get();
}

size_t Controller::bar0_size() const {
  size_t need = 0x1000 + doorbell_bytes();
  size_t s = 0x4000;
  while (s < need) s <<= 1;
  return s;
}

// ------------------------------------------------------------------------ registers ---

uint32_t Controller::read32(uint32_t off) {
  if (off & 3) return 0;
  switch (off) {
    case sp::reg::kCap: return static_cast<uint32_t>(cap_);
    case sp::reg::kCap + 4: return static_cast<uint32_t>(cap_ >> 32);
    case sp::reg::kVs: return sp::make_version(1, 4);
    case sp::reg::kIntms:
    case sp::reg::kIntmc: return intm_;
    case sp::reg::kCc: return cc_;
    case sp::reg::kCsts: return csts_;
    case sp::reg::kNssr: return 0;
    case sp::reg::kAqa: return aqa_;
    case sp::reg::kAsq: return static_cast<uint32_t>(asq_);
    case sp::reg::kAsq + 4: return static_cast<uint32_t>(asq_ >> 32);
    case sp::reg::kAcq: return static_cast<uint32_t>(acq_);
    case sp::reg::kAcq + 4: return static_cast<uint32_t>(acq_ >> 32);
    default: return 0;  // reserved, CMB (not offered), doorbells (write-only)
  }
}

uint64_t Controller::read64(uint32_t off) {
  return uint64_t{read32(off)} | uint64_t{read32(off + 4)} << 32;
}

void Controller::write64(uint32_t off, uint64_t v) {
  write32(off, static_cast<uint32_t>(v));
  write32(off + 4, static_cast<uint32_t>(v >> 32));
}

void Controller::write32(uint32_t off, uint32_t v) {
  if (off & 3) return;
  if (off >= sp::reg::kDoorbellBase) {
    const uint32_t idx = (off - sp::reg::kDoorbellBase) / 4;
    if (size_t{idx} * 4 >= doorbell_bytes()) return;  // outside BAR0's doorbells: ignored
    if (idx & ((1u << config_.doorbell_stride) - 1)) {
      doorbell_error(sp::aer::kInfoErrorInvalidDoorbellRegister, 0xffff);
      return;
    }
    const uint32_t q = idx >> config_.doorbell_stride;
    const auto qid = static_cast<uint16_t>(q / 2);
    const bool exists = (q & 1) ? cqs_[qid].exists : sqs_[qid].exists;
    if (!ready() || !exists) {
      doorbell_error(sp::aer::kInfoErrorInvalidDoorbellRegister, qid);
      return;
    }
    db_[idx] = v;
    return;
  }
  switch (off) {
    case sp::reg::kIntms: intm_ |= v; break;
    case sp::reg::kIntmc: intm_ &= ~v; break;
    case sp::reg::kCc: write_cc(v); break;
    case sp::reg::kCsts:
      if (v & sp::csts::kNssro) csts_ &= ~sp::csts::kNssro;  // RW1C
      break;
    case sp::reg::kNssr:
      if (v == sp::reg::kNssrReset) subsystem_reset();
      break;
    case sp::reg::kAqa: aqa_ = v & 0x0fff0fff; break;
    case sp::reg::kAsq: asq_ = (asq_ & ~0xffffffffull) | (v & ~0xfffu); break;
    case sp::reg::kAsq + 4: asq_ = (asq_ & 0xffffffffull) | uint64_t{v} << 32; break;
    case sp::reg::kAcq: acq_ = (acq_ & ~0xffffffffull) | (v & ~0xfffu); break;
    case sp::reg::kAcq + 4: acq_ = (acq_ & 0xffffffffull) | uint64_t{v} << 32; break;
    default: break;  // read-only or reserved
  }
}

void Controller::write_cc(uint32_t v) {
  const uint32_t old = cc_;
  cc_ = v & kCcWritableMask;
  const bool was = old & sp::cc::kEn, now = cc_ & sp::cc::kEn;
  if (!was && now) {
    enable();
  } else if (was && !now) {
    controller_reset();
  }
  // Shutdown notification (CC.SHN): stores are flushed, SHST reports complete at once.
  const uint32_t shn = sp::cc::shn(cc_);
  if (shn != sp::cc::kShnNone && sp::cc::shn(old) == sp::cc::kShnNone) {
    for (auto& ns : namespaces_) (void)ns->store->flush();
    csts_ = (csts_ & ~(3u << 2)) | (sp::csts::kShstComplete << 2);
  } else if (shn == sp::cc::kShnNone && sp::cc::shn(old) != sp::cc::kShnNone) {
    csts_ &= ~(3u << 2);
  }
}

// CC.EN 0 -> 1. An unusable configuration (unsupported CSS, MPS or AMS, I/O queue entry sizes
// other than 64/16 bytes, admin queue sizes outside 2..MQES+1, queue bases not page aligned)
// sets CSTS.CFS and leaves RDY clear: the host sees the failure and must reset (CC.EN = 0).
void Controller::enable() {
  const uint32_t mps = sp::cc::mps(cc_);
  const uint32_t asqs = sp::aqa::asqs(aqa_) + 1, acqs = sp::aqa::acqs(aqa_) + 1;
  const uint64_t page = uint64_t{4096} << mps;
  const uint32_t iosqes = sp::cc::iosqes(cc_), iocqes = sp::cc::iocqes(cc_);
  const bool bad = sp::cc::css(cc_) != 0 || mps > kMpsMax || (sp::cc::ams(cc_) != sp::cc::kAmsRoundRobin &&
                    !(config_.weighted_round_robin &&
                      sp::cc::ams(cc_) == sp::cc::kAmsWeightedRoundRobin)) ||
                   (iosqes != 0 && iosqes != 6) || (iocqes != 0 && iocqes != 4) || asqs < 2 ||
                   acqs < 2 || asqs > config_.max_queue_entries ||
                   acqs > config_.max_queue_entries || (asq_ & (page - 1)) || (acq_ & (page - 1)) ||
                   asq_ == 0 || acq_ == 0;
  if (bad) {
    set_fatal();
    return;
  }
  page_size_ = static_cast<uint32_t>(page);
  page_shift_ = 12 + mps;
  mdts_bytes_ = config_.mdts ? uint64_t{4096} << config_.mdts : 0;
  create_cq(0, acq_, acqs, /*ien=*/true, /*iv=*/0);
  create_sq(0, asq_, asqs, 0);
  if (config_.ready_delay_polls || ready_held_) {
    ready_countdown_ = std::max<uint32_t>(config_.ready_delay_polls, 1);
  } else {
    csts_ |= sp::csts::kRdy;
  }
}

// CC.EN 1 -> 0: every queue is deleted, commands not yet completed are dropped, outstanding
// AERs vanish, features return to their defaults, doorbells read zero. Logs and SMART
// counters persist.
void Controller::controller_reset() {
  ++counters_.resets;
  quirks_.clear();
  ++queue_generation_;
  if ((csts_ & sp::csts::kRdy) && sp::csts::shst(csts_) != sp::csts::kShstComplete) {
    ++unsafe_shutdowns_;
  }
  for (auto& sq : sqs_) {
    sq.exists = false;
    sq.n_aborts = 0;
  }
  for (auto& cq : cqs_) {
    cq.exists = false;
    cq.overflow.clear();
    cq.reserved = 0;
    cq.bound_sqs = 0;
  }
  rebuild_active_lists();
  aer_cids_.clear();
  pending_events_.clear();
  masked_event_types_ = 0;
  reset_features();
  zero_doorbells();
  csts_ &= ~(sp::csts::kRdy | sp::csts::kCfs);
  ready_countdown_ = 0;
}

// NSSR = "NVMe": as a power cycle of the subsystem: controller reset, registers cleared,
// CSTS.NSSRO set.
void Controller::subsystem_reset() {
  controller_reset();
  cc_ = 0;
  aqa_ = 0;
  asq_ = acq_ = 0;
  intm_ = 0;
  csts_ = sp::csts::kNssro;
}

void Controller::reset_features() {
  features_ = Features{};
  features_.arbitration = 3;  // burst 8
  features_.temp_over = 0x157;  // 343 K (70 C) = WCTEMP
  features_.write_cache = config_.volatile_write_cache;
  nsqa_ = ncqa_ = config_.max_io_queue_pairs;
  queues_feature_set_ = false;
  std::fill(vector_cd_.begin(), vector_cd_.end(), 0);
}

void Controller::set_fatal() {
  if (!(csts_ & sp::csts::kCfs)) ++counters_.fatal_errors;
  csts_ |= sp::csts::kCfs;
}

// ------------------------------------------------------------------------- doorbells ---

bool Controller::attach_doorbells(volatile uint32_t* page, size_t bytes) {
  if (page == nullptr || bytes < doorbell_bytes()) return false;
  for (size_t i = 0; i < doorbell_bytes() / 4; ++i) page[i] = db_[i];
  db_ = page;
  return true;
}

void Controller::detach_doorbells() {
  for (size_t i = 0; i < internal_db_.size(); ++i) internal_db_[i] = db_[i];
  db_ = internal_db_.data();
}

void Controller::zero_doorbells() {
  for (size_t i = 0; i < doorbell_bytes() / 4; ++i) db_[i] = 0;
}

void Controller::doorbell_error(uint8_t info, uint16_t qid) {
  ++counters_.doorbell_errors;
  err_lba_ = 0;
  log_error(qid, 0xffff, kInvalidField, 0);
  raise_event(sp::aer::kTypeError, info, sp::log::kErrorInformation);
}

// ---------------------------------------------------------------------------- queues ---

void Controller::create_sq(uint16_t qid, uint64_t base, uint32_t size, uint16_t cqid,
                           uint8_t prio) {
  ++queue_generation_;
  Sq& sq = sqs_[qid];
  sq = Sq{};
  sq.exists = true;
  sq.qid = qid;
  sq.cqid = cqid;
  sq.prio = prio;
  sq.base = base;
  sq.size = size;
  db_[sq_db_index(qid)] = 0;
  if (qid != 0) ++cqs_[cqid].bound_sqs;
  rebuild_active_lists();
}

void Controller::create_cq(uint16_t qid, uint64_t base, uint32_t size, bool ien, uint16_t iv) {
  ++queue_generation_;
  Cq& cq = cqs_[qid];
  cq.exists = true;
  cq.qid = qid;
  cq.base = base;
  cq.size = size;
  cq.head = cq.tail = cq.last_db = 0;
  cq.phase = true;
  cq.ien = ien;
  cq.iv = iv;
  cq.irq_pending = false;
  cq.reserved = 0;
  cq.bound_sqs = 0;
  cq.ring = nullptr;
  cq.ring_gen = 0;
  cq.overflow.clear();
  db_[cq_db_index(qid)] = 0;
  rebuild_active_lists();
}

void Controller::delete_sq(uint16_t qid) {
  ++queue_generation_;
  Sq& sq = sqs_[qid];
  if (!sq.exists) return;
  if (qid != 0 && cqs_[sq.cqid].bound_sqs) --cqs_[sq.cqid].bound_sqs;
  sq.exists = false;
  sq.n_aborts = 0;
  db_[sq_db_index(qid)] = 0;
  rebuild_active_lists();
}

void Controller::delete_cq(uint16_t qid) {
  ++queue_generation_;
  Cq& cq = cqs_[qid];
  cq.exists = false;
  cq.overflow.clear();
  db_[cq_db_index(qid)] = 0;
  rebuild_active_lists();
}

void Controller::rebuild_active_lists() {
  active_io_sqs_.clear();
  active_cqs_.clear();
  for (size_t i = 1; i < sqs_.size(); ++i) {
    if (sqs_[i].exists) active_io_sqs_.push_back(static_cast<uint16_t>(i));
  }
  for (size_t i = 0; i < cqs_.size(); ++i) {
    if (cqs_[i].exists) active_cqs_.push_back(static_cast<uint16_t>(i));
  }
  if (rr_next_ >= active_io_sqs_.size()) rr_next_ = 0;
}

// One step of a delayed enable: RDY becomes 1 when the countdown ends (it stays at 1 while a
// timing model holds it: hold_ready()).
void Controller::count_down_to_ready() {
  if (ready_countdown_ > 1 || !ready_held_) --ready_countdown_;
  if (ready_countdown_ == 0) csts_ |= sp::csts::kRdy;
}

uint32_t Controller::entries_in(const Cq& cq) {
  return cq.tail >= cq.head ? cq.tail - cq.head : cq.tail + cq.size - cq.head;
}

uint32_t Controller::cq_free(const Cq& cq) const {
  const uint32_t used = entries_in(cq);
  const uint64_t taken = uint64_t{used} + cq.reserved + cq.overflow.size() + 1;
  return taken >= cq.size ? 0 : static_cast<uint32_t>(cq.size - taken);
}

void Controller::update_cq_head(Cq& cq) {
  const uint32_t v = db_[cq_db_index(cq.qid)];
  if (v != cq.last_db) {
    cq.last_db = v;
    const uint32_t used = entries_in(cq);
    const uint32_t adv = v >= cq.head ? v - cq.head : v + cq.size - cq.head;
    if (v >= cq.size || adv > used) {
      doorbell_error(sp::aer::kInfoErrorInvalidDoorbellWriteValue, cq.qid);
    } else {
      cq.head = v;
    }
  }
  if (!cq.overflow.empty()) flush_overflow(cq);
}

bool Controller::refresh_sq_tail(Sq& sq) {
  // An acquire load pairs with the host's release store of the doorbell: the SQEs it
  // covers are visible once the new tail is.
  const uint32_t v = __atomic_load_n(&db_[sq_db_index(sq.qid)], __ATOMIC_ACQUIRE);
  if (v == sq.last_db) return true;
  sq.last_db = v;
  if (v >= sq.size) {
    doorbell_error(sp::aer::kInfoErrorInvalidDoorbellWriteValue, sq.qid);
    return false;
  }
  sq.tail = v;
  return true;
}

size_t Controller::process_sq(Sq& sq, size_t budget) {
  refresh_sq_tail(sq);
  if (sq.head == sq.tail || budget == 0) return 0;
  Cq& cq = cqs_[sq.cqid];
  if (sq.ring_gen != poll_gen_) {
    sq.ring = reinterpret_cast<sp::SubmissionEntry*>(
        dma_.translate(sq.base, size_t{sq.size} * sizeof(sp::SubmissionEntry)));
    if (sq.ring == nullptr) {  // the queue's memory vanished: nothing can be completed
      ++counters_.iommu_faults;
      set_fatal();
      return 0;
    }
    sq.ring_gen = poll_gen_;
  }
  size_t n = 0;
  while (n < budget && sq.head != sq.tail) {
    if (cq_free(cq) == 0) {
      ++counters_.cq_full_stalls;
      break;
    }
    sp::SubmissionEntry sqe;
    std::memcpy(&sqe, &sq.ring[sq.head], sizeof sqe);
    sq.head = sq.head + 1 == sq.size ? 0 : sq.head + 1;
    ++n;
    ++cq.reserved;
    sp::CompletionEntry cqe;
    if (sq.n_aborts && take_abort(sq, sqe.cid)) {
      ++counters_.aborted_commands;
      cqe = sp::CompletionEntry{0, 0, 0, sq.qid, sqe.cid,
                                sp::status::make(sp::sct::kGeneric, sp::sc::kAbortedByRequest)};
      ++counters_.failed_commands;
      log_error(sq.qid, sqe.cid, cqe.status, sqe.nsid);
      post(cq, cqe, true);
      continue;
    }
    if (execute(sq.qid, sqe, &cqe)) {
      post(cq, cqe, true);
    } else {
      --cq.reserved;
    }
    if (csts_ & sp::csts::kCfs) break;
  }
  return n;
}

bool Controller::take_abort(Sq& sq, uint16_t cid) {
  for (uint32_t i = 0; i < sq.n_aborts; ++i) {
    if (sq.aborts[i] == cid) {
      sq.aborts[i] = sq.aborts[--sq.n_aborts];
      return true;
    }
  }
  return false;
}

size_t Controller::poll(size_t max_commands) {
  if (removed_) return 0;
  if (ready_countdown_) {
    count_down_to_ready();
    return 0;
  }
  if ((csts_ & (sp::csts::kRdy | sp::csts::kCfs)) != sp::csts::kRdy) return 0;
  ++poll_gen_;
  for (uint16_t cqid : active_cqs_) update_cq_head(cqs_[cqid]);
  size_t done = process_sq(sqs_[0], max_commands);
  const uint32_t ab = features_.arbitration & 7;
  const size_t burst = ab == 7 ? max_commands : size_t{1} << ab;
  bool progress = true;
  while (done < max_commands && progress && !active_io_sqs_.empty() && !fatal()) {
    progress = false;
    const size_t nsq = active_io_sqs_.size();
    for (size_t i = 0; i < nsq && done < max_commands && !fatal(); ++i) {
      Sq& sq = sqs_[active_io_sqs_[(rr_next_ + i) % nsq]];
      const size_t n = process_sq(sq, std::min(burst, max_commands - done));
      done += n;
      progress |= n != 0;
    }
    rr_next_ = (rr_next_ + 1) % nsq;
  }
  fire_interrupts();
  return done;
}

// ----------------------------------------------------------------------- completions ---

bool Controller::write_cqe(Cq& cq, const sp::CompletionEntry& cqe, bool stale_phase) {
  if (removed_) return false;  // a removed function writes nothing to host memory
  if (cq.ring_gen != poll_gen_ || cq.ring == nullptr) {
    cq.ring = reinterpret_cast<sp::CompletionEntry*>(
        dma_.translate(cq.base, size_t{cq.size} * sizeof(sp::CompletionEntry)));
    if (cq.ring == nullptr) {
      ++counters_.iommu_faults;
      set_fatal();
      return false;
    }
    cq.ring_gen = poll_gen_;
  }
  const uint32_t slot_index = cq.tail;
  const bool phase = cq.phase;
  sp::CompletionEntry* slot = &cq.ring[cq.tail];
  slot->dw0 = cqe.dw0;
  slot->dw1 = cqe.dw1;
  slot->sqhd = sqs_[cqe.sqid].exists ? static_cast<uint16_t>(sqs_[cqe.sqid].head) : 0;
  slot->sqid = cqe.sqid;
  slot->cid = cqe.cid;
  // The status word carries the phase tag: it must become visible last.
  const bool tag = stale_phase ? !cq.phase : cq.phase;
  __atomic_store_n(&slot->status, static_cast<uint16_t>((cqe.status & ~1u) | (tag ? 1 : 0)),
                   __ATOMIC_RELEASE);
  if (++cq.tail == cq.size) {
    cq.tail = 0;
    cq.phase = !cq.phase;
  }
  ++counters_.completions_posted;
  cq.irq_pending |= cq.ien;
  if (cqe_observer_) cqe_observer_(cq.qid, slot_index, phase);
  return true;
}

void Controller::post(Cq& cq, const sp::CompletionEntry& cqe, bool reserved) {
  if (reserved && cq.reserved) --cq.reserved;
  if (!cq.exists) return;
  const uint32_t used = entries_in(cq);
  if (!cq.overflow.empty() || used + 1 >= cq.size) {
    cq.overflow.push_back(cqe);  // rare: an AER or a layered post with the CQ full
    return;
  }
  if (!quirks_.empty()) {
    const uint32_t key = uint32_t{cqe.sqid} << 16 | cqe.cid;
    auto it = std::find_if(quirks_.begin(), quirks_.end(),
                           [key](const auto& q) { return q.first == key; });
    if (it != quirks_.end()) {
      const FaultAction a = it->second;
      quirks_.erase(it);
      sp::CompletionEntry c = cqe;
      if (a == FaultAction::kUnknownCid) c.cid = static_cast<uint16_t>(c.cid ^ 0x8000);
      (void)write_cqe(cq, c, a == FaultAction::kStalePhase);
      // The copy takes a slot no fetch reserved: only one that no fetched command is
      // promised (a timing model's queue engine would otherwise refuse one of theirs later).
      if (a == FaultAction::kDuplicateCompletion && cq_free(cq) > 0) (void)write_cqe(cq, c);
      return;
    }
  }
  (void)write_cqe(cq, cqe);
}

void Controller::flush_overflow(Cq& cq) {
  size_t i = 0;
  while (i < cq.overflow.size()) {
    const uint32_t used = entries_in(cq);
    if (used + 1 >= cq.size) break;
    if (!write_cqe(cq, cq.overflow[i])) break;
    ++i;
  }
  cq.overflow.erase(cq.overflow.begin(), cq.overflow.begin() + static_cast<ptrdiff_t>(i));
}

void Controller::post_completion(uint16_t sqid, const sp::CompletionEntry& cqe) {
  if (sqid >= sqs_.size() || !sqs_[sqid].exists) return;
  ++poll_gen_;  // translate the ring afresh: the DMA space may have changed since poll()
  Cq& cq = cqs_[sqs_[sqid].cqid];
  sp::CompletionEntry c = cqe;
  c.sqid = sqid;
  post(cq, c, false);
  fire_interrupts();
}

void Controller::fire_interrupts() {
  for (uint16_t cqid : active_cqs_) {
    Cq& cq = cqs_[cqid];
    if (!cq.irq_pending) continue;
    cq.irq_pending = false;
    if (irq_) irq_(cq.iv);
  }
}

// ---------------------------------------------------------------------------- execute ---

bool Controller::execute(uint16_t sqid, const sp::SubmissionEntry& sqe, sp::CompletionEntry* cqe) {
  *cqe = sp::CompletionEntry{0, 0, 0, sqid, sqe.cid, 0};
  err_lba_ = 0;
  last_fault_delay_ns_ = 0;  // admin commands too: a timing model reads it after every execute
  uint16_t st;
  if (sqid == 0) {
    ++counters_.admin_commands;
    std::optional<FaultHit> hit;
    if (!faults_.empty()) hit = faults_.match(sqe, /*admin=*/true);
    if (hit && hit->action == FaultAction::kNeverComplete) return false;
    bool defer = false;
    st = hit ? hit->status : dispatch_admin(sqid, sqe, &cqe->dw0, &defer);
    if (defer) return false;
  } else {
    bool hold = false, skip = false;
    sp::SubmissionEntry run = sqe;  // what executes: a misdirect fault moves its LBA
    st = faults_.empty() ? kOk : apply_faults(sqe, sqid, &hold, &skip, &run);
    if (hold) return false;  // never completed: the host's timeout must notice
    if (st == kOk && !skip) st = dispatch_io(run, &cqe->dw0);
    if (st == kOk && !skip && !faults_.empty() &&
        (run.opcode == sp::nvm::kWrite || run.opcode == sp::nvm::kWriteZeroes)) {
      faults_.heal(run.nsid, run.slba(), run.nlb());
    }
  }
  cqe->status = st;
  if (st != kOk) {
    ++counters_.failed_commands;
    log_error(sqid, sqe.cid, st, sqe.nsid);
  }
  return true;
}

// Command faults (faults.h): a status instead of execution, a hold, a delay, a quirk of the
// completion entry, success without execution (*skip), or execution at another LBA (*run);
// bad blocks fail reads until rewritten.
uint16_t Controller::apply_faults(const sp::SubmissionEntry& sqe, uint16_t sqid, bool* hold,
                                  bool* skip, sp::SubmissionEntry* run) {
  if (sqe.opcode == sp::nvm::kRead || sqe.opcode == sp::nvm::kCompare) {
    uint64_t first = 0;
    if (faults_.has_bad_block(sqe.nsid, sqe.slba(), sqe.nlb(), &first)) {
      err_lba_ = first;
      ++media_errors_;
      ++counters_.bad_block_reads;
      return media_err(sp::sc_media::kUnrecoveredReadError);
    }
  }
  const auto hit = faults_.match(sqe);
  if (!hit) return kOk;
  switch (hit->action) {
    case FaultAction::kStatus:
      if (sp::status::sct(hit->status) == sp::sct::kMediaError) ++media_errors_;
      // CRD is reserved unless the host enabled ACRE (Host Behavior Support) and DNR is clear.
      if (!features_.acre || sp::status::dnr(hit->status)) {
        return static_cast<uint16_t>(hit->status & ~sp::status::kCrdMask);
      }
      return hit->status;
    case FaultAction::kNeverComplete:
      *hold = true;
      return kOk;
    case FaultAction::kDelay:
      last_fault_delay_ns_ = hit->delay_ns;
      return kOk;
    case FaultAction::kDuplicateCompletion:
    case FaultAction::kUnknownCid:
    case FaultAction::kStalePhase:
      quirks_.emplace_back(uint32_t{sqid} << 16 | sqe.cid, hit->action);
      return kOk;
    case FaultAction::kDropData:
      *skip = true;
      ++counters_.silent_faults;
      return kOk;
    case FaultAction::kMisdirect: {
      const Namespace* ns = find_ns(sqe.nsid);
      const bool data = sqe.opcode == sp::nvm::kRead || sqe.opcode == sp::nvm::kWrite;
      if (!data || ns == nullptr || sqe.slba() >= ns->nsze || sqe.nlb() > ns->nsze - sqe.slba()) {
        return kOk;  // nothing to move (or a bad range the command itself refuses)
      }
      // Wrap inside the namespace: the range must stay valid, only its place is wrong.
      const uint64_t places = ns->nsze - sqe.nlb() + 1;
      const uint64_t shift = hit->shift ? hit->shift : sqe.nlb();
      const uint64_t to = (sqe.slba() + shift % places) % places;
      run->cdw10 = static_cast<uint32_t>(to);
      run->cdw11 = static_cast<uint32_t>(to >> 32);
      if (to != sqe.slba()) ++counters_.silent_faults;
      return kOk;
    }
  }
  return kOk;
}

void Controller::inject_spontaneous_disable() {
  if (!(csts_ & sp::csts::kRdy)) return;
  const uint32_t cc = cc_;
  controller_reset();  // queues, AERs, features: gone
  cc_ = cc;            // but CC.EN still reads 1: the host did not ask for this
}

// ------------------------------------------------------------------- events and logs ---

void Controller::log_error(uint16_t sqid, uint16_t cid, uint16_t status, uint32_t nsid) {
  ++error_count_;
  sp::ErrorLogEntry& e = error_log_[(error_count_ - 1) % kErrorLogEntries];
  e = sp::ErrorLogEntry{};
  e.error_count = error_count_;
  e.sqid = sqid;
  e.cid = cid;
  e.status = static_cast<uint16_t>(status & ~1u);
  e.parameter_error_location = 0xffff;
  e.lba = err_lba_;
  e.nsid = nsid;
}

void Controller::raise_event(uint8_t type, uint8_t info, uint8_t log_page) {
  for (const Event& e : pending_events_) {
    if (e.type == type && e.info == info) return;  // already pending
  }
  if (pending_events_.size() >= 16) return;
  pending_events_.push_back(Event{type, info, log_page});
  deliver_events();
}

// Completes outstanding AERs with pending events. After an event of some type is reported,
// further events of that type wait until the host reads its log page with RAE = 0.
void Controller::deliver_events() {
  if (!ready() || !cqs_[0].exists) return;
  while (!aer_cids_.empty()) {
    auto it = std::find_if(pending_events_.begin(), pending_events_.end(), [this](const Event& e) {
      return !(masked_event_types_ & (1u << e.type));
    });
    if (it == pending_events_.end()) return;
    const Event ev = *it;
    pending_events_.erase(it);
    const uint16_t cid = aer_cids_.front();
    aer_cids_.erase(aer_cids_.begin());
    masked_event_types_ |= 1u << ev.type;
    post(cqs_[0], sp::CompletionEntry{sp::aer::make_dw0(ev.type, ev.info, ev.log_page), 0, 0, 0, cid, 0},
         false);
  }
}

void Controller::notify_namespace_changed(uint32_t nsid) {
  if (std::find(changed_ns_.begin(), changed_ns_.end(), nsid) == changed_ns_.end()) {
    if (changed_ns_.size() < 1024) {
      changed_ns_.push_back(nsid);
    } else {
      changed_ns_overflow_ = true;
    }
  }
  if (features_.async_event_config & (1u << 8)) {
    raise_event(sp::aer::kTypeNotice, sp::aer::kInfoNoticeNamespaceChanged,
                sp::log::kChangedNamespaceList);
  }
}

void Controller::set_composite_temperature(uint16_t kelvin) {
  temperature_ = kelvin;
  check_temperature();
}

void Controller::check_temperature() {
  const bool crossed = temperature_ > features_.temp_over ||
                       (features_.temp_under != 0 && temperature_ < features_.temp_under);
  if (!crossed) {
    critical_warning_ &= static_cast<uint8_t>(~2u);
    return;
  }
  if (critical_warning_ & 2) return;
  critical_warning_ |= 2;
  if (features_.async_event_config & 2) {
    raise_event(sp::aer::kTypeSmart, sp::aer::kInfoSmartTemperatureThreshold,
                sp::log::kSmartHealth);
  }
}

}  // namespace pollux::emu::nvme
