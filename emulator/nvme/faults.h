// Device-side fault injection for the functional controller: rules that match commands (by
// opcode, namespace, LBA range, count, probability) and make them fail with a chosen status,
// never complete, complete late (a timing model applies the delay), complete in a way a
// buggy device would (twice, with an unknown CID, with a stale phase tag), or succeed without
// doing the work right (no data moved, data moved to another LBA: the silent corruptions a
// data-integrity checker exists to catch); admin rules (status, never complete) hit admin
// commands; and persistent bad blocks, dm-dust style: reads of a bad LBA fail until the LBA is
// written again.
//
// Deterministic: probabilities draw from the injector's own seeded generator, in command
// order. Single-threaded, like the controller that owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emulator/nvme/result.h"
#include "spec/nvme.h"

namespace pollux::emu::nvme {

enum class FaultAction : uint8_t {
  kStatus,             // complete with `status` without executing (no data moves)
  kNeverComplete,      // fetched and held: the host's timeout must deal with it
  kDelay,              // executes normally, completion `delay_ns` later (timed devices)
  kDuplicateCompletion,  // executes; its completion entry is posted twice
  kUnknownCid,         // executes; the entry carries a CID the host never used
  kStalePhase,         // executes; the entry is written with the previous pass's phase tag
  kDropData,           // completes successfully without executing: a read leaves the host's
                       // buffer as it was, a write stores nothing, a flush flushes nothing
  kMisdirect,          // a read or write executes `shift` blocks away from its LBA (wrapping
                       // inside the namespace) and completes successfully
};
inline constexpr int kFaultActions = 8;
// The names fault commands and scenario files use ("status", "never_complete", ...).
const char* to_string(FaultAction a);

struct FaultRule {
  FaultAction action = FaultAction::kStatus;
  // An admin rule matches admin commands with `opcode` (required; kStatus or kNeverComplete
  // only); otherwise only I/O commands match.
  bool admin = false;
  int opcode = -1;          // opcode to match; -1: any I/O command
  uint32_t nsid = 0;        // 0: any namespace
  uint64_t lba_lo = 0;      // commands whose LBA range overlaps [lba_lo, lba_hi] match
  uint64_t lba_hi = ~0ull;  // (commands without an LBA range match any range)
  uint64_t count = 0;       // hits before the rule retires; 0: unlimited
  double probability = 1.0; // of a matching command being hit
  uint16_t status = 0;      // kStatus: the status field (phase bit ignored)
  uint64_t delay_ns = 0;    // kDelay
  uint64_t shift = 0;       // kMisdirect: blocks away; 0: the command's own length (next range)
};

struct FaultHit {
  FaultAction action;
  uint16_t status;
  uint64_t delay_ns;
  uint64_t shift;
};

class FaultInjector {
 public:
  explicit FaultInjector(uint64_t seed = 1) : rng_(seed) {}
  void reseed(uint64_t seed) { rng_.seed(seed); }

  // Returns the rule's id (for remove()). Errors: a probability outside [0, 1], an empty LBA
  // range, a status rule whose status is success.
  Result<int> add(const FaultRule& rule);
  bool remove(int id);
  void clear_rules() { rules_.clear(); }
  bool empty() const { return rules_.empty() && bad_.empty(); }

  // The first armed rule that matches `sqe` (an admin command if `admin`), consuming one hit.
  // Draws from the generator only for rules with probability < 1.
  std::optional<FaultHit> match(const spec::nvme::SubmissionEntry& sqe, bool admin = false);

  // Bad blocks: per namespace, by LBA.
  void add_bad_block(uint32_t nsid, uint64_t lba) { bad_.insert({nsid, lba}); }
  void clear_bad_blocks() { bad_.clear(); }
  // True if [lba, lba + n) holds a bad block (the first is stored in *first).
  bool has_bad_block(uint32_t nsid, uint64_t lba, uint64_t n, uint64_t* first) const;
  // A write heals the blocks it covers.
  void heal(uint32_t nsid, uint64_t lba, uint64_t n);
  size_t bad_blocks() const { return bad_.size(); }

  uint64_t hits() const { return hits_; }
  uint64_t hits(FaultAction a) const { return hits_by_action_[static_cast<int>(a)]; }

 private:
  struct Armed {
    int id;
    FaultRule rule;
    uint64_t hits = 0;
  };
  std::vector<Armed> rules_;
  std::set<std::pair<uint32_t, uint64_t>> bad_;
  std::mt19937_64 rng_;
  int next_id_ = 1;
  uint64_t hits_ = 0;
  uint64_t hits_by_action_[kFaultActions] = {};
};

// "unrecovered_read_error", "write_fault", "namespace_not_ready", "internal_error",
// "data_transfer_error", "aborted_by_request", or "sct:sc" in hex ("2:81") -> status field.
Result<uint16_t> parse_fault_status(const std::string& name);

}  // namespace pollux::emu::nvme
