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
  arm(t);
}

// armed_ is when the next edge is wanted (in the simulation's EventTimes: with the fast-forward
// that is the event). With kernel events, the kernel is told (tell()) at once, or, while a
// process of the device holds notifications (hold()), when it ends: an edge that the process
// then runs ahead never becomes a kernel event (SystemC allocates every timed notification and
// keeps a cancelled one in its queue until its time).
void QueueEngineModule::arm(SimTime t) {
  if (t >= armed_) return;
  set_armed(t);
  if (!holding_) tell();
}

void QueueEngineModule::tell() {
  if (!model_clock::kernel_events || armed_ == told_) return;
  if (armed_ > told_) clock_.cancel();  // SystemC keeps the earlier of two notifications
  if (armed_ != kNever) notify_at(clock_, armed_);
  told_ = armed_;
}

void QueueEngineModule::release() {
  holding_ = false;
  tell();
}

// Whether no event is due up to t other than this engine's clock.
bool QueueEngineModule::nothing_else_until(SimTime t) {
  if (!model_clock::next_event_fn) tell();  // the kernel's own answer must not see a stale one
  return next_kernel_event_time() > t;
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

// One activation runs the edges nothing else can come between: the next one runs at once,
// at its own model time, while it lies before the end of the kernel's run (the host acts
// after that; a run that is to pause at a completion has ended) and the kernel has no other
// event up to it. Each edge does exactly what it would as an event of its own.
void QueueEngineModule::edge() {
  set_armed(kNever);
  told_ = kNever;  // this is the notification
  hold();
  run_edges(sc_now());
  release();
}

void QueueEngineModule::run_ahead() {
  if (armed_ != kNever && armed_ < model_clock::run_ahead_limit) {
    const SimTime at = armed_;
    set_armed(kNever);  // not an event of the kernel's after all, if nothing else comes first
    if (nothing_else_until(at)) {
      run_edges(at);
    } else {
      set_armed(at);
    }
  }
  release();
}

void QueueEngineModule::run_edges(SimTime now) {
  const SimTime floor = model_clock::floor;
  for (;;) {
    model_clock::floor = std::max(floor, now);
    const SimTime next = std::min(clock_edge(now), armed_);
    set_armed(kNever);  // a wake during the edge: decided here
    if (next == kNever) break;
    if (next >= model_clock::run_ahead_limit || !nothing_else_until(next)) {
      arm(next);
      break;
    }
    now = next;
    ++run_ahead_;
  }
  model_clock::floor = floor;
}

// One rising edge at `now`; returns when the next is wanted (kNever: not before a wake).
SimTime QueueEngineModule::clock_edge(SimTime now) {
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
    return now + period_;
  }
  if (!doorbells_.empty()) return next_edge(doorbells_.front().at);
  return kNever;
}

}  // namespace pollux::emu::timing
