// The event trace of a simulation, folded into a 64-bit hash (a word at a time, FNV-1a's
// xor-multiply with a fold of the high half back down) so two runs can be compared without
// storing them. Optionally kept in full for debugging. (Byte-wise FNV-1a cost ~130 cycles a
// record, a tenth of a simulated I/O.)
#pragma once

#include <cstdint>
#include <cstdio>

#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

enum class TraceKind : uint8_t { kFetch = 1, kComplete = 2, kDoorbell = 3, kFault = 4 };

class Trace {
 public:
  void record(SimTime t, uint32_t device, TraceKind kind, uint32_t a, uint32_t b, uint32_t c) {
    mix(t);
    mix((uint64_t{device} << 8) | static_cast<uint8_t>(kind));
    mix((uint64_t{a} << 32) | b);
    mix(c);
    ++records_;
    if (dump_) std::fprintf(dump_, "%llu %u %u %u %u %u\n", static_cast<unsigned long long>(t),
                            device, static_cast<unsigned>(kind), a, b, c);
  }
  uint64_t hash() const { return hash_; }
  uint64_t records() const { return records_; }
  void dump_to(FILE* f) { dump_ = f; }

 private:
  void mix(uint64_t v) {
    hash_ = (hash_ ^ v) * 0x100000001b3ull;
    hash_ ^= hash_ >> 32;
  }
  uint64_t hash_ = 0xcbf29ce484222325ull;
  uint64_t records_ = 0;
  FILE* dump_ = nullptr;
};

}  // namespace pollux::emu::timing
