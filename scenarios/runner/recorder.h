// What a scenario run saw over time: completions and errors per time bucket, latency inside
// and outside fault windows, and the fault windows themselves (errors are judged by them).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <memory>
#include <vector>

#include "driver/env/histogram.h"

namespace pollux::scenarios {

inline constexpr uint64_t kOpenWindow = std::numeric_limits<uint64_t>::max();
// A window of every device: a fabric fault acts on the link or the target, which carry the
// connections of every controller behind it.
inline constexpr uint32_t kEveryDevice = std::numeric_limits<uint32_t>::max();

struct Window {
  uint32_t device;  // or kEveryDevice
  uint64_t from_ns;
  uint64_t to_ns;  // kOpenWindow until known (a removed device not yet back)
};

struct Bucket {
  uint64_t ios = 0, errors = 0, latency_sum_ns = 0, latency_max_ns = 0;
  uint64_t latency_p99_ns = 0;  // set by Recorder::finish()
};

class Recorder {
 public:
  Recorder(uint64_t run_ns, uint32_t buckets);
  uint64_t bucket_ns() const { return bucket_ns_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Fills each bucket's p99 from its latency histogram (at the end of the run).
  void finish();

  // Returns the window's index (its end can be set later).
  size_t open_window(uint32_t device, uint64_t from_ns, uint64_t to_ns);
  void close_window(size_t index, uint64_t to_ns) { windows_[index].to_ns = to_ns; }
  const Window& window(size_t index) const { return windows_[index]; }
  // An I/O submitted at `from` and completed at `to` overlaps a window of its device (or of
  // every device).
  bool overlaps_window(uint32_t device, uint64_t from, uint64_t to) const;

  // One completed I/O (read, write or flush) of a workload on `device`.
  void completion(uint32_t device, uint64_t submit_ns, uint64_t done_ns, bool ok);

  uint64_t ios() const { return ios_; }
  uint64_t errors() const { return errors_; }
  uint64_t errors_outside_windows() const { return errors_outside_; }
  // First error outside every window (for the report), or 0.
  uint64_t first_error_outside_ns() const { return first_error_outside_ns_; }
  // The longest an I/O took to fail (submission to its failed completion).
  uint64_t max_error_latency_ns() const { return max_error_latency_ns_; }
  const env::LatencyHistogram& latency() const { return all_; }
  const env::LatencyHistogram& latency_outside_faults() const { return outside_; }

 private:
  uint64_t bucket_ns_;
  std::vector<Bucket> buckets_;
  std::vector<std::unique_ptr<env::LatencyHistogram>> bucket_latency_;  // made on first use
  std::vector<Window> windows_;
  env::LatencyHistogram all_, outside_;
  uint64_t ios_ = 0, errors_ = 0, errors_outside_ = 0, first_error_outside_ns_ = 0;
  uint64_t max_error_latency_ns_ = 0;
};

}  // namespace pollux::scenarios
