// Media behind the command processor, one 4 KiB mapping unit at a time, as resource models:
// an operation is given the time it may start and returns the time it completes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "emulator/timing/nand.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

inline constexpr uint32_t kUnitBytes = 4096;

class Media {
 public:
  virtual ~Media() = default;
  virtual SimTime read(SimTime start, uint64_t unit) = 0;
  // Returns when the unit is durable on the media. `units_done` (NAND) reports whether this
  // write completed a program: see WriteOutcome.
  struct WriteOutcome {
    uint32_t units = 1;  // units made durable by this call (0: buffered, durable later)
    SimTime done = 0;
  };
  virtual WriteOutcome write(SimTime start, uint64_t unit) = 0;
  // Make everything accepted so far durable: `units` buffered units were programmed, done by
  // `done` (units 0: nothing was buffered; done = start).
  virtual WriteOutcome flush(SimTime start) = 0;
  virtual void trim(uint64_t unit) = 0;
};

// Zero-latency media (the `null` profile and `media: none`).
class NullMedia final : public Media {
 public:
  SimTime read(SimTime start, uint64_t) override { return start; }
  WriteOutcome write(SimTime start, uint64_t) override { return {1, start}; }
  WriteOutcome flush(SimTime start) override { return {0, start}; }
  void trim(uint64_t) override {}
};

// 3D XPoint-class media: in-place writes (no FTL, no GC), read/write latency with a normal
// jitter, `units` partitions interleaved by address, each busy for one operation at a time.
class OptaneMedia final : public Media {
 public:
  OptaneMedia(const OptaneProfile& p, std::mt19937_64& rng);
  SimTime read(SimTime start, uint64_t unit) override;
  WriteOutcome write(SimTime start, uint64_t unit) override;
  WriteOutcome flush(SimTime start) override { return {0, std::max(start, last_write_done_)}; }
  void trim(uint64_t) override {}

 private:
  SimTime service(SimTime mean, SimTime stddev);
  uint32_t partition(uint64_t unit) const;
  OptaneProfile p_;
  std::mt19937_64& rng_;
  std::vector<SimTime> busy_;
  SimTime last_write_done_ = 0;
};

// NAND through the FTL.
class NandMedia final : public Media {
 public:
  NandMedia(const NandGeometry& g, const NandTiming& t, const FtlConfig& c);
  SimTime read(SimTime start, uint64_t unit) override { return ftl_.read(start, unit); }
  WriteOutcome write(SimTime start, uint64_t unit) override;
  WriteOutcome flush(SimTime start) override;
  void trim(uint64_t unit) override { ftl_.trim(unit); }
  const Ftl& ftl() const { return ftl_; }
  const NandArray& array() const { return nand_; }

 private:
  NandArray nand_;
  Ftl ftl_;
};

// The DRAM write buffer: `capacity` units; a slot is held from when a write enters until its
// unit is durable on the media. Release times are known only once the media programs the
// unit, so slots wait in `pending` until then.
class WriteCache {
 public:
  explicit WriteCache(uint64_t capacity_units);
  bool enabled() const { return capacity_ != 0; }
  // The time a slot is free at or after `start` (takes it).
  SimTime admit(SimTime start);
  // `n` oldest pending slots become free at `done`.
  void release_pending(uint32_t n, SimTime done);
  // When everything admitted so far is durable (all pending must have been released).
  SimTime drained_at() const { return last_release_; }
  // Units admitted so far, and released so far (FIFO: the n oldest pending go first), with
  // the time of each release: which admitted unit became durable when.
  uint64_t admitted() const { return admitted_; }
  struct Release {
    uint64_t upto;  // units [0, upto) are released
    SimTime at;
  };
  const std::vector<Release>& releases() const { return releases_; }
  void forget_releases_before(uint64_t unit);
  void set_track_releases(bool on) { track_releases_ = on; }  // off: releases() stays empty
  uint64_t occupancy_at_last_admit() const { return heap_.size() + pending_; }
  // Units held at `now`: not yet released, or released at a later time (O(held): for a
  // metrics scrape, not the I/O path).
  uint64_t occupancy_at(SimTime now) const {
    return pending_ + static_cast<uint64_t>(std::count_if(heap_.begin(), heap_.end(),
                                                          [now](SimTime t) { return t > now; }));
  }
  uint64_t capacity() const { return capacity_; }
  uint64_t stalls() const { return stalls_; }

 private:
  uint64_t capacity_;
  std::vector<SimTime> heap_;  // min-heap of release times of held slots
  uint64_t pending_ = 0;       // held slots without a release time yet
  SimTime last_release_ = 0;
  uint64_t stalls_ = 0;
  uint64_t admitted_ = 0, released_ = 0;
  std::vector<Release> releases_;
  bool track_releases_ = false;
};

}  // namespace pollux::emu::timing
