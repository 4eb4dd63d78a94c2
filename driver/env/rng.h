// A small, fast pseudo-random generator for hot paths (a benchmark's offsets): SplitMix64
// (Steele, Lea and Flood, 2014; passes BigCrush): 64 bits of state, period 2^64, an add, two
// multiplies and three shift-xors per number (std::mt19937_64 takes ~47 instructions per
// number here and 2.5 KB of state; SPDK's bdevperf uses a xorshift64). Not for anything that
// must be unpredictable.
#pragma once

#include <cstdint>

namespace pollux::env {

class FastRng {
 public:
  explicit FastRng(uint64_t seed = 0) : s_(seed) {}
  void seed(uint64_t seed) { s_ = seed; }

  uint64_t operator()() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0, by multiply-and-shift (Lemire): no division, and no more bias
  // than `% n` (n / 2^64).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>((*this)()) * n) >> 64);
  }

 private:
  uint64_t s_;
};

}  // namespace pollux::env
