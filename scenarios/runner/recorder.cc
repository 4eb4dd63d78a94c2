#include "scenarios/runner/recorder.h"

#include <algorithm>

namespace pollux::scenarios {

Recorder::Recorder(uint64_t run_ns, uint32_t buckets)
    : bucket_ns_(std::max<uint64_t>(1000, (run_ns + buckets - 1) / std::max<uint32_t>(buckets, 1))),
      buckets_(run_ns / bucket_ns_ + 1), bucket_latency_(buckets_.size()) {}

void Recorder::finish() {
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (bucket_latency_[i]) buckets_[i].latency_p99_ns = bucket_latency_[i]->quantile(0.99);
}

size_t Recorder::open_window(uint32_t device, uint64_t from_ns, uint64_t to_ns) {
  windows_.push_back(Window{device, from_ns, to_ns});
  return windows_.size() - 1;
}

bool Recorder::overlaps_window(uint32_t device, uint64_t from, uint64_t to) const {
  for (const Window& w : windows_)
    if ((w.device == device || w.device == kEveryDevice) && w.from_ns <= to && from <= w.to_ns)
      return true;
  return false;
}

void Recorder::completion(uint32_t device, uint64_t submit_ns, uint64_t done_ns, bool ok) {
  const uint64_t latency = done_ns - submit_ns;
  // Runs that overrun their planned end (a drain, a stall) keep their last buckets growing.
  const size_t b = std::min<size_t>(done_ns / bucket_ns_, buckets_.size() - 1);
  Bucket& k = buckets_[b];
  ++ios_;
  ++k.ios;
  if (!ok) {
    ++errors_;
    ++k.errors;
    max_error_latency_ns_ = std::max(max_error_latency_ns_, latency);
    // A fault explains an error when the I/O was in flight during its window: stuck behind a
    // lost completion, an I/O submitted inside the window may fail well after it closed.
    if (!overlaps_window(device, submit_ns, done_ns)) {
      if (errors_outside_++ == 0) first_error_outside_ns_ = done_ns;
    }
    return;
  }
  k.latency_sum_ns += latency;
  k.latency_max_ns = std::max(k.latency_max_ns, latency);
  if (!bucket_latency_[b]) bucket_latency_[b] = std::make_unique<env::LatencyHistogram>();
  bucket_latency_[b]->record(latency);
  all_.record(latency);
  if (!overlaps_window(device, submit_ns, done_ns)) outside_.record(latency);
}

}  // namespace pollux::scenarios
