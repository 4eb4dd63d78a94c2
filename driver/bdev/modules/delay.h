// bdev_delay: a virtual bdev that adds latency (SPDK's vbdev_delay, with a distribution
// instead of a fixed delay). Each read (read, compare) or write (write, write_zeroes, unmap,
// compare_and_write) gets a deadline drawn at submission from a distribution with the
// configured average and 99th percentile; its completion from the base is held until the
// deadline passes on the framework clock, then released by a per-channel poller. Other types
// (flush, reset, NVMe passthru) are not delayed. Deterministic under a VirtualClock: the
// random generator of each channel is seeded from the configured seed.
#pragma once

#include <cstdint>
#include <random>

#include "driver/bdev/modules/vbdev.h"

namespace pollux::bdev {

// A latency distribution with a given mean and 99th percentile (µs):
// - p99 == 0 or p99 == avg: constant;
// - avg < p99 <= ~14.96·avg: lognormal (σ = z − sqrt(z² − 2·ln(p99/avg)), μ = ln avg − σ²/2,
//   z = 2.3263, the 99th percentile of N(0,1));
// - ~14.96·avg < p99 <= 50·avg: a two-point mix: 2% at p99, 98% at (avg − 0.02·p99)/0.98;
// - avg == 0: no delay. Anything else (p99 < avg, p99 > 50·avg, negative) is refused.
class LatencyModel {
 public:
  enum class Kind { kNone, kConstant, kLognormal, kTwoPoint };
  static Result<LatencyModel> make(double avg_us, double p99_us);
  LatencyModel() = default;
  // One draw, in µs.
  double draw_us(std::mt19937_64& rng) const;
  Kind kind() const { return kind_; }
  double avg_us() const { return avg_; }
  double p99_us() const { return p99_; }

 private:
  Kind kind_ = Kind::kNone;
  double avg_ = 0, p99_ = 0;
  double mu_ = 0, sigma_ = 0;    // lognormal
  double low_ = 0, high_ = 0;    // two-point
};

struct DelayOptions {
  std::string name;
  std::string base_name;
  double avg_read_us = 0, p99_read_us = 0;
  double avg_write_us = 0, p99_write_us = 0;
  uint64_t seed = 1;  // channel i of the bdev draws from mt19937_64(seed + i)
};

struct DelayStats {
  uint64_t delayed = 0;  // completions held back
  uint64_t held = 0;     // held now
};

class DelayModule final : public VbdevModule {
 public:
  explicit DelayModule(Manager& mgr) : VbdevModule(mgr, "delay") {}
  // Stores the configuration; builds now if the base exists (true) or when it appears
  // (false). Errors: empty names, bad latencies (see LatencyModel), -EEXIST, base claimed.
  Result<bool> create(const DelayOptions& o);
  // Forgets the configuration; held completions are released at once, the bdev unregistered.
  int remove(const std::string& name, event::MsgFn done = nullptr, void* ctx = nullptr);
  Result<DelayStats> stats(const std::string& name);
};

}  // namespace pollux::bdev
