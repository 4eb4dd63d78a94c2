// The CPU time software takes in virtual time: per-operation cost models, and the charge of
// the queue pairs' work (their counters read at every CPU-clock reading: what a poller did
// costs what the model says). The lockstep charges the host with them (lockstep.h); the
// fabric target charges its own core (fabric_target.h).
#pragma once

#include <cstdint>
#include <vector>

#include "driver/env/clock.h"
#include "driver/nvme/qpair.h"

namespace pollux::sim {

// Host CPU time per operation (ns). Defaults: the driver's measured hot-path costs on this
// class of machine (qpair_bench: 33-49 ns per 4 KiB I/O submit + complete; event_bench:
// 20-24 ns per reactor iteration, 10-15 ns per poller) — see docs/FIDELITY.md.
struct HostCostModel {
  uint64_t reactor_iteration_ns = 22;
  uint64_t poll_ns = 12;        // one process_completions() call on a watched qpair
  uint64_t submit_ns = 20;      // one command built and placed in the SQ
  uint64_t complete_ns = 18;    // one completion reaped and its callback run
  uint64_t doorbell_ns = 6;     // one MMIO doorbell store (posted)
  uint64_t wait_turn_ns = 100;  // one turn of a set-up path's wait loop
  uint64_t idle_jump_cap_ns = 20'000;  // longest jump to the next device event when idle
};

// An NVMe-oF target core's CPU time per operation (ns), in virtual time. command_ns is one
// I/O command's way through the target (the transport's receive, the target core and the
// bdev layer, the data transfer's and the response's work requests or PDUs); the drives'
// queue pairs (the target's NVMe driver) are charged by `drive`. Default: calibrated on the
// SPDK paper's Figure 8 (3 target cores carry 150 Gb/s of 4 KiB I/O, 4.58 M IOPS: at most
// 654 ns per I/O per core, and more than 436 ns or 2 would do) — docs/FIDELITY.md.
struct TargetCostModel {
  uint64_t reactor_iteration_ns = 22;
  uint64_t command_ns = 480;
  HostCostModel drive;
};

// The modelled CPU time of watched queue pairs' work not charged yet. The queue pairs count
// their work into one group (nvme::QpairWorkCounts, summed where it is counted), so a reading
// (one per poller run: with 8 drives the framework reads it ~10 times a step) is four loads
// however many queue pairs are watched; what was charged is kept as the same four sums.
class QpairCharges {
 public:
  explicit QpairCharges(const HostCostModel& costs) : costs_(costs) {}
  // Leaves the queue pairs still watched (they must still exist).
  ~QpairCharges();
  QpairCharges(const QpairCharges&) = delete;
  QpairCharges& operator=(const QpairCharges&) = delete;
  // On the queue pair's owner thread. Unwatch a queue pair before it is freed: its work so
  // far stays to be charged. Unwatching one this does not watch does nothing. A queue pair
  // counts into one group at a time: one model charges it (a drive's to one target core).
  void watch(nvme::Qpair* qp);
  void unwatch(nvme::Qpair* qp);
  // Since the last charge(); *work |= any command submitted or completed.
  uint64_t uncharged_ns(bool* work) const;
  // The same, and it is charged: the next reading starts from zero.
  uint64_t charge(bool* work);

 private:
  struct Counts {  // the counters the model weighs
    uint64_t polls = 0, submitted = 0, completed = 0, doorbells = 0;
    Counts& operator-=(const Counts& o) {
      polls -= o.polls, submitted -= o.submitted, completed -= o.completed, doorbells -= o.doorbells;
      return *this;
    }
  };
  Counts counts() const {
    return {work_.polls.load(), work_.submitted.load(), work_.completed.load(),
            work_.doorbells.load()};
  }
  // The modelled cost of counts, and whether any command was submitted or completed.
  uint64_t cost_of(const Counts& c) const {
    return c.polls * costs_.poll_ns + c.submitted * costs_.submit_ns +
           c.completed * costs_.complete_ns + c.doorbells * costs_.doorbell_ns;
  }
  static bool any_work(const Counts& c) { return c.submitted != 0 || c.completed != 0; }
  const HostCostModel& costs_;
  nvme::QpairWorkCounts work_;  // the watched queue pairs' (and unwatched ones' until then)
  Counts charged_;              // work_ at the last charge
  std::vector<nvme::Qpair*> watched_;
};

// The TSC in nanoseconds from a base: realtime CPU clocks on a virtual clock's scale.
class WallNs {
 public:
  void start(uint64_t base_ns);  // now is base_ns (calibrates the TSC once, ~20 ms)
  uint64_t now_ns() const;

 private:
  const env::Clock* tsc_ = nullptr;
  uint64_t tsc0_ = 0, base_ns_ = 0;
};

// An env::Clock (1 tick = 1 ns) read through a function: a framework's CPU clock.
template <class F>
class FnClock final : public env::Clock {
 public:
  explicit FnClock(F read) : read_(std::move(read)) {}
  uint64_t ticks_per_second() const override { return 1'000'000'000u; }

 private:
  uint64_t read() const override { return read_(); }
  F read_;
};

}  // namespace pollux::sim
