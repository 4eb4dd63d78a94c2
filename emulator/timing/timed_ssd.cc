// Verilator's headers must precede <systemc>.
#include "emulator/rtl/rtl_queue_engine.h"
// (keep the order above)
#include "emulator/timing/timed_ssd.h"

#include <algorithm>
#include <functional>

#include "emulator/rtl/queue_engine_ref.h"

namespace pollux::emu::timing {

namespace sp = ::pollux::spec::nvme;

TimedSsd::TimedSsd(sc_core::sc_module_name n, const Profile& p, nvme::Controller& controller,
                   std::mt19937_64& rng, Trace& trace, uint32_t device_index,
                   std::function<void()> on_host_visible)
    : sc_module(n),
      profile_(p),
      ctrl_(controller),
      trace_(trace),
      index_(device_index),
      on_host_visible_(std::move(on_host_visible)) {
  link_ = std::make_unique<PcieLinkModule>("pcie", p.pcie);
  cache_ = std::make_unique<WriteCacheModule>("write_cache", p.cache.bytes);
  FirmwareProfile fw = p.firmware;
  if (fw.jitter > 0) fw.seed = rng();  // only then: other profiles keep their random sequence
  processor_ = std::make_unique<CommandProcessor>("command_processor", fw, 9, 4096);
  processor_->set_capacity_bytes(p.controller.namespaces.at(0).size_bytes);
  processor_->set_cache_protected(p.cache.power_loss_protection);
  processor_->link(*link_);
  datapath_ = std::make_unique<DataPathModule>("datapath", p.datapath);
  processor_->datapath(*datapath_);
  processor_->cache(*cache_);
  switch (p.media) {
    case MediaKind::kNand: {
      // The read model's random draws (die factors, jitter, retries) follow the profile's
      // seed and the simulation's.
      NandTiming t = p.nand_timing;
      t.seed = p.ftl.seed * 0x9e3779b97f4a7c15ull ^ rng();
      nand_ = std::make_unique<NandArrayModule>("nand_array", p.nand_geometry, t);
      FtlConfig fc = p.ftl;
      fc.logical_bytes = p.controller.namespaces.at(0).size_bytes;
      ftl_ = std::make_unique<FtlModule>("ftl", fc, *nand_);
      processor_->media(*ftl_);
      break;
    }
    case MediaKind::kOptane:
      media_rng_.seed(rng());
      media_ = std::make_unique<MediaModule>("optane",
                                             std::make_unique<OptaneMedia>(p.optane, media_rng_));
      processor_->media(*media_);
      break;
    case MediaKind::kNone:
      media_ = std::make_unique<MediaModule>("null_media", std::make_unique<NullMedia>());
      processor_->media(*media_);
      break;
  }
  std::unique_ptr<rtl::QueueEngine> engine;
  if (p.fidelity == Fidelity::kRtl) {
    engine = std::make_unique<rtl::RtlQueueEngine>();
  } else {
    engine = std::make_unique<rtl::RefQueueEngine>();
  }
  engine_ = std::make_unique<QueueEngineModule>("queue_engine", std::move(engine),
                                                p.frontend_clock_mhz,
                                                static_cast<FrontEndClient&>(*this));

  slots_.resize(p.max_outstanding);
  free_.reserve(p.max_outstanding);
  for (uint32_t i = p.max_outstanding; i-- > 0;) free_.push_back(i);
  due_.reserve(p.max_outstanding);
  queues_ = std::min<uint32_t>(ctrl_.queue_slots(), rtl::kQueues);
  sq_shadow_.assign(queues_, {});
  cq_shadow_.assign(queues_, {});
  sq_db_.assign(queues_, 0);
  cq_db_.assign(queues_, 0);
  sq_epoch_.assign(queues_, 0);
  resets_ = ctrl_.counters().resets;
  volatile_cache_ = p.cache.bytes != 0 && !p.cache.power_loss_protection;
  ctrl_.set_write_journal(volatile_cache_);
  cache_->core().set_track_releases(volatile_cache_);
  ctrl_.set_cqe_observer(
      [this](uint16_t cqid, uint32_t slot, bool phase) { on_cqe_written(cqid, slot, phase); });

  SC_METHOD(complete_due);
  sensitive << due_event_;
  dont_initialize();
}

TimedSsd::~TimedSsd() { ctrl_.set_cqe_observer(nullptr); }

// Controller reset (CC.EN 1 -> 0, NSSR, a spontaneous disable, a power cut): what was in
// flight is gone, as in hardware. Checked wherever the device is about to act.
void TimedSsd::check_reset() {
  if (ctrl_.counters().resets == resets_) return;
  resets_ = ctrl_.counters().resets;
  ++epoch_;
  dropped_ += slots_.size() - free_.size();
  free_.clear();
  for (uint32_t i = static_cast<uint32_t>(slots_.size()); i-- > 0;) free_.push_back(i);
  due_.clear();
  pending_.clear();
  engine_->drop_pending();
  rtl::QueueEngineInputs r;
  r.reset = true;
  engine_->configure(r);
  std::fill(sq_shadow_.begin(), sq_shadow_.end(), nvme::Controller::QueueState{});
  std::fill(cq_shadow_.begin(), cq_shadow_.end(), nvme::Controller::QueueState{});
  std::fill(sq_db_.begin(), sq_db_.end(), 0);
  std::fill(cq_db_.begin(), cq_db_.end(), 0);
  arb_shadow_ = ~0u;
  generation_ = ~0ull;
  live_sqs_.clear();
  live_cqs_.clear();
}

void TimedSsd::delay_next_ready(SimTime delay) {
  ready_delay_ = delay;
  ready_release_at_ = 0;
  ctrl_.hold_ready(delay > 0);
}

// The host did not touch the device since the last scan: no doorbell, no reset, no queue
// created or deleted, nothing for the controller's service() (which this then did).
bool TimedSsd::untouched() {
  if (ready_delay_ > 0 || ctrl_.counters().resets != resets_ ||
      ctrl_.queue_generation() != generation_) {
    return false;
  }
  const volatile uint32_t* db = ctrl_.doorbells();
  for (uint16_t q : live_sqs_) {
    if (__atomic_load_n(&db[ctrl_.sq_doorbell(q)], __ATOMIC_ACQUIRE) != sq_db_[q]) return false;
  }
  return ctrl_.service_if_quiet();
}

void TimedSsd::scan(ClockFn clock, void* ctx) {
  if (untouched()) return;
  SimTime now = sc_now();
  if (ready_delay_ > 0) {
    if (ready_release_at_ == 0 && ctrl_.enabling()) ready_release_at_ = now + ready_delay_;
    if (ready_release_at_ != 0 && now >= ready_release_at_) {
      ctrl_.hold_ready(false);
      ready_delay_ = 0;
    }
  }
  ctrl_.service();
  check_reset();
  if (ctrl_.queue_generation() != generation_) sync_configuration();
  const volatile uint32_t* db = ctrl_.doorbells();
  for (uint16_t q : live_sqs_) {
    const uint32_t v = __atomic_load_n(&db[ctrl_.sq_doorbell(q)], __ATOMIC_ACQUIRE);
    if (v != sq_db_[q]) {
      if (clock) now = std::max(now, clock(ctx));
      sq_db_[q] = v;
      trace_.record(now, index_, TraceKind::kDoorbell, q, 0, v);
      engine_->doorbell(link_->mmio_write(now), false, static_cast<uint8_t>(q),
                        static_cast<uint16_t>(v));
    }
  }
  for (uint16_t q : live_cqs_) {
    // The head the controller accepted in service() above, not the doorbell read again: a
    // host writing concurrently (realtime) must not give the engine more CQ room than the
    // controller has, or the engine grants a fetch the controller refuses (kCqFull) and the
    // command is lost. (Invalid heads, which the controller ignores, stay away too.)
    const uint32_t v = ctrl_.cq_state(q).head;
    if (v != cq_db_[q]) {
      if (clock) now = std::max(now, clock(ctx));
      cq_db_[q] = v;
      trace_.record(now, index_, TraceKind::kDoorbell, q, 1, v);
      engine_->doorbell(link_->mmio_write(now), true, static_cast<uint8_t>(q),
                        static_cast<uint16_t>(v));
    }
  }
}

// Tell the engine about queues created or deleted and arbitration settings, in an order the
// engine accepts: SQs go before the CQs they use, CQs come before the SQs bound to them.
void TimedSsd::sync_configuration() {
  generation_ = ctrl_.queue_generation();
  std::vector<nvme::Controller::QueueState> sq(queues_), cq(queues_);
  for (uint16_t q = 0; q < queues_; ++q) {
    sq[q] = ctrl_.sq_state(q);
    cq[q] = ctrl_.cq_state(q);
  }
  auto same = [](const nvme::Controller::QueueState& a, const nvme::Controller::QueueState& b) {
    return a.exists == b.exists && a.size == b.size && a.cqid == b.cqid && a.prio == b.prio;
  };
  auto send = [&](bool is_cq, uint16_t q, const nvme::Controller::QueueState& s) {
    rtl::QueueEngineInputs in;
    in.cfg_valid = true;
    in.cfg_cq = is_cq;
    in.cfg_qid = static_cast<uint8_t>(q);
    in.cfg_enable = s.exists;
    in.cfg_size = static_cast<uint16_t>(s.exists ? s.size - 1 : 1);
    in.cfg_cqid = static_cast<uint8_t>(s.cqid);
    in.cfg_prio = static_cast<rtl::Prio>(s.prio & 3);
    engine_->configure(in);
  };
  for (uint16_t q = 0; q < queues_; ++q) {
    if (sq_shadow_[q].exists && !same(sq_shadow_[q], sq[q])) {
      send(false, q, nvme::Controller::QueueState{});
      sq_shadow_[q] = {};
      ++sq_epoch_[q];  // its commands in flight are gone with it
    }
  }
  for (uint16_t q = 0; q < queues_; ++q) {
    if (cq_shadow_[q].exists && !same(cq_shadow_[q], cq[q])) {
      send(true, q, nvme::Controller::QueueState{});
      cq_shadow_[q] = {};
    }
  }
  for (uint16_t q = 0; q < queues_; ++q) {
    if (cq[q].exists && !cq_shadow_[q].exists) {
      send(true, q, cq[q]);
      cq_shadow_[q] = cq[q];
      cq_db_[q] = 0;
    }
  }
  for (uint16_t q = 0; q < queues_; ++q) {
    if (sq[q].exists && !sq_shadow_[q].exists) {
      send(false, q, sq[q]);
      sq_shadow_[q] = sq[q];
      sq_db_[q] = 0;
    }
  }
  live_sqs_.clear();
  live_cqs_.clear();
  for (uint16_t q = 0; q < queues_; ++q) {
    if (sq_shadow_[q].exists) live_sqs_.push_back(q);
    if (cq_shadow_[q].exists) live_cqs_.push_back(q);
  }
  const uint32_t arb = ctrl_.arbitration_feature();
  const bool wrr = ctrl_.weighted_round_robin_enabled();
  if (arb != arb_shadow_ || wrr != wrr_shadow_) {
    arb_shadow_ = arb;
    wrr_shadow_ = wrr;
    rtl::QueueEngineInputs in;
    in.arb_valid = true;
    in.arb_wrr = wrr;
    in.arb_burst = arb & 7;
    in.arb_lpw = static_cast<uint8_t>(arb >> 8);
    in.arb_mpw = static_cast<uint8_t>(arb >> 16);
    in.arb_hpw = static_cast<uint8_t>(arb >> 24);
    engine_->configure(in);
  }
}

void TimedSsd::on_fetch_grant(uint8_t sqid, uint16_t slot) {
  const SimTime now = sc_now();
  if (ctrl_.sq_state(sqid).head != slot) ++mismatches_;
  sp::SubmissionEntry sqe;
  switch (ctrl_.fetch(sqid, &sqe)) {
    case nvme::Controller::Fetch::kFetched: break;
    case nvme::Controller::Fetch::kAborted: ++commands_; return;  // its CQE is queued already
    default:
      if (!ctrl_.stopped()) ++mismatches_;  // a failed or removed controller fetches nothing
      return;
  }
  ++commands_;
  const uint32_t i = free_.back();
  free_.pop_back();
  slots_[i] = InFlight{sqid, epoch_, sq_epoch_[sqid], sqe, {}};
  trace_.record(now, index_, TraceKind::kFetch, sqid, sqe.cid, sqe.opcode);
  const uint32_t lba = ctrl_.lba_size(sqe.nsid);
  processor_->set_lba_shift(lba ? static_cast<uint32_t>(__builtin_ctz(lba)) : 9);
  processor_->set_page_size(ctrl_.memory_page_size());
  const SimTime fetched = link_->dma_read(now, sizeof(sp::SubmissionEntry));
  schedule(i, processor_->process(sqid, sqe, fetched));
  if (volatile_cache_ && sqid != 0 && sqe.opcode == sp::nvm::kWrite) {
    slots_[i].cache_end = cache_->core().admitted();
  }
}

void TimedSsd::schedule(uint32_t slot, SimTime at) {
  const SimTime now = sc_now();
  at = std::max(at, now);
  due_.push_back(Due{at, seq_++, slot, epoch_});
  std::push_heap(due_.begin(), due_.end(), std::greater<Due>());
  if (due_.front().seq == seq_ - 1) {
    if (model_clock::kernel_events) notify_at(due_event_, at);
    set_due_armed(std::min(due_armed_, at));
  }
}

void TimedSsd::complete_due() {
  set_due_armed(~SimTime{0});  // this is the notification
  engine_->hold();            // until run_ahead() below
  check_reset();  // a reset between scans: nothing due may take effect any more
  const SimTime now = sc_now();
  bool freed = false;
  while (!due_.empty() && due_.front().at <= now) {
    const Due d = due_.front();
    std::pop_heap(due_.begin(), due_.end(), std::greater<Due>());
    due_.pop_back();
    if (d.epoch != epoch_) continue;
    InFlight& f = slots_[d.slot];
    if (ctrl_.stopped()) {
      // Controller Fatal Status or removal: the device stopped; nothing more takes effect or is posted
      // (the host's reset, CC.EN 1 -> 0, clears what is left).
      free_.push_back(d.slot);
      ++dropped_;
      freed = true;
      continue;
    }
    if (f.sq_epoch != sq_epoch_[f.sqid]) {
      // Its SQ was deleted after the fetch: the command is implicitly completed (NVMe 1.4
      // Delete I/O Submission Queue) and takes no effect. Nothing is posted: the SQ has no
      // CQ any more (asking the engine to post for one would stall every later completion).
      free_.push_back(d.slot);
      freed = true;
      continue;
    }
    // The command takes effect now: data moves, state changes, the entry is produced.
    if (f.executed || ctrl_.execute(f.sqid, f.sqe, &f.cqe)) {
      if (!f.executed) {
        // Durability is tracked from execution (right after it, last_write_id() is this
        // write's), also for a write whose completion a fault delays: chaos seed 36 found a
        // delayed write that stayed "not durable" forever and a later power cut undid it.
        if (volatile_cache_ && f.sqid != 0 &&
            (f.sqe.opcode == sp::nvm::kWrite || f.sqe.opcode == sp::nvm::kWriteZeroes)) {
          if (f.cache_end) {
            durability_.push_back(Durability{ctrl_.last_write_id(), f.cache_end});
          } else {
            ctrl_.mark_durable(ctrl_.last_write_id());  // not cached (Write Zeroes)
          }
        }
        if (ctrl_.last_fault_delay_ns()) {
          // An injected delay: done, but its completion goes out later.
          f.executed = true;
          schedule(d.slot, now + ctrl_.last_fault_delay_ns() * kNs);
          continue;
        }
      }
      const uint16_t cqid = ctrl_.sq_state(f.sqid).cqid;
      pending_.push_back(Pending{d.slot, cqid, 0, false});
      engine_->request_completion(static_cast<uint8_t>(cqid), false);
    } else {
      // An AER (the controller posts it when an event occurs), or a command a fault holds
      // forever; either way its CQ slot stays promised in the engine, as in a real device.
      ctrl_.release_fetched(f.sqid);
      free_.push_back(d.slot);
      freed = true;
    }
    if (f.sqid == 0 && ctrl_.queue_generation() != generation_) sync_configuration();
  }
  if (!due_.empty()) {
    if (model_clock::kernel_events) notify_at(due_event_, due_.front().at);
    set_due_armed(std::min(due_armed_, due_.front().at));
  }
  if (freed) engine_->slot_freed();
  if (!durability_.empty()) settle_durability(false);
  engine_->run_ahead();  // the completion requested above, without an event of its own
}

// The engine answers completion requests in the order they were made.
bool TimedSsd::take_pending(uint8_t cqid, Pending* p) {
  if (pending_.empty()) {
    ++mismatches_;
    return false;
  }
  *p = pending_.front();
  pending_.pop_front();
  if (p->cqid != cqid) ++mismatches_;
  return true;
}

void TimedSsd::on_completion_slot(uint8_t cqid, uint16_t slot, bool phase) {
  Pending p;
  if (!take_pending(cqid, &p)) return;
  if (p.slot == kPosted) {
    if (p.cq_slot != slot || p.phase != phase) ++mismatches_;
    return;
  }
  InFlight& f = slots_[p.slot];
  if (ctrl_.stopped()) {  // stopped between execution and posting: the entry is never written
    free_.push_back(p.slot);
    ++dropped_;
    return;
  }
  posting_ = true;
  posted_seen_ = false;
  ctrl_.complete_fetched(f.sqid, f.cqe);
  posting_ = false;
  if (posted_seen_ && (posted_slot_ != slot || posted_phase_ != phase)) ++mismatches_;
  ++completions_;
  trace_.record(sc_now(), index_, TraceKind::kComplete, f.sqid, f.cqe.cid, f.cqe.status);
  if (on_host_visible_) on_host_visible_();
  free_.push_back(p.slot);
  engine_->slot_freed();
}

void TimedSsd::on_completion_refused(uint8_t cqid) {
  Pending p;
  if (!take_pending(cqid, &p)) return;
  if (p.slot == kPosted) return;  // the controller's entry went with its CQ
  // The CQ was deleted after the command executed: the command is implicitly completed.
  free_.push_back(p.slot);
  engine_->slot_freed();
}

void TimedSsd::on_cqe_written(uint16_t cqid, uint32_t slot, bool phase) {
  if (posting_ && !posted_seen_) {
    posted_seen_ = true;
    posted_slot_ = slot;
    posted_phase_ = phase;
    return;
  }
  if (cqid >= queues_) return;
  // Written by the controller on its own (AER, aborted at fetch: into slots their fetches
  // reserved; or a second entry for the command being posted, a duplicate a fault asked for,
  // which no fetch reserved): the engine's tail must follow before any other entry of this CQ.
  pending_.push_front(Pending{kPosted, cqid, static_cast<uint16_t>(slot), phase});
  engine_->request_completion(static_cast<uint8_t>(cqid), true, /*unreserved=*/posting_);
}

// A cached write is durable once the cache released its last unit (the media programmed it)
// at a time not after now. Releases are in admission order, so the oldest writes settle
// first; `all` looks past one that has not (a power cut must not undo a durable write).
void TimedSsd::settle_durability(bool all) {
  const SimTime now = sc_now();
  const auto& rel = cache_->core().releases();
  auto durable = [&](const Durability& d) {
    auto it = std::lower_bound(rel.begin(), rel.end(), d.cache_end,
                               [](const WriteCache::Release& r, uint64_t u) { return r.upto < u; });
    return it != rel.end() && it->at <= now;
  };
  if (!all) {
    while (!durability_.empty() && durable(durability_.front())) {
      ctrl_.mark_durable(durability_.front().write_id);
      durability_.pop_front();
    }
  } else {
    for (size_t k = durability_.size(); k > 0; --k) {
      const Durability d = durability_.front();
      durability_.pop_front();
      if (durable(d)) {
        ctrl_.mark_durable(d.write_id);
      } else {
        durability_.push_back(d);
      }
    }
  }
  if (!durability_.empty()) cache_->core().forget_releases_before(durability_.front().cache_end);
}

std::vector<uint64_t> TimedSsd::power_loss() {
  if (!durability_.empty()) settle_durability(true);
  durability_.clear();
  trace_.record(sc_now(), index_, TraceKind::kFault, 1, 0, 0);
  return ctrl_.power_loss();
}

TimedSsdStats TimedSsd::stats() const {
  TimedSsdStats s;
  s.commands = commands_;
  s.completions = completions_;
  s.in_flight = slots_.size() - free_.size();
  s.engine_cycles = engine_->cycles();
  s.engine_run_ahead = engine_->run_ahead_edges();
  s.engine_mismatches = mismatches_;
  s.dropped_by_reset = dropped_;
  s.cache_stalls = cache_->core().stalls();
  if (ftl_) {
    s.ftl = ftl_->core().stats();
    s.ftl_map_bytes = ftl_->core().map_memory_bytes();
    s.ftl_mapped_lpns = ftl_->core().mapped_lpns();
    s.nand_reads = nand_->core().reads();
    s.nand_programs = nand_->core().programs();
    s.nand_erases = nand_->core().erases();
    s.nand_register_hits = nand_->core().register_hits();
    s.nand_read_retries = nand_->core().read_retries();
    s.nand_suspends = nand_->core().suspends();
    s.read_ahead_senses = ftl_->core().read_ahead_senses();
    s.slc_programs = ftl_->core().slc().slc_programs();
    s.tlc_programs = ftl_->core().slc().tlc_programs();
    s.slc_used_bytes = ftl_->core().slc().used();
  }
  s.link_upstream_bytes = link_->core().upstream_bytes();
  s.link_downstream_bytes = link_->core().downstream_bytes();
  return s;
}

const NandArray* TimedSsd::nand() const { return nand_ ? &nand_->core() : nullptr; }

const WriteCache& TimedSsd::write_cache() const { return cache_->core(); }

}  // namespace pollux::emu::timing
