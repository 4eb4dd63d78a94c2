// An NVMe queue pair (SQ + CQ) and its preallocated requests, over a QueueTransport
// (transport.h: PCIe rings and doorbells, or a fabrics connection). The queue pair is the
// transport-neutral part: requests and CIDs, submission order and the SQ's room, the wait for
// a free slot, timeouts, error injection, statistics. One owner thread; the hot path (submit,
// process_completions) takes no lock, allocates nothing, makes no syscall of its own.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>

#include "driver/env/clock.h"
#include "driver/env/owner_counter.h"
#include "driver/env/result.h"
#include "driver/nvme/transport.h"
#include "spec/nvme.h"

namespace pollux::nvme {

namespace sn = spec::nvme;

class Qpair;
struct Namespace;

using CompletionFn = void (*)(void* ctx, const sn::CompletionEntry& cpl);
using TimeoutFn = void (*)(void* ctx, Qpair& qpair, uint16_t cid);

struct QpairOptions {
  uint32_t queue_size = 256;       // entries per queue; one SQ slot always stays empty
  uint32_t num_requests = 0;       // 0: 2 × queue_size. Beyond what fits in the SQ, requests
                                   // wait in software and are submitted as completions free slots
  bool batch_doorbells = true;     // ring the SQ doorbell (flush the transport) once per
                                   // process_completions()/flush_doorbell()
  bool prefer_sgl = false;         // PCIe: describe data with SGLs when the controller takes them
  uint64_t timeout_us = 0;         // 0: no timeout detection
  bool track_latency = false;      // a clock read per doorbell and per completion batch
  TimeoutFn timeout_cb = nullptr;  // a command outlived timeout_us (once per command)
  // A command already reported is still outstanding timeout_us after the report (once per
  // command): whatever the timeout set in motion (an Abort) did not end it. Same context.
  TimeoutFn overdue_cb = nullptr;
  void* timeout_ctx = nullptr;
};

// The counts a CPU-time model weighs, summed where they are counted over a group of queue
// pairs (as SPDK's PCIe poll groups share one statistics structure): reading a group's costs
// the same however many queue pairs it has (a simulator reads it at every CPU-clock reading).
// Written by the queue pairs' owner thread; readable from any thread.
struct QpairWorkCounts {
  env::OwnerCounter polls = 0, submitted = 0, completed = 0, doorbells = 0;
};

// Written by the queue pair's owner; readable from any thread (metrics).
struct QpairStats {
  env::OwnerCounter polls = 0;      // process_completions() calls
  env::OwnerCounter submitted = 0;  // reached the SQ
  env::OwnerCounter completed = 0;
  env::OwnerCounter doorbells = 0;  // SQ tail doorbell writes (with the three above: one cache
                                    // line, what a simulator reads at every CPU-clock reading)
  env::OwnerCounter errors = 0;                       // completions with a non-zero status
  std::array<env::OwnerCounter, 8> errors_by_type{};  // the same, by Status Code Type
  env::OwnerCounter queued = 0;                       // had to wait for an SQ slot
  env::OwnerCounter timeouts = 0;
  env::OwnerCounter overdue = 0;  // still outstanding a timeout after their timeout
  env::OwnerCounter bad_completions =
      0;                               // unknown, stale or not-outstanding CID, wrong SQID: ignored
  env::OwnerCounter bad_sq_heads = 0;  // CQE SQ head pointers beyond the tail: ignored
  env::OwnerCounter injected = 0;      // commands hit by an error injection rule
  env::OwnerCounter failed_on_removal = 0;  // requests ended because the device was removed
  env::OwnerCounter split_ios = 0;          // reads/writes beyond MDTS split into commands
  env::OwnerCounter split_children = 0;     // the commands they became
  env::OwnerHistogram latency;              // doorbell to completion, in ns (track_latency)
};

// A software error injection rule (SPDK's spdk_nvme_qpair_add_cmd_error_injection, plus LBA
// and time filters). A command matches when every filter given matches, at the moment it is
// submitted to the queue pair. Rules are checked in the order they were added; the first
// match wins.
struct ErrorInjection {
  bool any_opcode = false;  // else only commands with `opcode`
  uint8_t opcode = 0;
  // The status the command completes with (sct/sc; dnr sets Do Not Retry).
  uint8_t sct = 0;
  uint8_t sc = 0;
  bool dnr = false;
  uint32_t count = 1;  // how many commands to hit; 0 = unlimited
  // true: complete in software (from the next process_completions()), never sent to the
  // device. false: sent to the device; its completion's status is replaced.
  bool do_not_submit = false;
  // LBA filter, inclusive. Only LBA commands (read, write, compare, write zeroes, write
  // uncorrectable, verify: SLBA in CDW10/11, NLB in CDW12) overlapping [lba_lo, lba_hi]
  // match; other commands never do while the filter is on.
  bool match_lba = false;
  uint64_t lba_lo = 0;
  uint64_t lba_hi = UINT64_MAX;
  // Time window on the queue pair's clock (ticks): start_tick <= now < end_tick.
  uint64_t start_tick = 0;
  uint64_t end_tick = UINT64_MAX;
};

// Status that ends requests of a removed device: Path Related Status / Host Pathing Error
// (the host could not reach the controller), Do Not Retry on this path.
inline constexpr uint8_t kScHostPathingError = 0x70;
inline constexpr uint16_t kRemovedStatus =
    sn::status::make(sn::sct::kPath, kScHostPathingError, /*dnr=*/true);

// What the controller knows that a queue pair needs, whatever the transport.
struct QpairContext {
  const std::atomic<bool>* gone = nullptr;  // the transport's gone flag
  const env::Clock* clock = nullptr;
  uint32_t max_transfer = 0;  // bytes (MDTS, the transport's own limit); 0 = unlimited
};

class Qpair {
 public:
  // The queue pair takes the transport (created for qid and options.queue_size entries).
  static Result<std::unique_ptr<Qpair>> create(const QpairContext& ctx,
                                               std::unique_ptr<QueueTransport> transport,
                                               uint16_t qid, const QpairOptions& options);
  ~Qpair();
  Qpair(const Qpair&) = delete;
  Qpair& operator=(const Qpair&) = delete;

  uint16_t id() const { return qid_; }
  uint32_t queue_size() const { return size_; }
  QueueTransport& transport() { return *transport_; }
  const QpairStats& stats() const { return stats_; }
  // From now on its polls, submissions, completions and doorbells are also counted into
  // `group` (nullptr: no longer). Owner thread; the group must outlive the membership.
  void count_work_into(QpairWorkCounts* group) { work_group_ = group; }
  uint32_t outstanding() const { return outstanding_; }  // submitted or queued, not completed

  // I/O. 0, or -ENOMEM (no free request: retry after completions), -EINVAL (bad
  // arguments, buffer not in registered DMA memory, layout the device can't take),
  // -ENODEV (the device is gone). Flags: CDW12 bits (FUA...). A read/write/compare beyond
  // the maximum transfer (MDTS) is split, as SPDK's driver does, into commands of at most
  // that size (a free request per command, plus one that collects them): the callback runs
  // once, when all have completed, with the first error if any (stats: split_ios).
  int read(const Namespace& ns, void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
           void* cb_ctx, uint32_t io_flags = 0);
  int write(const Namespace& ns, const void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
            void* cb_ctx, uint32_t io_flags = 0);
  int readv(const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba, uint32_t nlb,
            CompletionFn cb, void* cb_ctx, uint32_t io_flags = 0);
  int writev(const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba, uint32_t nlb,
             CompletionFn cb, void* cb_ctx, uint32_t io_flags = 0);
  int compare(const Namespace& ns, const void* buf, uint64_t lba, uint32_t nlb, CompletionFn cb,
              void* cb_ctx);
  int flush(const Namespace& ns, CompletionFn cb, void* cb_ctx);
  int write_zeroes(const Namespace& ns, uint64_t lba, uint32_t nlb, CompletionFn cb, void* cb_ctx,
                   uint32_t io_flags = 0);
  // `ranges` must live in registered DMA memory until completion.
  int deallocate(const Namespace& ns, const sn::nvm::DsmRange* ranges, uint32_t count,
                 CompletionFn cb, void* cb_ctx);
  // Any command; the driver fills the CID, and the data pointer when buf is given (else
  // the command's own DPTR is kept).
  int submit_raw(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                 void* cb_ctx);

  // Reaps up to max completions (0: all available), calling their callbacks: first those
  // injected in software, then the transport's (which frees the CQ slots it took). Then moves
  // waiting requests into freed SQ slots, flushes the transport once (the SQ doorbell), and
  // checks timeouts. Returns
  // completions reaped, or -ENODEV if the device is gone: the first call that sees removal
  // ends every outstanding and waiting request with kRemovedStatus (DNR), exactly once;
  // nothing of this queue pair is delivered after that.
  int process_completions(uint32_t max = 0);
  // Rings the SQ doorbell (flushes the transport) now if submissions are pending.
  void flush_doorbell();

  // Fails every outstanding and waiting request with `status` (no device involved), e.g.
  // after surprise removal. Returns how many.
  uint32_t fail_all(uint16_t status);
  // Ends, with `status`, the requests still waiting for an SQ slot (never placed) whose
  // callback is `cb` and for whose context `match` says yes: a caller that gave them up (an
  // abort) keeps them from going out later. Split pieces are not looked at. Owner thread, the
  // queue not being reset. Returns how many ended.
  uint32_t cancel_waiting(CompletionFn cb, bool (*match)(void* cb_ctx), uint16_t status);
  // After a controller reset (set-up path; the owner must not use the pair meanwhile): ends
  // what had reached the device with `status` (a retriable one: the device may or may not
  // have executed it), keeps what was still waiting for an SQ slot (it is submitted once the
  // queues exist again), and returns both rings to their initial state (empty, phase 1).
  // Returns how many were ended. Until resume(), submissions wait and nothing is reaped.
  // connect_now false (fabrics, the controller's asynchronous reset): the transport only
  // starts its new connection (QueueTransport::start_connect); the controller polls it.
  uint32_t reset_rings(uint16_t status, bool connect_now = true);
  void resume() { resetting_ = connecting_ = false; }
  // Fabrics: the queue's connection is (again) open and must carry its Connect command first.
  // Until resume(), completions are reaped but only submit_first() commands are placed: what
  // other submissions (and requests waiting from before a reset) send waits behind it.
  void begin_connect() {
    resetting_ = false;
    connecting_ = true;
  }
  int submit_first(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                   void* cb_ctx);
  // Nothing is reaped or placed until resume(); submissions wait (the queue is being deleted).
  void pause() { resetting_ = true; }
  bool resetting() const { return resetting_; }

  // Error injection (owner thread, not concurrently with submit/process_completions). 0, or
  // -ENOSPC when kMaxErrorInjections rules are armed, -EINVAL for an empty LBA range or time
  // window. With no rule armed, submit pays a single branch.
  static constexpr uint32_t kMaxErrorInjections = 16;
  int add_error_injection(const ErrorInjection& rule);
  void clear_error_injections();
  uint32_t error_injections_armed() const { return num_rules_; }

 private:
  struct Request;
  Qpair(const QpairContext& ctx, uint16_t qid, const QpairOptions& options);
  Request* get_request(CompletionFn cb, void* cb_ctx);
  void put_request(Request* r);
  int build_data(Request* r, const iovec* iov, int iovcnt, uint32_t len);
  int raw_request(const sn::SubmissionEntry& cmd, void* buf, uint32_t len, CompletionFn cb,
                  void* cb_ctx, Request** out);
  void complete(const sn::CompletionEntry& entry, uint64_t* now);
  int rw(uint8_t opcode, const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba,
         uint32_t nlb, CompletionFn cb, void* cb_ctx, uint32_t io_flags);
  int split_rw(uint8_t opcode, const Namespace& ns, const iovec* iov, int iovcnt, uint64_t lba,
               uint32_t nlb, CompletionFn cb, void* cb_ctx, uint32_t io_flags);
  static void split_child_done(void* ctx, const sn::CompletionEntry& cpl);
  int submit(Request* r);
  void place_in_sq(Request* r);
  void ring_sq_doorbell();
  void count_error(uint16_t status);
  void check_timeouts();
  void advance_stage(Request* r);
  Request** stage_list(uint8_t stage, Request*** tail);
  void unlink_outstanding(Request* r);
  // Slots from `from` forward to `to` around the ring (no division on the completion path).
  uint32_t ring_distance(uint32_t from, uint32_t to) const {
    return to >= from ? to - from : to + size_ - from;
  }
  void end_request(Request* r, uint16_t status);
  uint32_t end_outstanding(uint16_t status);
  bool inject(Request* r);  // true: completed in software, don't submit
  uint32_t deliver_injected(uint32_t max);
  void fail_removed();
  bool gone() const { return ctx_.gone->load(std::memory_order_acquire); }

  QpairContext ctx_;
  uint16_t qid_;
  uint32_t size_;
  QpairOptions options_;
  std::unique_ptr<QueueTransport> transport_;
  sn::SubmissionEntry* sq_ = nullptr;  // the transport's submission queue

  uint32_t sq_tail_ = 0, sq_head_ = 0;  // the SQ's room: the controller reports its head
  bool sq_head_reported_ = true;        // else each completion frees one slot
  bool doorbell_pending_ = false;
  // Latency tracking without timeouts: requests placed since the last doorbell, stamped when
  // it rings (one clock read per batch; the device cannot start them earlier).
  uint32_t unstamped_ = 0;
  uint64_t ns_per_tick_q32_ = uint64_t{1} << 32;  // latency histograms count nanoseconds
  uint64_t ticks_to_ns(uint64_t ticks) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(ticks) * ns_per_tick_q32_) >> 32);
  }
  bool resetting_ = false;   // between reset_rings() and resume(): the queues don't exist
  bool connecting_ = false;  // between begin_connect() and resume(): only submit_first()

  std::unique_ptr<Request[]> requests_;
  uint32_t num_requests_ = 0;
  Request* free_ = nullptr;
  Request* wait_head_ = nullptr;  // FIFO of requests waiting for an SQ slot
  Request* wait_tail_ = nullptr;
  Request* out_head_ = nullptr;  // submitted, oldest first (timeouts look here)
  Request* out_tail_ = nullptr;
  Request* late_head_ = nullptr;  // submitted and already reported as timed out
  Request* late_tail_ = nullptr;
  Request* overdue_head_ = nullptr;  // ... and reported overdue as well: no more checks
  Request* overdue_tail_ = nullptr;
  Request* inj_head_ = nullptr;  // completed in software, delivered by the next poll
  Request* inj_tail_ = nullptr;
  uint32_t inj_count_ = 0;
  uint32_t outstanding_ = 0;
  uint64_t timeout_ticks_ = 0;
  uint32_t cid_index_bits_ = 16;  // CID = generation << bits | request index
  bool removal_handled_ = false;  // removal seen and every request ended
  bool inject_armed_ = false;     // any rule armed: the one branch submit pays
  uint32_t num_rules_ = 0;
  ErrorInjection rules_[kMaxErrorInjections];
  QpairStats stats_;
  QpairWorkCounts* work_group_ = nullptr;
};

}  // namespace pollux::nvme
