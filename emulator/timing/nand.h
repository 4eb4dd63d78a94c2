// NAND flash media: the array (channels x dies x planes with tR/tPROG/tBERS and a channel bus)
// and a page-mapping FTL (over-provisioning, greedy garbage collection, write amplification,
// preconditioning). Plain C++ resource models: each operation is given the time it may start
// and returns the time it completes, reserving the die and channel it uses (busy-until
// bookkeeping, FIFO per resource). The SystemC modules wrap these; keeping the cores free of
// SystemC lets them be unit-tested many times per process.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emulator/timing/sim_time.h"
#include "emulator/timing/sparse_map.h"
#include "emulator/timing/timeline.h"

namespace pollux::emu::timing {

struct NandGeometry {
  uint32_t channels = 8;
  uint32_t dies_per_channel = 4;
  uint32_t planes_per_die = 2;
  uint32_t blocks_per_plane = 1024;
  uint32_t pages_per_block = 256;
  uint32_t page_bytes = 16384;  // a multiple of the 4 KiB mapping unit
};

struct NandTiming {
  SimTime t_read = 50 * kUs;     // tR: array to page register
  SimTime t_prog = 600 * kUs;    // tPROG: page register to array
  SimTime t_erase = 3 * kMs;     // tBERS
  uint64_t channel_bytes_per_second = 400'000'000;  // bus between controller and dies
  SimTime command_overhead = 0;  // per operation on the channel (command/address cycles)

  // --- read latency distribution (all off by default: every read senses in exactly t_read) ---
  // Die-to-die variation: each die's tR is t_read x (1 + z x spread), z ~ N(0, 1) drawn once
  // per die (clipped to [0.5, 1.5] x t_read).
  double t_read_die_spread = 0;
  // Read-to-read variation (word line position, cell state): an exponentially distributed
  // extra sensing time with this mean, drawn per sense.
  SimTime t_read_jitter = 0;
  // Read retry: this fraction of senses fails ECC and is re-sensed with shifted read levels,
  // `read_retry_steps` more tR each time.
  double read_retry_rate = 0;
  uint32_t read_retry_steps = 1;
  uint64_t seed = 1;  // of the die factors, the jitter and the retries

  // The die's page register keeps the last page group it sensed until the die does anything
  // else: reading another unit of it costs only the channel transfer (no tR). Multi-plane:
  // a sense fills the registers of every plane.
  bool register_hits = false;

  // Program/erase suspend: a read to a die that is programming or erasing suspends it
  // (t_suspend), senses, and resumes it (t_resume); the program or erase ends that much later.
  bool suspend = false;
  SimTime t_suspend = 0;
  SimTime t_resume = 0;

  // tPROG of a page group programmed in SLC mode (the SLC write cache); 0: no SLC mode.
  SimTime t_prog_slc = 0;
};

// Where a page lives. `block` is per plane.
struct PhysPage {
  uint32_t channel, die, plane, block, page;
};

// Reservations are FIFO per resource: an operation never starts before one reserved earlier
// on the same die or channel ends, even if it is given an earlier start (no back-filling of
// idle gaps). The counters count commands: a multi-plane program or erase is one.
class NandArray {
 public:
  NandArray(const NandGeometry& g, const NandTiming& t);
  // Read `bytes` of a page: the die (all planes) is busy for tR, then the channel moves the
  // bytes (plus command_overhead). Returns when the data is in the controller. The die is free
  // again after tR (the data waits in the cache register for the channel).
  SimTime read(SimTime start, const PhysPage& p, uint32_t bytes);
  // Sense a page group into the die's register without moving data (read-ahead): the die is
  // busy for tR; a later read() of it costs only the transfer (with register_hits). Returns
  // when the data is in the register (at once if it already is).
  SimTime sense(SimTime start, const PhysPage& p);
  // Program a full page: the channel moves page_bytes into the die, then the die is busy
  // for tPROG. Multi-plane: `planes` pages on consecutive planes of one die in one tPROG.
  // `t_prog`: this program's array time (0: the timing's tPROG; the SLC cache passes
  // t_prog_slc).
  SimTime program(SimTime start, const PhysPage& p, uint32_t planes = 1, SimTime t_prog = 0);
  // Erase: the die is busy for tBERS (after command_overhead on the channel, if any).
  // Multi-plane: `planes` blocks with the same index on consecutive planes in one tBERS.
  SimTime erase(SimTime start, uint32_t channel, uint32_t die, uint32_t plane, uint32_t block,
                uint32_t planes = 1);
  // Earliest time the die is idle (for the FTL's write-point choice).
  SimTime die_free_at(uint32_t channel, uint32_t die) const;
  // The current simulated time: channel bookings end before it are forgotten. The FTL books
  // operations ahead of time (GC bursts) and out of order; a channel is a timeline, so a
  // transfer booked later for an earlier time uses the idle gap instead of queueing behind.
  void set_now(SimTime now) { now_ = now; }
  SimTime channel_free_at(uint32_t channel) const { return channels_[channel].busy_until(); }
  const NandGeometry& geometry() const { return g_; }
  const NandTiming& timing() const { return t_; }
  uint64_t reads() const { return reads_; }
  uint64_t programs() const { return programs_; }
  uint64_t erases() const { return erases_; }
  // Time booked on a die (tR, tPROG, tBERS) or a channel (transfers, command cycles) so far,
  // including bookings that end in the future (GC bursts are booked ahead).
  SimTime die_busy_time(uint32_t channel, uint32_t die) const {
    return die_booked_[size_t(channel) * g_.dies_per_channel + die];
  }
  SimTime channel_busy_time(uint32_t channel) const { return channel_booked_[channel]; }
  // The die's mean tR (t_read x its die factor) and counters of the read model.
  SimTime die_t_read(uint32_t channel, uint32_t die) const {
    return die_tr_[size_t(channel) * g_.dies_per_channel + die];
  }
  uint64_t register_hits() const { return register_hits_; }
  uint64_t read_retries() const { return retries_; }
  uint64_t suspends() const { return suspends_; }

 private:
  enum class Op : uint8_t { kIdle, kRead, kProgram, kErase };
  struct Register {
    bool valid = false;
    uint32_t block = 0, page = 0;
    SimTime ready = 0;  // when the sensed data is in the register
  };
  size_t die_index(uint32_t channel, uint32_t die) const {
    return size_t(channel) * g_.dies_per_channel + die;
  }
  SimTime sense_time(size_t d);  // tR of one sense on die d (spread, jitter, retries)
  // Books a sense of (block, page) on die d from `start`; returns when the data is sensed.
  SimTime book_sense(size_t d, SimTime start, uint32_t block, uint32_t page);
  void book_array_op(size_t d, Op op, SimTime begin, SimTime end);
  uint64_t next_random();
  double uniform();

  NandGeometry g_;
  NandTiming t_;
  std::vector<SimTime> die_busy_;
  std::vector<SimTime> die_tr_;         // per die: t_read x die factor
  std::vector<Op> die_op_;              // the last operation booked on each die
  std::vector<SimTime> die_op_begin_;   // and when its array time began
  std::vector<Register> register_;      // per die
  std::vector<SimTime> suspended_sense_end_;  // per die: last read sensed under a suspension
  uint64_t rng_state_ = 0;
  uint64_t register_hits_ = 0, retries_ = 0, suspends_ = 0;
  std::vector<Timeline> channels_;
  std::vector<SimTime> die_booked_, channel_booked_;
  SimTime now_ = 0;
  std::vector<SimTime> program_xfer_;  // channel time of 0..planes_per_die pages (hot path)
  uint32_t read_xfer_bytes_ = 0;    // last read size and its channel time (memoised)
  SimTime read_xfer_time_ = 0;
  uint64_t reads_ = 0, programs_ = 0, erases_ = 0;
};

enum class Precondition {
  kNone,        // fresh out of box: nothing mapped, every block free
  kSequential,  // every logical page written once in order (no invalid pages yet)
  kSteady,      // sequential fill, then random overwrites (not timed) until WA settles
};

struct FtlConfig {
  uint64_t logical_bytes = 0;        // user capacity; physical = the array's raw capacity
  uint32_t mapping_unit = 4096;      // bytes per logical page (LPN)
  uint32_t gc_free_blocks_low = 4;   // start GC below this many free blocks per die (superblock)
  Precondition precondition = Precondition::kNone;
  uint64_t seed = 1;                 // for kSteady's random overwrites
  // Read-ahead: once reads come in LPN order (a sequential stream), each read that enters a
  // new page group senses the next `read_ahead_groups` groups of the stream into their dies'
  // page registers (NandArray::sense), so the host's reads of them find the data sensed.
  uint32_t read_ahead_groups = 0;
  // SLC write cache (see SlcCache): host page groups are programmed in SLC mode while this
  // much SLC space is free; idle time folds it back to TLC. 0: no SLC cache.
  uint64_t slc_bytes = 0;
  SimTime slc_fold_after_idle = 1 * kMs;
};

// The SLC write cache of a TLC drive, as bookkeeping: host writes land in SLC-mode blocks
// (fast programs) while SLC space is free; once it is used up they are programmed as TLC
// directly (the post-cache write rate). When the drive has been idle for `fold_after_idle`,
// it folds SLC data into TLC at `fold_bytes_per_second` and frees the space again. Folding
// happens only in idle time and is not booked on the dies (a read during idle does not see
// it): the cost the host sees is the TLC rate once the cache is full.
class SlcCache {
 public:
  SlcCache() = default;
  SlcCache(uint64_t capacity_bytes, uint64_t fold_bytes_per_second, SimTime fold_after_idle)
      : capacity_(capacity_bytes), fold_rate_(fold_bytes_per_second), fold_after_(fold_after_idle) {}
  bool enabled() const { return capacity_ != 0; }
  // A host page group of `bytes` is programmed from `start`: true if it goes to SLC (and
  // takes the space), false if the cache is full (a TLC program).
  bool admit(SimTime start, uint64_t bytes);
  // That program ends at `done` (the drive is busy until then).
  void programmed(SimTime done) { busy_until_ = std::max(busy_until_, done); }
  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t slc_programs() const { return slc_programs_; }
  uint64_t tlc_programs() const { return tlc_programs_; }
  uint64_t folded_bytes() const { return folded_; }

 private:
  uint64_t capacity_ = 0, fold_rate_ = 0;
  SimTime fold_after_ = 0;
  uint64_t used_ = 0;
  SimTime busy_until_ = 0;  // end of the last program: idle time starts there
  uint64_t slc_programs_ = 0, tlc_programs_ = 0, folded_ = 0;
};

struct FtlStats {
  uint64_t host_units_written = 0;   // mapping units written by the host
  uint64_t nand_units_written = 0;   // host + GC relocations (+ padding: every program counts
                                     // its full page group, so this = programs x group units)
  uint64_t gc_relocations = 0;
  uint64_t erases = 0;               // superblock (multi-plane) erases
  double write_amplification() const {
    return host_units_written ? double(nand_units_written) / double(host_units_written) : 0.0;
  }
};

// Page-level FTL. Layout and policy (see ftl.cc for the details):
//  * The die is the unit of allocation and GC: a superblock is block index b on every plane
//    of one die; it is written one page group (one page on every plane, a multi-plane program)
//    at a time, erased whole (one multi-plane erase), and chosen by greedy GC (fewest valid
//    units on that die). Host data and GC relocations share the die's open superblock. GC
//    relocates whole page groups (no padding) and may leave a victim half-emptied until the
//    die's next GC round; its remaining units stay readable where they are.
//  * GC runs on the die about to take a host page group when that die has fewer than
//    gc_free_blocks_low free superblocks, before the host program, on the same die and
//    channel reservations: its time is the write latency of that program (the write cliff).
//  * validate() asks for gc_free_blocks_low + 2 spare superblocks per die beyond the logical
//    capacity; with that, some die can always take a host page group.
//  * Host page groups go to dies in round-robin order, channel first (die index i is channel
//    i % channels, die i / channels), so consecutive groups use different channels.
//  * The forward map (LPN -> physical unit) is a hash map (sparse_map.h) holding only the
//    LPNs written or trimmed: random writes over a drive of any size cost 16-32 B per LPN.
//    The reverse map (physical unit -> LPN) is a table of 4 KiB chunks allocated on first
//    touch (physical units are written in order, so its chunks fill up). After a
//    kSequential/kSteady precondition a forward entry of 0 means "implicit": the LPN is still
//    where the sequential fill put it, a position computed from the LPN (the fill is exactly
//    the round-robin stripe above), not stored. With kNone, 0 means unmapped.
// Single-threaded; after construction, allocation only when a map grows (doubling, or a
// reverse-map chunk on first touch).
class Ftl {
 public:
  // Errors (physical capacity smaller than logical, bad mapping unit) are reported by
  // validate(); construct only from a validated config (the constructor throws
  // std::invalid_argument with the same message otherwise).
  static std::string validate(const FtlConfig& c, const NandGeometry& g);  // "" if fine
  // kSteady costs O(logical capacity) of untimed work at construction (random overwrites until
  // WA settles): meant for scaled-down capacities. kNone and kSequential are O(blocks).
  Ftl(const FtlConfig& c, NandArray& nand);
  // Time a read of one mapping unit completes. Units never written since preconditioning
  // read from where the precondition put them; with kNone they cost no media access (a real
  // drive returns zeroes for unmapped LBAs without touching NAND). Units in the open
  // (not yet programmed) page group are served from the write buffer: `start`.
  SimTime read(SimTime start, uint64_t lpn);
  // Accept one mapping unit into the open page (the controller's write buffer). Units gather
  // until a page (x planes_per_die for a multi-plane program) is full; then it is programmed at
  // the next write point (dies in round-robin order), after any garbage collection the free
  // block count calls for (relocations and erases reserve the same dies, which is how the
  // write cliff appears). `units` = how many units that program made durable (0: the unit is
  // buffered, not yet programmed); `done` = that program's completion time.
  struct WriteResult {
    uint32_t units = 0;
    SimTime done = 0;
  };
  WriteResult write(SimTime start, uint64_t lpn);
  // Program the partly filled open page now (padding), as Flush / FUA / shutdown require.
  // Nothing buffered: {0, start}. `done` covers this program only; programs returned earlier by
  // write() may still be in flight (a Flush command waits for those too).
  WriteResult flush(SimTime start);
  void trim(uint64_t lpn);
  const FtlStats& stats() const { return stats_; }
  uint64_t free_blocks() const;  // free superblocks, all dies
  const SlcCache& slc() const { return slc_; }
  uint64_t read_ahead_senses() const { return read_ahead_senses_; }

  // --- introspection (tests, diagnostics) ---
  uint32_t free_blocks(uint32_t channel, uint32_t die) const;
  struct Location {
    enum Kind { kUnmapped, kBuffered, kNand } kind = kUnmapped;
    PhysPage page{};    // kNand: the plane page holding the unit
    uint32_t unit = 0;  // kNand: which mapping unit of that page
  };
  Location locate(uint64_t lpn) const;
  struct BlockInfo {
    enum State { kFree, kOpen, kClosed, kCollecting } state = kFree;  // kCollecting: GC victim
    uint32_t valid_units = 0;
  };
  BlockInfo block_info(uint32_t channel, uint32_t die, uint32_t block) const;  // a superblock
  uint64_t logical_units() const { return logical_units_; }
  uint32_t units_per_program() const { return group_units_; }  // page_bytes*planes/unit
  // kSteady: untimed host units written after the sequential fill, and the WA of the last
  // settling window (the stats are reset to zero after preconditioning).
  uint64_t precondition_host_units() const { return precond_host_units_; }
  // Host memory of the two maps (not the per-superblock arrays, O(blocks)).
  uint64_t map_memory_bytes() const { return fwd_.memory_bytes() + rev_.memory_bytes(); }
  uint64_t mapped_lpns() const { return fwd_.size(); }  // forward entries held
  double precondition_write_amplification() const { return precond_wa_; }

 private:
  // uint32 entries in anonymous MAP_NORESERVE memory: zero until written, and pages never
  // written cost no RAM. Move-only.
  // A table of uint32 that reads 0 where nothing was written, with memory proportional to
  // the 4 KiB chunks written: a directory of chunk pointers. Reading an untouched range costs
  // no page fault (an mmap'd zero page would, once per 1024 entries: most of a random-read
  // run over an 800 GB drive's map).
  class LazyTable {
   public:
    static constexpr unsigned kChunkShift = 10;  // 1024 entries = 4 KiB per chunk
    LazyTable() = default;
    explicit LazyTable(uint64_t entries) : dir_((entries >> kChunkShift) + 1) {}
    uint32_t get(uint64_t i) const {
      const uint32_t* c = dir_[i >> kChunkShift].get();
      return c ? c[i & kMask] : 0;
    }
    void set(uint64_t i, uint32_t v) {
      auto& c = dir_[i >> kChunkShift];
      if (!c) {
        if (v == 0) return;
        c = std::make_unique<uint32_t[]>(kMask + 1);  // value-initialised: zeroes
        ++chunks_;
      }
      c[i & kMask] = v;
    }
    // t[i] reads like a uint32_t and assigns through set().
    class Ref {
     public:
      Ref(LazyTable& t, uint64_t i) : t_(t), i_(i) {}
      operator uint32_t() const { return t_.get(i_); }  // NOLINT(google-explicit-constructor)
      Ref& operator=(uint32_t v) {
        t_.set(i_, v);
        return *this;
      }
     private:
      LazyTable& t_;
      uint64_t i_;
    };
    Ref operator[](uint64_t i) { return Ref(*this, i); }
    uint32_t operator[](uint64_t i) const { return get(i); }
    uint64_t memory_bytes() const {
      return dir_.size() * sizeof(dir_[0]) + chunks_ * (kMask + 1) * sizeof(uint32_t);
    }
   private:
    static constexpr uint64_t kMask = (uint64_t{1} << kChunkShift) - 1;
    std::vector<std::unique_ptr<uint32_t[]>> dir_;
    uint64_t chunks_ = 0;
  };

  struct DieState {
    uint32_t channel = 0, die = 0;  // NAND address of this round-robin slot
    uint32_t open = 0;              // open superblock (global index) or kNoBlock
    uint32_t next_group = 0;        // next page of the open superblock
    uint32_t free_count = 0, free_head = 0, free_tail = 0;  // FIFO of free superblocks
    uint32_t min_hint = 0;          // no closed superblock has fewer valid units than this
    uint32_t victim = 0;            // superblock GC is emptying (kNoBlock: none)
    uint32_t cursor = 0;            // next unit of the victim to look at
  };

  static constexpr uint32_t kNoBlock = UINT32_MAX;
  static constexpr uint64_t kNoLpn = UINT64_MAX;

  void accept(uint64_t lpn);
  WriteResult program_buffer(SimTime start, bool timed);
  uint32_t pick_die(SimTime start, bool timed);
  void collect(uint32_t d, SimTime start, bool timed);
  bool gc_group(uint32_t d, SimTime start, bool timed);
  void erase_victim(uint32_t d, uint32_t sb, SimTime start, bool timed);
  uint64_t take_group(uint32_t d);
  void finish_group(uint32_t d);
  void invalidate(uint64_t lpn);
  void drop_unit(uint64_t p);
  void place(uint64_t lpn, uint64_t p);
  uint64_t live_lpn(uint64_t p, bool precond_block) const;
  uint64_t implicit_phys(uint64_t lpn) const;
  PhysPage page_of(uint64_t p) const;
  uint32_t lowest_block(uint32_t d);
  void bucket_link(uint32_t sb, uint32_t valid);
  void bucket_unlink(uint32_t sb, uint32_t valid);
  uint32_t pop_free(uint32_t d);
  void push_free(uint32_t d, uint32_t sb);
  void precondition_sequential();
  void precondition_steady();
  void read_ahead(SimTime start, uint64_t lpn);
  bool nand_location(uint64_t lpn, uint64_t* p) const;  // false: buffered, unmapped, trimmed

  NandArray& nand_;
  FtlConfig cfg_;
  NandGeometry g_;
  uint32_t unit_bytes_ = 0;     // mapping unit
  uint32_t units_per_page_ = 0;
  uint32_t group_units_ = 0;    // G: units per multi-plane program
  uint32_t sb_units_ = 0;       // units per superblock = pages_per_block * G
  uint32_t dies_ = 0;           // channels * dies_per_channel
  uint64_t logical_units_ = 0;
  uint64_t physical_units_ = 0;
  bool implicit_ = false;       // forward entry 0 = the sequential fill's position
  uint32_t unmapped_ = 0;       // forward entry of a trimmed LPN
  uint64_t precond_groups_ = 0; // page groups the sequential fill wrote

  SparseMap fwd_;  // LPN -> 0 (implicit/unmapped), physical unit + 1, buffer slot, trimmed
  LazyTable rev_;  // physical unit -> LPN + 1, 0 = none (explicitly written superblocks only)
  std::vector<uint32_t> valid_, next_, prev_;  // per superblock; next/prev: bucket or free list
  std::vector<uint8_t> state_, precond_;       // precond_: still holds the sequential fill
  std::vector<uint32_t> bucket_;  // per die x (sb_units+1): closed superblocks by valid count
  std::vector<DieState> die_state_;
  std::vector<uint64_t> host_buf_;  // the open host page group (LPN per slot, kNoLpn = dead)
  uint32_t host_fill_ = 0;
  std::vector<uint64_t> gc_buf_;       // the relocation page group being gathered (G)
  std::vector<uint32_t> gc_finished_;  // victims emptied into it, erased once it is programmed
  uint32_t rr_ = 0;                // next die for a host page group
  uint64_t free_total_ = 0;
  FtlStats stats_;
  uint64_t precond_host_units_ = 0;
  double precond_wa_ = 0.0;
  SlcCache slc_;
  uint64_t last_read_lpn_ = kNoLpn;  // read-ahead: the stream's last LPN
  uint64_t stream_units_ = 0;        // and how many consecutive LPNs led to it
  uint64_t read_ahead_senses_ = 0;
};

}  // namespace pollux::emu::timing
