#include "emulator/timing/media.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace pollux::emu::timing {

OptaneMedia::OptaneMedia(const OptaneProfile& p, std::mt19937_64& rng)
    : p_(p), rng_(rng), busy_(p.units, 0) {}

SimTime OptaneMedia::service(SimTime mean, SimTime stddev) {
  if (stddev == 0) return mean;
  // Box-Muller by hand: std::normal_distribution's algorithm is implementation-defined, and
  // the same seed must give the same run with any standard library.
  const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  const double v = static_cast<double>(mean) + z * static_cast<double>(stddev);
  return static_cast<SimTime>(std::max(v, 0.25 * static_cast<double>(mean)));
}

uint32_t OptaneMedia::partition(uint64_t unit) const {
  const uint64_t chunk = unit * kUnitBytes / p_.interleave_bytes;
  // Mix the bits so strided access patterns still spread over partitions.
  uint64_t h = chunk * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return static_cast<uint32_t>(h % p_.units);
}

SimTime OptaneMedia::read(SimTime start, uint64_t unit) {
  SimTime& busy = busy_[partition(unit)];
  busy = std::max(start, busy) + service(p_.read, p_.read_stddev);
  return busy;
}

Media::WriteOutcome OptaneMedia::write(SimTime start, uint64_t unit) {
  SimTime& busy = busy_[partition(unit)];
  busy = std::max(start, busy) + service(p_.write, p_.write_stddev);
  last_write_done_ = std::max(last_write_done_, busy);
  return {1, busy};
}

NandMedia::NandMedia(const NandGeometry& g, const NandTiming& t, const FtlConfig& c)
    : nand_(g, t), ftl_(c, nand_) {}

Media::WriteOutcome NandMedia::write(SimTime start, uint64_t unit) {
  const Ftl::WriteResult r = ftl_.write(start, unit);
  return {r.units, r.done};
}

Media::WriteOutcome NandMedia::flush(SimTime start) {
  const Ftl::WriteResult r = ftl_.flush(start);
  return {r.units, r.units ? r.done : start};
}

WriteCache::WriteCache(uint64_t capacity_units) : capacity_(capacity_units) {
  heap_.reserve(capacity_units);
}

SimTime WriteCache::admit(SimTime start) {
  const auto later = std::greater<SimTime>();
  while (!heap_.empty() && heap_.front() <= start) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
  }
  SimTime t = start;
  if (heap_.size() + pending_ >= capacity_ && !heap_.empty()) {
    ++stalls_;
    t = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
  }
  ++pending_;
  ++admitted_;
  return t;
}

void WriteCache::release_pending(uint32_t n, SimTime done) {
  const auto later = std::greater<SimTime>();
  n = static_cast<uint32_t>(std::min<uint64_t>(n, pending_));
  pending_ -= n;
  for (uint32_t i = 0; i < n; ++i) {
    heap_.push_back(done);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  last_release_ = std::max(last_release_, done);
  released_ += n;
  if (track_releases_) releases_.push_back(Release{released_, done});
}

void WriteCache::forget_releases_before(uint64_t unit) {
  size_t k = 0;
  while (k + 1 < releases_.size() && releases_[k].upto < unit) ++k;
  if (k) releases_.erase(releases_.begin(), releases_.begin() + static_cast<std::ptrdiff_t>(k));
}

}  // namespace pollux::emu::timing
