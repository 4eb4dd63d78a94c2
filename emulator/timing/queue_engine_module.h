// The queue engine clocked inside SystemC: a C++ reference model (fidelity `timed`) or the
// verilated RTL (fidelity `rtl`), stepped one clock edge at a time, and only while it has
// work: an idle front end costs no host time.
#pragma once

#include "emulator/rtl/queue_engine.h"
#include "emulator/timing/event_times.h"
#include "emulator/timing/modules.h"
#include "emulator/timing/ring.h"

namespace pollux::emu::timing {

// What the engine's decisions are delivered to (the device top level).
struct FrontEndClient {
  virtual ~FrontEndClient() = default;
  virtual bool can_accept_command() const = 0;
  virtual void on_fetch_grant(uint8_t sqid, uint16_t slot) = 0;
  virtual void on_completion_slot(uint8_t cqid, uint16_t slot, bool phase) = 0;
  // The engine refused the oldest completion request: its CQ was deleted or re-created (with
  // its reservations) since the command was granted. Nothing can be posted for it.
  virtual void on_completion_refused(uint8_t cqid) = 0;
};

class QueueEngineModule final : public sc_core::sc_module {
 public:
  SC_HAS_PROCESS(QueueEngineModule);
  QueueEngineModule(sc_core::sc_module_name n, std::unique_ptr<rtl::QueueEngine> engine,
                    uint32_t clock_mhz, FrontEndClient& client);

  // Inputs, queued and fed one per kind per edge. A doorbell becomes visible at `at`.
  void configure(const rtl::QueueEngineInputs& cfg);  // cfg_*/arb_*/reset fields only
  void doorbell(SimTime at, bool cq, uint8_t qid, uint16_t value);
  // urgent: ahead of queued requests; unreserved: an entry no fetch reserved a slot for.
  void request_completion(uint8_t cqid, bool urgent, bool unreserved = false);
  // A process of the device begins: notifications wait for its end, run_ahead(), where the
  // edge a wake asked for runs at once, at its own time, if nothing else can come first (see
  // edge()), and the kernel is told of what is still wanted.
  void hold() { holding_ = true; }
  void run_ahead();
  void drop_pending();  // controller reset: forget queued doorbells and completion requests
  void wake(SimTime at);  // new work may exist
  // The clock's event (SC_METHOD; run directly by the simulation without the kernel: edge
  // time is sc_now() either way).
  void edge();
  // The command processor can take a command again: that matters only to a busy engine (one
  // with commands it could fetch), which then clocks at the next edge.
  void slot_freed() {
    if (busy_) wake(sc_now());
  }

  uint64_t cycles() const { return cycles_; }
  // Edges run ahead inside another's activation (edge()): SystemC events saved.
  uint64_t run_ahead_edges() const { return run_ahead_; }
  // When the next edge is wanted (~0: not before a wake): the event the simulation runs (with
  // kernel events: the kernel holds this notification whenever no process of the device runs).
  SimTime armed() const { return armed_; }
  // Keep armed() in `times` at `slot` from now on (the simulation's record of every kernel
  // event, whose minimum it reads without visiting each device).
  void bind_armed_slot(EventTimes* times, size_t slot) {
    times_ = times;
    slot_ = slot;
    times_->set(slot_, armed_);
  }
  uint64_t grants() const { return grants_; }
  SimTime period() const { return period_; }

 private:
  struct Doorbell {
    SimTime at;
    bool cq;
    uint8_t qid;
    uint16_t value;
  };
  static constexpr SimTime kNever = ~SimTime{0};
  SimTime clock_edge(SimTime now);
  void run_edges(SimTime first);
  void arm(SimTime t);
  void tell();
  void release();
  bool nothing_else_until(SimTime t);
  SimTime next_edge(SimTime t) const { return (t + period_ - 1) / period_ * period_; }

  std::unique_ptr<rtl::QueueEngine> engine_;
  SimTime period_;
  FrontEndClient& client_;
  sc_core::sc_event clock_;
  Ring<rtl::QueueEngineInputs> config_;
  Ring<Doorbell> doorbells_;
  struct CompletionRequest {
    uint8_t cqid;
    bool unreserved;
  };
  Ring<CompletionRequest> completions_;
  bool busy_ = false;
  SimTime last_edge_ = 0;  // time of the last edge (valid once cycles_ > 0)
  void set_armed(SimTime t) {
    armed_ = t;
    if (times_) times_->set(slot_, t);
  }
  SimTime armed_ = kNever;  // when the next edge is wanted (written by set_armed only)
  EventTimes* times_ = nullptr;
  size_t slot_ = 0;
  SimTime told_ = kNever;   // the kernel's pending notification of clock_
  bool holding_ = false;
  uint64_t cycles_ = 0, grants_ = 0, run_ahead_ = 0;
};

}  // namespace pollux::emu::timing
