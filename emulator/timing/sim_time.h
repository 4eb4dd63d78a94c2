// Simulated time for the timing models: picoseconds since the simulation started, the same
// resolution as SystemC's default time unit, so an sc_time converts without rounding.
#pragma once

#include <cstdint>

namespace pollux::emu::timing {

using SimTime = uint64_t;  // picoseconds

inline constexpr SimTime kPs = 1;
inline constexpr SimTime kNs = 1000;
inline constexpr SimTime kUs = 1000 * kNs;
inline constexpr SimTime kMs = 1000 * kUs;
inline constexpr SimTime kSec = 1000 * kMs;

// Time to move `bytes` at `bytes_per_second` (rounded up to a whole picosecond). In 64 bits
// when that cannot overflow (transfers under 16 MiB at up to 1 TB/s: every one a command
// makes), a 128-bit division otherwise (~1% of a simulation's time when it was every call).
inline constexpr SimTime transfer_time(uint64_t bytes, uint64_t bytes_per_second) {
  if (bytes_per_second == 0) return 0;
  if (bytes < (uint64_t{1} << 24) && bytes_per_second <= uint64_t{1'000'000'000'000}) {
    return (bytes * kSec + bytes_per_second - 1) / bytes_per_second;
  }
  return static_cast<SimTime>((static_cast<unsigned __int128>(bytes) * kSec + bytes_per_second - 1) /
                              bytes_per_second);
}

}  // namespace pollux::emu::timing
