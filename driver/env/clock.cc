#include "driver/env/clock.h"

#include <x86intrin.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace pollux::env {
namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool cpu_has_invariant_tsc() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    bool constant = false, nonstop = false;
    for (std::string w; words >> w;) {
      constant |= (w == "constant_tsc");
      nonstop |= (w == "nonstop_tsc");
    }
    return constant && nonstop;
  }
  return false;
}

// Measures TSC ticks per second against CLOCK_MONOTONIC over ~20 ms (once per process).
uint64_t calibrate_tsc() {
  const uint64_t ns0 = monotonic_ns();
  const uint64_t tsc0 = __rdtsc();
  uint64_t ns1 = ns0;
  while (ns1 - ns0 < 20'000'000) ns1 = monotonic_ns();
  const uint64_t tsc1 = __rdtsc();
  const double hz = static_cast<double>(tsc1 - tsc0) * 1e9 / static_cast<double>(ns1 - ns0);
  // Round to 100 kHz: calibration noise is larger than that.
  return static_cast<uint64_t>(hz / 1e5 + 0.5) * 100'000;
}

}  // namespace

TscClock::TscClock() {
  if (cpu_has_invariant_tsc()) {
    const uint64_t hz = calibrate_tsc();
    if (hz > 100'000'000) {  // a sane TSC is at least 100 MHz
      tsc_ = true;
      ticks_per_second_ = hz;
    }
  }
}

const TscClock& TscClock::instance() {
  static const TscClock clock;
  return clock;
}

uint64_t TscClock::read() const { return monotonic_ns(); }

bool VirtualClock::set(uint64_t ticks) {
  uint64_t cur = now_.load(std::memory_order_acquire);
  while (ticks >= cur) {
    if (now_.compare_exchange_weak(cur, ticks, std::memory_order_acq_rel)) return true;
  }
  return false;
}

const MonotonicClock& MonotonicClock::instance() {
  static const MonotonicClock clock;
  return clock;
}

uint64_t MonotonicClock::read() const { return monotonic_ns(); }

const Clock& system_clock() { return TscClock::instance(); }

}  // namespace pollux::env
