// A timed NVMe SSD: the functional controller (emulator/nvme) for command semantics and data,
// and SystemC models that decide when each step happens. A command's effects become visible,
// and its completion is posted, at its simulated completion time.
//
// The host reaches the device exactly as before (registers, the doorbell page, DMA through
// the vfio-user boundary); scan() is how the device notices doorbell writes: the lockstep
// loop calls it after each host step, the realtime loop continuously.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "emulator/nvme/controller.h"
#include "emulator/timing/command_processor.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/queue_engine_module.h"
#include "emulator/timing/trace.h"

namespace pollux::emu::timing {

struct TimedSsdStats {
  uint64_t commands = 0;          // fetched
  uint64_t completions = 0;       // posted through the engine
  uint64_t in_flight = 0;
  uint64_t engine_cycles = 0;
  uint64_t engine_run_ahead = 0;   // of those, edges run inside another's SystemC activation
  uint64_t engine_mismatches = 0;  // engine and functional controller disagreed (must be 0)
  uint64_t dropped_by_reset = 0;   // in flight when the controller was reset or failed (CFS)
  uint64_t cache_stalls = 0;
  FtlStats ftl;                    // NAND media only
  uint64_t ftl_map_bytes = 0;      // NAND: host memory of the FTL's maps
  uint64_t ftl_mapped_lpns = 0;    // NAND: forward-map entries held
  uint64_t nand_reads = 0, nand_programs = 0, nand_erases = 0;
  // NAND read model: reads served from a die's page register (no tR), retried senses, reads
  // that suspended a program or erase, read-ahead senses; SLC cache programs.
  uint64_t nand_register_hits = 0, nand_read_retries = 0, nand_suspends = 0;
  uint64_t read_ahead_senses = 0, slc_programs = 0, tlc_programs = 0, slc_used_bytes = 0;
  uint64_t link_upstream_bytes = 0, link_downstream_bytes = 0;
};

class TimedSsd final : public sc_core::sc_module, private FrontEndClient {
 public:
  SC_HAS_PROCESS(TimedSsd);
  TimedSsd(sc_core::sc_module_name n, const Profile& p, nvme::Controller& controller,
           std::mt19937_64& rng, Trace& trace, uint32_t device_index,
           std::function<void()> on_host_visible = {});
  ~TimedSsd() override;

  // Notice doorbell writes and queue (re)configuration at the current simulated time, or,
  // with `clock` (realtime mode), at clock() read after the doorbell was seen: a doorbell is
  // never dated before the host wrote it, so no completion can come early.
  using ClockFn = SimTime (*)(void* ctx);
  void scan(ClockFn clock = nullptr, void* ctx = nullptr);
  TimedSsdStats stats() const;
  // The NAND array (null for media without one: the null and DRAM-like profiles) and the
  // write cache, for utilisation metrics; read them on the simulation's thread.
  const NandArray* nand() const;
  const WriteCache& write_cache() const;
  // Power cut now: writes still in a volatile write cache (no power-loss protection) are
  // undone on the media, what is in flight is gone, the controller drops (RDY 0). Returns the
  // controller's ids of the writes lost, oldest first (empty with PLP or no cache).
  std::vector<uint64_t> power_loss();
  // Reset completion delay: the next time the host enables the controller (CC.EN 0 -> 1),
  // CSTS.RDY comes `delay` later than it otherwise would.
  void delay_next_ready(SimTime delay);
  const Profile& profile() const { return profile_; }
  // Runs the event of the device's due completions (due) or of its engine's clock, due now
  // (the simulation's direct dispatch: model_clock::kernel_events off).
  void run_event(bool due) {
    if (due) {
      complete_due();
    } else {
      engine_->edge();
    }
  }
  // Keep the times of the device's two events in `times` at slots `first` and
  // `first` + 1 from now on (Simulation::next_kernel_event reads their minimum).
  void bind_event_slots(EventTimes* times, size_t first) {
    times_ = times;
    slot_ = first;
    times_->set(slot_, due_armed_);
    engine_->bind_armed_slot(times, first + 1);
  }

 private:
  struct InFlight {
    uint16_t sqid;
    uint64_t epoch;
    uint64_t sq_epoch;  // sq_epoch_[sqid] at fetch
    spec::nvme::SubmissionEntry sqe;
    spec::nvme::CompletionEntry cqe;
    bool executed = false;  // effects done; its completion waits (an injected delay)
    uint64_t cache_end = 0;  // volatile cache: units admitted up to this write's last one
  };
  struct Due {
    SimTime at;
    uint64_t seq;
    uint32_t slot;
    uint64_t epoch;
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  // FrontEndClient
  bool can_accept_command() const override { return !free_.empty(); }
  void on_fetch_grant(uint8_t sqid, uint16_t slot) override;
  void on_completion_slot(uint8_t cqid, uint16_t slot, bool phase) override;
  void on_completion_refused(uint8_t cqid) override;

  struct Pending;
  bool take_pending(uint8_t cqid, Pending* p);
  void sync_configuration();
  bool untouched();
  void check_reset();
  void on_cqe_written(uint16_t cqid, uint32_t slot, bool phase);
  void complete_due();  // SC_METHOD: commands whose completion time has come
  void schedule(uint32_t slot, SimTime at);

  Profile profile_;
  nvme::Controller& ctrl_;
  Trace& trace_;
  uint32_t index_;
  std::function<void()> on_host_visible_;

  // The media's random draws (3D XPoint service times): a stream of the device's own, seeded
  // from the simulation's, so they do not depend on when other devices or the host draw
  // (simultaneous events of two devices run in an order SystemC does not fix).
  std::mt19937_64 media_rng_;
  std::unique_ptr<PcieLinkModule> link_;
  std::unique_ptr<DataPathModule> datapath_;
  std::unique_ptr<NandArrayModule> nand_;
  std::unique_ptr<FtlModule> ftl_;
  std::unique_ptr<MediaModule> media_;
  std::unique_ptr<WriteCacheModule> cache_;
  std::unique_ptr<CommandProcessor> processor_;
  std::unique_ptr<QueueEngineModule> engine_;

  void settle_durability(bool all);
  struct Durability {
    uint64_t write_id, cache_end;
  };
  bool volatile_cache_ = false;
  Ring<Durability> durability_;  // executed writes not yet known to be on the media

  std::vector<InFlight> slots_;
  std::vector<uint32_t> free_;
  std::vector<Due> due_;  // min-heap
  uint64_t seq_ = 0;
  sc_core::sc_event due_event_;
  void set_due_armed(SimTime t) {
    due_armed_ = t;
    if (times_) times_->set(slot_, t);
  }
  SimTime due_armed_ = ~SimTime{0};  // when complete_due is next to run (~0: not armed)
  EventTimes* times_ = nullptr;
  size_t slot_ = 0;

  // Completion requests in engine order: the in-flight slot, or kPosted for an entry the
  // controller wrote by itself (an AER, an aborted command).
  static constexpr uint32_t kPosted = ~0u;
  struct Pending {
    uint32_t slot;
    uint16_t cqid, cq_slot;
    bool phase;
  };
  Ring<Pending> pending_;
  bool posting_ = false;
  bool posted_seen_ = false;
  uint32_t posted_slot_ = 0;
  bool posted_phase_ = false;

  // What the engine has been told.
  std::vector<nvme::Controller::QueueState> sq_shadow_, cq_shadow_;
  std::vector<uint32_t> sq_db_, cq_db_;
  std::vector<uint16_t> live_sqs_, live_cqs_;  // queues the engine knows (scanned each step)
  uint32_t arb_shadow_ = ~0u;
  bool wrr_shadow_ = false;
  uint64_t generation_ = ~0ull;
  uint64_t resets_ = 0;
  SimTime ready_delay_ = 0;       // delay_next_ready(): armed while > 0
  SimTime ready_release_at_ = 0;  // when the held enable completes (0: not enabling yet)
  uint64_t epoch_ = 0;
  std::vector<uint64_t> sq_epoch_;  // per SQ: bumped when it is deleted (or re-created)
  uint32_t queues_ = 0;

  uint64_t commands_ = 0, completions_ = 0, mismatches_ = 0, dropped_ = 0;
};

}  // namespace pollux::emu::timing
