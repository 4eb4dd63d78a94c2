// The event trace of a simulation, folded into a 64-bit hash so two runs can be compared
// without storing them. Optionally kept in full for debugging.
//
// The hash is of the events at each instant as a set: the records with one time are each
// hashed and summed (a sum does not depend on their order), and the instant's time, sum and
// count go into the running hash. SystemC orders simultaneous events of different devices by
// its event heap's history, which says nothing about the run: the fast-forward (simulation.h)
// leaves fewer events in that heap and must give the same hash. Words are mixed with FNV-1a's
// xor-multiply and a fold of the high half back down (byte-wise FNV-1a cost ~130 cycles a
// record, a tenth of a simulated I/O).
#pragma once

#include <cstdint>
#include <cstdio>

#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

enum class TraceKind : uint8_t { kFetch = 1, kComplete = 2, kDoorbell = 3, kFault = 4 };

class Trace {
 public:
  void record(SimTime t, uint32_t device, TraceKind kind, uint32_t a, uint32_t b, uint32_t c) {
    if (t != instant_time_) fold_instant();
    instant_time_ = t;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    mix(h, (uint64_t{device} << 8) | static_cast<uint8_t>(kind));
    mix(h, (uint64_t{a} << 32) | b);
    mix(h, c);
    instant_sum_ += h;
    ++instant_records_;
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
  void fold_instant() {
    if (instant_records_ == 0) return;
    mix(hash_, instant_time_);
    mix(hash_, instant_sum_);
    mix(hash_, instant_records_);
    instant_sum_ = instant_records_ = 0;
  }
  static void mix(uint64_t& h, uint64_t v) {
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 32;
  }
  uint64_t hash_ = 0xcbf29ce484222325ull;
  uint64_t records_ = 0;
  SimTime instant_time_ = 0;
  uint64_t instant_sum_ = 0, instant_records_ = 0;  // of instant_time_'s records so far
  FILE* dump_ = nullptr;
};

}  // namespace pollux::emu::timing
