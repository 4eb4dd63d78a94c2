// The command processor: firmware cores that parse each fetched command, split it into 4 KiB
// media operations, and drive data over the link. Given the time a command was fetched, it
// returns the time its completion entry lands in host memory.
#pragma once

#include "emulator/timing/modules.h"
#include "spec/nvme.h"

namespace pollux::emu::timing {

struct ProcessorStats {
  uint64_t reads = 0, writes = 0, flushes = 0, admin = 0, other = 0;
  uint64_t units_read = 0, units_written = 0;
  uint64_t prp_list_fetches = 0;
};

class CommandProcessor final : public sc_core::sc_module {
 public:
  sc_core::sc_port<LinkIf> link;
  sc_core::sc_port<DataPathIf> datapath;
  sc_core::sc_port<MediaIf> media;
  sc_core::sc_port<CacheIf> cache;

  CommandProcessor(sc_core::sc_module_name n, const FirmwareProfile& fw, uint32_t lba_shift,
                   uint32_t page_size);
  // `fetched`: the SQE arrived (the fetch itself is timed by the caller). Returns when the
  // CQE is visible to the host.
  SimTime process(uint16_t sqid, const spec::nvme::SubmissionEntry& sqe, SimTime fetched);
  void set_lba_shift(uint32_t s) { lba_shift_ = s; }
  void set_page_size(uint32_t p) { page_size_ = p; }
  // The namespace's size: a read or write past it is failed by the controller (LBA Out of
  // Range) and never reaches the media.
  void set_capacity_bytes(uint64_t b) { capacity_bytes_ = b; }
  // A write cache with power-loss protection: what it holds is already durable, so Flush and
  // FUA cost the firmware's time only (as on enterprise drives that report VWC = 0).
  void set_cache_protected(bool p) { cache_protected_ = p; }
  const ProcessorStats& stats() const { return stats_; }

 private:
  enum class Dir : uint8_t { kOther, kRead, kWrite };
  SimTime firmware(SimTime start, SimTime cost, Dir dir = Dir::kOther);
  SimTime flush_cache(SimTime t);
  bool in_range(uint64_t slba, uint32_t nlb) const;
  SimTime fetch_prp_list(SimTime t, const spec::nvme::SubmissionEntry& sqe, uint64_t bytes);
  SimTime read(SimTime t, uint64_t slba, uint32_t nlb, const spec::nvme::SubmissionEntry& sqe);
  SimTime write(SimTime t, uint64_t slba, uint32_t nlb, const spec::nvme::SubmissionEntry& sqe);
  FirmwareProfile fw_;
  std::vector<SimTime> cores_;
  std::vector<Dir> core_dir_;  // the direction of each core's last read or write
  uint64_t rng_state_;         // firmware jitter (splitmix64)
  uint32_t lba_shift_;
  uint32_t page_size_;
  uint64_t capacity_bytes_ = ~uint64_t{0};
  bool cache_protected_ = false;
  ProcessorStats stats_;
};

}  // namespace pollux::emu::timing
