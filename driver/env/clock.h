// Time for the host stack. Everything that reads time (timed pollers, timeouts, statistics)
// reads it through a Clock, so the whole stack can run in deterministic virtual time when a
// simulator owns the clock.
#pragma once

#include <x86intrin.h>

#include <atomic>
#include <cstdint>

namespace pollux::env {

class Clock {
 public:
  virtual ~Clock() = default;
  // Ticks, monotonic. The invariant TSC is read here, inline: a clock read is on every I/O's
  // path (the bdev layer's submission and completion), and an indirect call to a function
  // that tests which source it uses cost as much again. Any other clock: read().
  uint64_t now() const { return tsc_ ? __rdtsc() : read(); }
  virtual uint64_t ticks_per_second() const = 0;

  uint64_t us_to_ticks(uint64_t us) const {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(us) * ticks_per_second() /
                                 1'000'000);
  }
  uint64_t ns_to_ticks(uint64_t ns) const {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(ns) * ticks_per_second() /
                                 1'000'000'000);
  }
  double ticks_to_seconds(uint64_t ticks) const {
    return static_cast<double>(ticks) / static_cast<double>(ticks_per_second());
  }
  double ticks_to_ns(uint64_t ticks) const { return ticks_to_seconds(ticks) * 1e9; }

 protected:
  virtual uint64_t read() const = 0;
  bool tsc_ = false;  // now() reads the TSC itself (set by TscClock)
};

// The CPU's time-stamp counter when it is invariant (constant_tsc + nonstop_tsc), calibrated
// once against CLOCK_MONOTONIC; otherwise CLOCK_MONOTONIC itself (a vDSO call, no syscall).
class TscClock final : public Clock {
 public:
  static const TscClock& instance();
  uint64_t ticks_per_second() const override { return ticks_per_second_; }
  bool uses_tsc() const { return tsc_; }
  const char* source() const { return tsc_ ? "tsc" : "clock_monotonic"; }

 private:
  TscClock();
  uint64_t read() const override;  // CLOCK_MONOTONIC: the TSC is not invariant
  uint64_t ticks_per_second_ = 1'000'000'000;
};

// CLOCK_MONOTONIC in nanoseconds (1 tick = 1 ns), for code that counts time in ns on a real
// device (the scenario engine in a HIL guest, where the TSC may not be invariant).
class MonotonicClock final : public Clock {
 public:
  static const MonotonicClock& instance();
  uint64_t ticks_per_second() const override { return 1'000'000'000; }

 private:
  uint64_t read() const override;
};

// A clock that moves only when told to. Thread-safe: a simulator sets it, reactors read it.
class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(uint64_t ticks_per_second = 1'000'000'000, uint64_t start = 0)
      : ticks_per_second_(ticks_per_second), now_(start) {}
  uint64_t ticks_per_second() const override { return ticks_per_second_; }

  // Time never goes backwards: a smaller value is ignored and false is returned.
  bool set(uint64_t ticks);
  void advance(uint64_t ticks) { now_.fetch_add(ticks, std::memory_order_acq_rel); }
  void advance_us(uint64_t us) { advance(us_to_ticks(us)); }

 private:
  uint64_t read() const override { return now_.load(std::memory_order_acquire); }
  uint64_t ticks_per_second_;
  std::atomic<uint64_t> now_;
};

// The process's real-time clock (TscClock::instance()).
const Clock& system_clock();

}  // namespace pollux::env
