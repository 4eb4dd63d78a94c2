// A test bdev with a volatile write cache and a power switch: writes complete into the cache,
// a flush makes everything completed before it durable, and a power cut after the k-th
// command keeps, of what was not yet durable, nothing, everything, or a random fate per
// write: lost, kept whole, or torn block by block (so the cache "evicted" any subset, in any
// order, and multi-block writes tear). Commands after the cut fail until power_on().
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"

namespace pollux::blob::crash {

enum class CutPolicy { kLoseAll, kKeepAll, kTearRandomly };
const char* to_string(CutPolicy p);

class VolatileBdev {
 public:
  // Registers the bdev; the object must outlive it.
  static Result<VolatileBdev*> create(bdev::Manager& mgr, const std::string& name,
                                      uint64_t num_blocks, uint32_t block_size = 512);
  // Cuts power right after command number `after` (1-based) completes; 0: never.
  void arm(uint64_t after, CutPolicy policy, uint64_t seed);
  bool cut() const { return dead_; }
  // Power back: the device holds what survived; the command counter starts again.
  void power_on();
  uint64_t commands() const { return commands_; }
  uint64_t unflushed_blocks_at_cut() const { return lost_candidates_; }

  // The backend's side (internal).
  struct Backend;
  void submit(bdev::BdevIo& io);

 private:
  struct Pending {
    uint64_t lba;
    std::vector<uint8_t> data;  // num blocks * block size
  };
  VolatileBdev(uint64_t blocks, uint32_t bs);
  void power_cut();

  uint32_t bs_;
  std::vector<uint8_t> current_;  // what reads see
  std::vector<uint8_t> durable_;  // what survives a cut
  std::vector<Pending> cache_;    // completed since the last flush, oldest first
  uint64_t commands_ = 0;
  uint64_t cut_after_ = 0;
  CutPolicy policy_ = CutPolicy::kLoseAll;
  std::mt19937_64 rng_;
  bool dead_ = false;
  uint64_t lost_candidates_ = 0;
};

}  // namespace pollux::blob::crash
