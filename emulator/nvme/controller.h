// Functional model of an NVMe 1.4 controller (NVM command set) over PCIe: BAR0 registers,
// doorbells, admin and I/O queues, PRP/SGL data transfer, namespaces in memory or files.
//
// The single source of command semantics for Pollux's emulator. Time does not exist here:
// a command is fetched, executed and its completion posted within one poll(). A timing model
// layered on top can split the steps: fetch + execute() produce the completion entry,
// post_completion() publishes it (see "Layering" below).
//
// Threading: single-threaded by design. The owner serialises register access, poll() and
// every other call. Host memory is touched only through the DmaSpace given at creation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "emulator/nvme/config.h"
#include "emulator/nvme/dma_space.h"
#include "emulator/nvme/faults.h"
#include "emulator/nvme/namespace_store.h"
#include "emulator/nvme/result.h"
#include "spec/nvme.h"

namespace pollux::emu::nvme {

// Plain counters, written only by the controller, readable by its owner.
struct ControllerCounters {
  uint64_t admin_commands = 0;
  uint64_t io_reads = 0;
  uint64_t io_writes = 0;
  uint64_t io_flushes = 0;
  uint64_t io_compares = 0;
  uint64_t io_write_zeroes = 0;
  uint64_t io_dataset_management = 0;
  uint64_t io_other = 0;            // unknown / unsupported I/O opcodes
  uint64_t completions_posted = 0;  // CQEs written to host memory
  uint64_t failed_commands = 0;     // completions with a non-zero status
  uint64_t iommu_faults = 0;        // DmaSpace::translate() returned nullptr
  uint64_t doorbell_errors = 0;     // invalid doorbell register or value
  uint64_t aborted_commands = 0;    // completed with Command Abort Requested
  uint64_t cq_full_stalls = 0;      // an SQ had work but its CQ had no free slot
  uint64_t fatal_errors = 0;        // CSTS.CFS was set (SQE fetch / CQE post impossible)
  uint64_t keep_alives = 0;
  uint64_t resets = 0;              // controller resets (CC.EN 1->0, NSSR)
  uint64_t bad_block_reads = 0;     // reads failed by an injected bad block
  uint64_t silent_faults = 0;       // commands a drop_data or misdirect fault corrupted
};

class Controller {
 public:
  // Opens every namespace's backing store. Errors name the namespace and the cause.
  static Result<std::unique_ptr<Controller>> create(const ControllerConfig& config, DmaSpace& dma);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // ---- BAR0 (offsets 0x0 .. 0xFFF are registers; 0x1000 on are doorbells) ----------------
  // Writes take effect immediately (CC.EN, CC.SHN, NSSR, INTMS/INTMC, CSTS.NSSRO, doorbells).
  uint32_t read32(uint32_t offset);
  uint64_t read64(uint32_t offset);
  void write32(uint32_t offset, uint32_t value);
  void write64(uint32_t offset, uint64_t value);
  // BAR0 size: registers + doorbells, rounded up to a power of two (at least 16 KiB).
  size_t bar0_size() const;

  // ---- Doorbells ---------------------------------------------------------------------------
  // The doorbell area (BAR0 offset 0x1000 on) lives in memory the device polls. By default
  // the controller owns it; a transport can attach a shared page instead (e.g. one mmapped
  // into the host). `page` is BAR0 offset 0x1000; `bytes` must be >= doorbell_bytes().
  // Doorbell writes through write32() land in the same memory. Returns false if too small.
  size_t doorbell_bytes() const { return config_.doorbell_bytes(); }
  bool attach_doorbells(volatile uint32_t* page, size_t bytes);
  void detach_doorbells();  // back to the internal page (its contents are copied over)

  // ---- Work ----------------------------------------------------------------------------------
  // Reads CQ head and SQ tail doorbells, fetches up to `max_commands` commands (admin queue
  // first, then I/O SQs round-robin), executes them and posts their completions. Never
  // overwrites a CQ entry the host has not consumed: while a CQ is full, SQs bound to it are
  // not fetched from. Returns the number of commands fetched.
  size_t poll(size_t max_commands);

  // ---- Layering (for a timing model) --------------------------------------------------------
  // poll() = for each command: fetch SQE, execute(), post_completion(). execute() runs the
  // command's semantics (all data movement) and fills *cqe (DW0, status, CID, SQID; SQHD is
  // filled at posting). Returns false if the command completes later by itself
  // (Asynchronous Event Request). post_completion() writes the entry to the CQ bound to
  // `sqid` (or queues it until the CQ has room) and signals its interrupt vector.
  bool execute(uint16_t sqid, const spec::nvme::SubmissionEntry& sqe,
               spec::nvme::CompletionEntry* cqe);
  void post_completion(uint16_t sqid, const spec::nvme::CompletionEntry& cqe);

  // ---- Timed layering: a timing model decides which SQ is fetched from and when ---------
  // The model watches the doorbell page (BAR0 offset 0x1000 on) the way the device front end
  // does, and drives fetch -> execute() -> complete_fetched() at simulated times.
  const volatile uint32_t* doorbells() const { return db_; }
  uint32_t sq_doorbell(uint16_t qid) const { return sq_db_index(qid); }  // index into doorbells()
  uint32_t cq_doorbell(uint16_t qid) const { return cq_db_index(qid); }
  // The housekeeping poll() does without fetching: the ready countdown after CC.EN, CQ head
  // doorbells (room for queued entries).
  void service();
  // service() when it has nothing to do but its bookkeeping: no ready countdown, every active
  // CQ's head doorbell as last read, no completion waiting for room, no interrupt to raise.
  // Returns false, doing nothing, otherwise (then call service()). A timing model scanning
  // many devices each step skips the rest of its scan of one the host did not touch.
  bool service_if_quiet();
  enum class Fetch { kFetched, kEmpty, kCqFull, kAborted, kUnavailable };
  // Takes the SQE at `sqid`'s head and reserves a slot in its CQ. kAborted: an Abort named
  // this command first; its completion is already posted. kUnavailable: no such SQ, or the
  // controller is not ready / has failed.
  Fetch fetch(uint16_t sqid, spec::nvme::SubmissionEntry* sqe);
  // Posts the completion of a fetched command into the slot fetch() reserved. A command whose
  // execute() returned false (an AER, completed later by the controller itself) releases
  // its slot with release_fetched().
  void complete_fetched(uint16_t sqid, const spec::nvme::CompletionEntry& cqe);
  void release_fetched(uint16_t sqid);
  struct QueueState {
    bool exists = false;
    uint32_t size = 0;   // entries
    uint16_t cqid = 0;   // SQ: its CQ
    uint8_t prio = 0;    // SQ: Create I/O SQ QPRIO (0 urgent .. 3 low)
    uint32_t head = 0;   // SQ: next entry to fetch; CQ: last head doorbell
    uint32_t tail = 0;   // SQ: last tail doorbell; CQ: next slot to write
  };
  uint32_t queue_slots() const;  // queue ids 0 .. n-1
  QueueState sq_state(uint16_t qid) const;
  QueueState cq_state(uint16_t qid) const;
  // Changes whenever a queue is created or deleted, the controller is enabled or reset, or the
  // Arbitration feature is set: the model re-reads queue states then.
  uint64_t queue_generation() const { return queue_generation_; }
  uint32_t arbitration_feature() const { return features_.arbitration; }
  bool weighted_round_robin_enabled() const {
    return spec::nvme::cc::ams(cc_) == spec::nvme::cc::kAmsWeightedRoundRobin;
  }
  // The host reads its memory on the thread that runs this controller (a lockstep simulation):
  // read data may then go there with streaming stores (host_stores.h), which only that thread
  // is sure to see before the completion entry. Off by default.
  void set_stream_to_host(bool on) { stream_to_host_ = on; }
  // Called after every completion entry is written to host memory: CQ, slot, phase tag.
  void set_cqe_observer(std::function<void(uint16_t cqid, uint32_t slot, bool phase)> fn) {
    cqe_observer_ = std::move(fn);
  }

  // ---- Host-visible events -------------------------------------------------------------------
  // Called with the MSI-X vector of a CQ with interrupts enabled after new entries were posted
  // to it (at most once per CQ per poll()).
  void set_interrupt_handler(std::function<void(uint16_t vector)> fn) { irq_ = std::move(fn); }
  // Adds `nsid` to the Changed Namespace List log and raises a Namespace Attribute Changed
  // notice (if enabled through Asynchronous Event Configuration bit 8).
  void notify_namespace_changed(uint32_t nsid);
  // Composite temperature reported by SMART (kelvin); crossing a threshold raises an event.
  void set_composite_temperature(uint16_t kelvin);
  // What log page C0h (spec::nvme::PolluxEmulatorStatus) reports: a realtime model's lag
  // behind the wall clock, set by the program that paces it (pollux-emu), on the device thread.
  struct RealtimeStatus {
    bool realtime = false;
    uint64_t lag_ns = 0, max_lag_ns = 0, warn_lag_ns = 0;
  };
  void set_realtime_status(const RealtimeStatus& s) { realtime_status_ = s; }

  // ---- Faults (driven by fault injection) ---------------------------------------------------
  // Controller Fatal Status: CSTS.CFS is set; nothing is fetched or posted until the host
  // resets the controller (CC.EN 1 -> 0).
  void inject_fatal_status() { set_fatal(); }
  // CSTS.RDY drops while CC.EN stays 1, as a controller that reset itself: queues are gone and
  // the host must reset (CC.EN 1 -> 0 -> 1) to use it again.
  void inject_spontaneous_disable();
  // Reset completion delay: while held, CSTS.RDY does not become 1 after CC.EN 0 -> 1 (a
  // controller slow to finish its reset); a timing model releases it after the delay.
  void hold_ready(bool hold) { ready_held_ = hold; }
  // CC.EN is 1 and CSTS.RDY still 0: the host is (re)initialising the controller.
  bool enabling() const {
    return (cc_ & spec::nvme::cc::kEn) && !(csts_ & spec::nvme::csts::kRdy) && !fatal() && !removed_;
  }
  // Surprise removal: the controller stops dead (nothing fetched, executed or posted; the
  // device wrapper makes BAR reads all ones and refuses DMA). power_cycle() brings it back as
  // a fresh controller (registers at power-on values) on the same namespaces and data.
  void set_removed(bool removed) { removed_ = removed; }
  bool removed() const { return removed_; }
  void power_cycle();
  // Fatal status or removed: a timing model must not let anything more take effect.
  bool stopped() const { return fatal() || removed_; }
  // Command-level faults and bad blocks, applied when I/O commands execute (see faults.h).
  FaultInjector& faults() { return faults_; }
  const FaultInjector& faults() const { return faults_; }
  // The delay a kDelay rule gave the last command execute() ran (0 if none): a timing model
  // postpones its completion by that much.
  uint64_t last_fault_delay_ns() const { return last_fault_delay_ns_; }
  uint64_t fault_hits() const { return faults_.hits(); }

  // ---- Power loss (a volatile write cache) -------------------------------------------------
  // With the journal on, every Write and Write Zeroes keeps the data it replaced under an id
  // (last_write_id() right after execute()). The timing model calls mark_durable(id) once the
  // write is on the media; power_loss() puts back, newest first, every write not durable,
  // then drops the controller as a power cut does (queues, RDY; CC.EN still reads 1 until the
  // host resets). Returns the ids of the writes that were lost.
  void set_write_journal(bool on) { journal_on_ = on; }
  uint64_t last_write_id() const { return last_write_id_; }
  void mark_durable(uint64_t id);
  std::vector<uint64_t> power_loss();
  size_t journal_entries() const { return journal_.size(); }

  // ---- Inspection -------------------------------------------------------------------------------
  const ControllerCounters& counters() const { return counters_; }
  const ControllerConfig& config() const { return config_; }
  uint32_t namespace_count() const { return static_cast<uint32_t>(namespaces_.size()); }
  NamespaceStore* namespace_store(uint32_t nsid);  // nullptr if no such namespace
  uint32_t lba_size(uint32_t nsid) const;          // current format; 0 if no such namespace
  bool ready() const { return csts_ & spec::nvme::csts::kRdy; }
  bool fatal() const { return csts_ & spec::nvme::csts::kCfs; }
  uint32_t memory_page_size() const { return page_size_; }

 private:
  struct Sq;
  struct Cq;
  struct Namespace;
  struct Segment {
    uint8_t* ptr;  // nullptr: bit bucket (read data is discarded)
    size_t len;
  };
  enum class Dir { kToHost, kFromHost };

  Controller(const ControllerConfig& config, DmaSpace& dma);

  // Registers / lifecycle.
  void write_cc(uint32_t value);
  void enable();
  void controller_reset();
  void subsystem_reset();
  void zero_doorbells();

  // Queues.
  uint32_t doorbell(uint32_t index) const { return db_[index]; }
  uint32_t sq_db_index(uint16_t qid) const { return (2u * qid) << config_.doorbell_stride; }
  uint32_t cq_db_index(uint16_t qid) const { return (2u * qid + 1) << config_.doorbell_stride; }
  void create_sq(uint16_t qid, uint64_t base, uint32_t size, uint16_t cqid, uint8_t prio = 0);
  void create_cq(uint16_t qid, uint64_t base, uint32_t size, bool ien, uint16_t iv);
  void delete_sq(uint16_t qid);
  void delete_cq(uint16_t qid);
  void rebuild_active_lists();
  void update_cq_head(Cq& cq);
  bool refresh_sq_tail(Sq& sq);
  bool take_abort(Sq& sq, uint16_t cid);
  size_t process_sq(Sq& sq, size_t budget);
  uint32_t cq_free(const Cq& cq) const;
  static uint32_t entries_in(const Cq& cq);  // posted, not yet consumed by the host
  void count_down_to_ready();
  void post(Cq& cq, const spec::nvme::CompletionEntry& cqe, bool reserved);
  bool write_cqe(Cq& cq, const spec::nvme::CompletionEntry& cqe, bool stale_phase = false);
  uint16_t apply_faults(const spec::nvme::SubmissionEntry& sqe, uint16_t sqid, bool* hold,
                        bool* skip, spec::nvme::SubmissionEntry* run);
  void flush_overflow(Cq& cq);
  void fire_interrupts();
  void set_fatal();
  void doorbell_error(uint8_t info, uint16_t qid);

  // Execution.
  uint16_t dispatch_admin(uint16_t sqid, const spec::nvme::SubmissionEntry& sqe, uint32_t* dw0,
                          bool* defer);
  uint16_t dispatch_io(const spec::nvme::SubmissionEntry& sqe, uint32_t* dw0);
  uint16_t admin_identify(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_create_sq(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_create_cq(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_delete_sq(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_delete_cq(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_get_log_page(const spec::nvme::SubmissionEntry& sqe);
  uint16_t admin_set_features(const spec::nvme::SubmissionEntry& sqe, uint32_t* dw0);
  uint16_t admin_get_features(const spec::nvme::SubmissionEntry& sqe, uint32_t* dw0);
  uint16_t set_host_behavior(const spec::nvme::SubmissionEntry& sqe);
  uint16_t get_host_behavior(const spec::nvme::SubmissionEntry& sqe, bool defaults);
  uint16_t admin_abort(const spec::nvme::SubmissionEntry& sqe, uint32_t* dw0);
  uint16_t admin_async_event(uint16_t cid, bool* defer);
  uint16_t admin_format(const spec::nvme::SubmissionEntry& sqe);
  uint16_t io_read_write(const spec::nvme::SubmissionEntry& sqe, Namespace& ns, bool write);
  uint16_t io_compare(const spec::nvme::SubmissionEntry& sqe, Namespace& ns);
  uint16_t check_lba_range(const spec::nvme::SubmissionEntry& sqe, const Namespace& ns,
                           uint64_t* slba, uint64_t* bytes);
  uint16_t io_write_zeroes(const spec::nvme::SubmissionEntry& sqe, Namespace& ns);
  uint16_t io_dsm(const spec::nvme::SubmissionEntry& sqe, Namespace& ns);
  uint16_t io_flush(const spec::nvme::SubmissionEntry& sqe);
  Namespace* find_ns(uint32_t nsid);

  // Data transfer: map_* fill segments_ (no allocation once warm), then copy.
  uint16_t map_dptr(const spec::nvme::SubmissionEntry& sqe, size_t len, Dir dir);
  uint16_t map_prp(uint64_t prp1, uint64_t prp2, size_t len);
  uint16_t map_sgl(const spec::nvme::SglDescriptor& first, size_t len, Dir dir);
  uint16_t add_segment(uint64_t iova, size_t len);
  uint16_t copy_to_host(const void* src, size_t src_len, size_t len);  // zero-fills past src_len
  void copy_from_host(void* dst);

  // Events, logs.
  void raise_event(uint8_t type, uint8_t info, uint8_t log_page);
  void deliver_events();
  void log_error(uint16_t sqid, uint16_t cid, uint16_t status, uint32_t nsid);
  void check_temperature();
  void reset_features();

  ControllerConfig config_;
  DmaSpace& dma_;
  std::function<void(uint16_t)> irq_;
  std::function<void(uint16_t, uint32_t, bool)> cqe_observer_;
  bool stream_to_host_ = false;
  uint64_t queue_generation_ = 0;
  FaultInjector faults_;
  uint64_t last_fault_delay_ns_ = 0;
  struct JournalEntry {
    uint64_t id;
    uint32_t nsid;
    uint64_t offset;
    std::vector<uint8_t> old;  // what the write replaced
  };
  void journal(uint32_t nsid, uint64_t offset, uint64_t len);
  bool journal_on_ = false;
  bool removed_ = false;
  uint64_t last_write_id_ = 0, next_write_id_ = 1;
  std::vector<JournalEntry> journal_;  // ids ascending
  // Completions to post the way a buggy device would: (sqid << 16 | cid) -> action.
  std::vector<std::pair<uint32_t, FaultAction>> quirks_;
  ControllerCounters counters_;

  // Registers.
  uint64_t cap_ = 0;
  uint32_t cc_ = 0, csts_ = 0, aqa_ = 0, intm_ = 0;
  uint64_t asq_ = 0, acq_ = 0;
  uint32_t ready_countdown_ = 0;
  bool ready_held_ = false;
  uint32_t page_size_ = 4096;
  uint32_t page_shift_ = 12;
  uint64_t mdts_bytes_ = 0;  // 0 = unlimited

  // Doorbells.
  std::vector<uint32_t> internal_db_;
  volatile uint32_t* db_ = nullptr;

  // Queues (index = qid; preallocated so references stay valid).
  std::vector<Sq> sqs_;
  std::vector<Cq> cqs_;
  std::vector<uint16_t> active_io_sqs_;  // round-robin order
  std::vector<uint16_t> active_cqs_;
  size_t rr_next_ = 0;
  uint64_t poll_gen_ = 0;
  uint32_t nsqa_ = 0, ncqa_ = 0;  // allocated I/O queues (Number of Queues), not 0's based
  bool queues_feature_set_ = false;

  std::vector<std::unique_ptr<Namespace>> namespaces_;
  std::vector<Segment> segments_;
  std::vector<uint8_t> admin_buf_;  // identify / log / DSM range scratch (4 KiB)

  // Features.
  struct Features {
    uint32_t arbitration;
    uint32_t power_management;
    uint16_t temp_over, temp_under;
    uint32_t error_recovery;
    bool write_cache;
    uint32_t interrupt_coalescing;
    uint32_t write_atomicity;
    uint32_t async_event_config;
    uint32_t keep_alive_ms;
    // Host Behavior Support: the defined fields (the rest of the 512 bytes is reserved).
    uint8_t acre, etdas, lbafee;
  } features_{};
  std::vector<uint8_t> vector_cd_;  // Interrupt Vector Configuration: coalescing disable

  // Asynchronous events.
  static constexpr uint32_t kAerLimit = 4;    // Identify AERL = 3
  static constexpr uint32_t kAbortLimit = 4;  // Identify ACL = 3
  struct Event {
    uint8_t type, info, log_page;
  };
  std::vector<uint16_t> aer_cids_;
  std::vector<Event> pending_events_;
  uint32_t masked_event_types_ = 0;

  // Logs.
  static constexpr uint32_t kErrorLogEntries = 64;  // Identify ELPE = 63
  std::vector<spec::nvme::ErrorLogEntry> error_log_;  // ring
  uint64_t error_count_ = 0;
  std::vector<uint32_t> changed_ns_;
  bool changed_ns_overflow_ = false;
  uint64_t bytes_read_ = 0, bytes_written_ = 0;
  uint64_t host_read_commands_ = 0, host_write_commands_ = 0;
  uint64_t media_errors_ = 0, unsafe_shutdowns_ = 0;
  uint16_t temperature_ = 313;  // 40 C
  uint8_t critical_warning_ = 0;
  RealtimeStatus realtime_status_;
  uint64_t err_lba_ = 0;  // LBA of the failing command, for the error log
};

}  // namespace pollux::emu::nvme
