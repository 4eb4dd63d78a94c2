// The data-integrity oracle for fault-injection scenarios.
//
// It tracks every write the host issues (per block: generation and a 64-bit content hash),
// checks every read against the set of versions the device may legally return, and after a
// power loss checks that every write that had to be durable (acknowledged before the last
// completed Flush, written with FUA, or any acknowledged write on a power-loss-protected
// device) survived. A read that returns data never written to that block is named: stale
// (an older version of this LBA), lost durable write (after power loss, older than a durable
// version), misdirected (a version of another LBA) or torn/corrupt (nothing known).
//
// Generations are the oracle's write ids (1, 2, ...); generation 0 is the never-written
// state (all zeroes, or the initial content hash given to the constructor).
//
// Time model: the oracle keeps one event counter. Each write records when it was submitted
// and when it completed. Version V of a block is superseded by an acknowledged write W when
// V completed before W was submitted (writes overlapping in time may land in either order,
// so both stay acceptable); a failed write's data may or may not be on the media until a
// later write supersedes it. Reads are checked when they complete and are assumed not to
// overlap a write to the same block that completes meanwhile (as in verify workloads). A read
// that matches one version "resolves" the block: other completed versions stop being
// acceptable for later reads (the device must not flip back), though they still count as
// possible survivors of a power loss.
//
// Not thread-safe; deterministic (no randomness, no clocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pollux::scenarios::oracle {

// 64-bit content hash of one block (never returns ~0).
uint64_t hash_block(const void* data, std::size_t size);

enum class ViolationKind : uint8_t {
  kStale,             // an older (or superseded) version of this LBA
  kLostDurableWrite,  // after power loss: a version older than one that had to be durable
  kMisdirected,       // a version written to another LBA
  kCorrupt,           // torn or corrupt: matches nothing ever written
};
const char* to_string(ViolationKind kind);

struct Violation {
  uint64_t lba = 0;
  ViolationKind kind = ViolationKind::kCorrupt;
  std::vector<uint64_t> expected_generations;  // the acceptable versions (0 = never written)
  std::string expected;                        // e.g. "gen 7 (acked) or gen 9 (in flight)"
  uint64_t found_hash = 0;
  bool found_known = false;    // found_lba/found_generation are meaningful
  uint64_t found_lba = 0;      // where the found content was written
  uint64_t found_generation = 0;
  std::string found;           // e.g. "gen 3 of LBA 7 (older acknowledged version)"

  // "LBA 7: stale: expected gen 9 (acked), found gen 3 of LBA 7 (...)"
  std::string to_string() const;
};

struct Verdict {
  std::vector<Violation> violations;
  bool ok() const { return violations.empty(); }
  explicit operator bool() const { return ok(); }
  std::string to_string() const;  // "ok" or one violation per line
};

struct OracleStats {
  uint64_t writes_begun = 0, writes_acked = 0, writes_failed = 0;
  uint64_t flushes = 0, power_losses = 0;
  uint64_t blocks_read = 0, violations = 0;
  uint64_t tracked_blocks = 0;     // blocks with state (ever written)
  uint64_t tracked_versions = 0;   // versions kept (incl. never-written entries)
  uint64_t writes_in_flight = 0;
  uint64_t known_contents = 0;     // reverse-map entries (hash -> LBA, generation)
};

class Oracle {
 public:
  // Never-written blocks read as zeroes.
  Oracle(uint32_t block_size, uint64_t num_blocks);
  // Never-written blocks read as content with this hash (e.g. a preconditioned device).
  Oracle(uint32_t block_size, uint64_t num_blocks, uint64_t initial_hash);

  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;

  uint32_t block_size() const { return block_size_; }
  uint64_t num_blocks() const { return num_blocks_; }

  // --- host protocol -------------------------------------------------------------------
  // A write was submitted; `data` holds blocks * block_size bytes. Returns its id, which is
  // also the generation of the blocks it writes. Throws std::out_of_range on a bad range.
  uint64_t begin_write(uint64_t lba, uint32_t blocks, const void* data, bool fua = false);
  // The write completed successfully. Throws std::logic_error for an unknown id (including a
  // write that was in flight at a power loss: it can no longer complete).
  void write_acked(uint64_t id);
  // The write completed with an error: for its blocks both the old and the new data stay
  // acceptable until a later acknowledged write. Ids lost in a power loss are ignored.
  void write_failed(uint64_t id);

  // A Flush completed: everything acknowledged before now is durable.
  void flush_acked();
  // Precise form: begin_flush() when the Flush is submitted, flush_acked(token) when it
  // completes; writes acknowledged before the submission become durable.
  uint64_t begin_flush();
  void flush_acked(uint64_t token);

  // Power was lost (and the device recovered). With plp (power-loss protection) every
  // acknowledged write had to survive; without, only flushed and FUA ones. For each block the
  // acceptable versions become: the durable ones plus every later version (acknowledged but
  // not durable, in flight, failed) — any of them may have survived — but nothing older.
  // Writes in flight are lost to the protocol (they never complete).
  void power_loss(bool plp);

  // --- checks --------------------------------------------------------------------------
  // Checks a completed read of `blocks` blocks at `lba`. Never throws on bad data.
  Verdict check_read(uint64_t lba, uint32_t blocks, const void* data);

  // Reads every block ever written (ascending LBA, `read` fills block_size bytes) and
  // checks it: the post-recovery sweep.
  using ReadBlockFn = std::function<void(uint64_t lba, void* buf)>;
  Verdict verify_all(const ReadBlockFn& read);

  // Content that is no version of any block but has a meaning (e.g. the poison a read buffer
  // is filled with before the read: found, it means no data arrived): a violation that finds
  // it says `what` instead of "unknown content". It stays a kCorrupt violation.
  void name_content(const void* block, std::string what);

  // Acceptable generations for reads of `lba` now (ascending; 0 = never written).
  std::vector<uint64_t> acceptable_generations(uint64_t lba) const;

  OracleStats stats() const;

 private:
  static constexpr uint32_t kNil = ~0u;
  static constexpr uint64_t kEmptyKey = ~0ull;
  static constexpr uint64_t kInFlight = ~0ull;

  // Open-addressing uint64 -> T map (linear probing, backward-shift erase). Keys != ~0.
  template <class T>
  class U64Map {
   public:
    struct Slot {
      uint64_t key = kEmptyKey;
      T value{};
    };
    T* find(uint64_t key);
    const T* find(uint64_t key) const;
    T& get(uint64_t key, bool* inserted);
    void erase(uint64_t key);
    void clear();
    std::size_t size() const { return size_; }
    template <class F>
    void for_each(F&& f) {
      for (auto& s : slots_)
        if (s.key != kEmptyKey) f(s.key, s.value);
    }

   private:
    std::size_t home(uint64_t key) const;
    void grow();
    std::vector<Slot> slots_;
    std::size_t size_ = 0;
  };

  enum Status : uint8_t { kStatusInFlight, kStatusAcked, kStatusFailed };
  enum Flags : uint8_t { kFua = 1, kDurable = 2, kSuperseded = 4 };

  struct Version {  // one possible content of one block
    uint64_t gen;
    uint64_t hash;
    uint64_t submit;    // event time
    uint64_t complete;  // event time, kInFlight while in flight
    uint32_t next;      // next version of the same block (pool index) or kNil
    uint8_t status;
    uint8_t flags;
  };
  struct Block {
    uint32_t head = kNil;
    uint8_t after_crash = 0;  // the power-loss rule applied and no write acknowledged since
  };
  struct Write {
    uint64_t lba;
    uint64_t submit;
    uint32_t blocks;
    bool fua;
  };
  struct Known {  // where a content hash was last written
    uint64_t lba;
    uint64_t gen;
  };

  void check_range(uint64_t lba, uint32_t blocks) const;
  Block& block(uint64_t lba);
  uint32_t alloc_version();
  void free_version(uint32_t idx);
  bool durable(const Version& v, bool plp) const;
  void prune(Block& b, bool plp);
  Violation describe(uint64_t lba, uint64_t found, const Block* b) const;
  std::string describe_version(const Version& v) const;

  uint32_t block_size_;
  uint64_t num_blocks_;
  uint64_t initial_hash_;
  uint64_t seq_ = 0;        // event counter
  uint64_t next_id_ = 0;    // last write id handed out
  uint64_t lost_ids_ = 0;   // ids <= this were in flight at a power loss (or earlier)
  uint64_t flush_seq_ = 0;  // writes completed before this event time are durable

  U64Map<Block> blocks_;
  U64Map<Write> writes_;
  U64Map<Known> known_;
  std::vector<std::pair<uint64_t, std::string>> named_;  // content hash -> meaning
  std::vector<Version> pool_;
  uint32_t free_ = kNil;
  uint64_t live_versions_ = 0;
  OracleStats stats_;
};

}  // namespace pollux::scenarios::oracle
