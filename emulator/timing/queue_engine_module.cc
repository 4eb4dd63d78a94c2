#include "emulator/timing/queue_engine_module.h"

#include <algorithm>

namespace pollux::emu::timing {

QueueEngineModule::QueueEngineModule(sc_core::sc_module_name n,
                                     std::unique_ptr<rtl::QueueEngine> engine,
                                     uint32_t clock_mhz, FrontEndClient& client)
    : sc_module(n),
      engine_(std::move(engine)),
      period_(kUs / clock_mhz),
      client_(client) {
  SC_METHOD(edge);
  sensitive << clock_;
  dont_initialize();
}

void QueueEngineModule::wake(SimTime at) {
  const SimTime now = sc_now();
  SimTime t = next_edge(std::max(at, now));
  // One edge per clock period: if this edge has been taken already (a completion or a freed
  // slot noticed during or after it), the next chance is one period later. A zero-delay
  // notification here would clock the engine again at the same instant.
  if (cycles_ && t <= last_edge_) t = last_edge_ + period_;
  clock_.notify(sc_ps(t - now));
}

void QueueEngineModule::configure(const rtl::QueueEngineInputs& cfg) {
  config_.push_back(cfg);
  wake(sc_now());
}

void QueueEngineModule::doorbell(SimTime at, bool cq, uint8_t qid, uint16_t value) {
  doorbells_.push_back(Doorbell{at, cq, qid, value});
  wake(at);
}

void QueueEngineModule::request_completion(uint8_t cqid, bool urgent, bool unreserved) {
  if (urgent) {
    completions_.push_front(CompletionRequest{cqid, unreserved});
  } else {
    completions_.push_back(CompletionRequest{cqid, unreserved});
  }
  wake(sc_now());
}

void QueueEngineModule::drop_pending() {
  doorbells_.clear();
  completions_.clear();
}

void QueueEngineModule::edge() {
  const SimTime now = sc_now();
  last_edge_ = now;
  rtl::QueueEngineInputs in;
  if (!config_.empty()) {
    in = config_.front();
    config_.pop_front();
  }
  // A doorbell waits while configuration is applied: it may be for a queue being created.
  if (!in.cfg_valid && !in.arb_valid && !in.reset && !doorbells_.empty() &&
      doorbells_.front().at <= now) {
    const Doorbell& d = doorbells_.front();
    in.db_valid = true;
    in.db_cq = d.cq;
    in.db_qid = d.qid;
    in.db_value = d.value;
    doorbells_.pop_front();
  }
  if (!completions_.empty()) {
    in.cpl_valid = true;
    in.cpl_cqid = completions_.front().cqid;
    in.cpl_unreserved = completions_.front().unreserved;
  }
  in.fetch_ready = client_.can_accept_command();
  const rtl::QueueEngineOutputs& out = engine_->tick(in);
  ++cycles_;
  // Completions first: a grant below may post an entry (an aborted command) that must queue
  // behind the one being written now.
  if (out.cpl_valid) {
    completions_.pop_front();
    client_.on_completion_slot(out.cpl_cqid, out.cpl_slot, out.cpl_phase);
  } else if (in.cpl_valid) {
    // Refused, and it would be refused at every later edge too (a request always follows a
    // grant's reservation; only deleting or re-creating the CQ takes one away): drop it, or
    // it would block every completion queued behind it.
    completions_.pop_front();
    client_.on_completion_refused(in.cpl_cqid);
  }
  if (out.fetch_valid) {
    ++grants_;
    client_.on_fetch_grant(out.fetch_sqid, out.fetch_slot);
  }
  busy_ = out.busy;
  // Clock again next edge only if something can happen then.
  if (!config_.empty() || !completions_.empty() || (busy_ && client_.can_accept_command()) ||
      (!doorbells_.empty() && doorbells_.front().at <= now + period_)) {
    clock_.notify(sc_ps(period_));
  } else if (!doorbells_.empty()) {
    clock_.notify(sc_ps(next_edge(doorbells_.front().at) - now));
  }
}

}  // namespace pollux::emu::timing
