// The event trace of a simulation, folded into a 64-bit hash so two runs can be compared
// without storing them. Optionally kept in full for debugging.
//
// The hash is of the events at each instant as a set: records with the same time are folded
// in a canonical order (sorted), not in the order the kernel happened to run them. SystemC
// orders simultaneous events of different devices by its event heap's history, which says
// nothing about the run: the fast-forward (simulation.h) leaves fewer events in that heap and
// must give the same hash. Each record is mixed a word at a time (FNV-1a's xor-multiply with
// a fold of the high half back down; byte-wise FNV-1a cost ~130 cycles a record).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <vector>

#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

enum class TraceKind : uint8_t { kFetch = 1, kComplete = 2, kDoorbell = 3, kFault = 4 };

class Trace {
 public:
  Trace() { instant_.reserve(64); }
  void record(SimTime t, uint32_t device, TraceKind kind, uint32_t a, uint32_t b, uint32_t c) {
    if (t != instant_time_) fold_instant();
    instant_time_ = t;
    instant_.push_back(Record{device, static_cast<uint8_t>(kind), a, b, c});
    ++records_;
    if (dump_) std::fprintf(dump_, "%llu %u %u %u %u %u\n", static_cast<unsigned long long>(t),
                            device, static_cast<unsigned>(kind), a, b, c);
  }
  uint64_t hash() const {
    Trace copy = *this;
    copy.fold_instant();
    return copy.hash_;
  }
  uint64_t records() const { return records_; }
  void dump_to(FILE* f) { dump_ = f; }

 private:
  struct Record {
    uint32_t device;
    uint8_t kind;
    uint32_t a, b, c;
    bool operator<(const Record& o) const {
      return std::tie(device, kind, a, b, c) < std::tie(o.device, o.kind, o.a, o.b, o.c);
    }
  };
  void fold_instant() {
    if (instant_.size() > 1) std::sort(instant_.begin(), instant_.end());
    for (const Record& r : instant_) {
      mix(instant_time_);
      mix((uint64_t{r.device} << 8) | r.kind);
      mix((uint64_t{r.a} << 32) | r.b);
      mix(r.c);
    }
    instant_.clear();
  }
  void mix(uint64_t v) {
    hash_ = (hash_ ^ v) * 0x100000001b3ull;
    hash_ ^= hash_ >> 32;
  }
  uint64_t hash_ = 0xcbf29ce484222325ull;
  uint64_t records_ = 0;
  SimTime instant_time_ = 0;
  std::vector<Record> instant_;  // the records of instant_time_ not folded yet
  FILE* dump_ = nullptr;
};

}  // namespace pollux::emu::timing
