// The controller's data path between the media and the PCIe link (DMA engines, internal bus,
// buffer memory), one bandwidth per direction. It is what caps sequential bandwidth below the
// link's (a drive rated 2,400 MB/s on a link that carries 3,600): transfers stream through it,
// so it limits throughput without adding its whole transfer time to each command's latency.
#pragma once

#include <cstdint>

#include "emulator/timing/sim_time.h"
#include "emulator/timing/timeline.h"

namespace pollux::emu::timing {

struct DataPathProfile {
  uint64_t read_bytes_per_second = 0;   // media -> host; 0: no limit
  uint64_t write_bytes_per_second = 0;  // host -> media; 0: no limit
};

class DataPath {
 public:
  explicit DataPath(const DataPathProfile& p) : p_(p) {}
  // The path's busy period for `bytes` offered at `start` (at or after `now`): `begin` is
  // when the first byte moves (the link transfer it feeds can start then), `end` when the
  // last has passed. Without a limit, {start, start}.
  struct Slot {
    SimTime begin, end;
  };
  Slot to_host(SimTime now, SimTime start, uint64_t bytes) {
    return reserve(to_host_, p_.read_bytes_per_second, now, start, bytes);
  }
  Slot from_host(SimTime now, SimTime start, uint64_t bytes) {
    return reserve(from_host_, p_.write_bytes_per_second, now, start, bytes);
  }
  const DataPathProfile& profile() const { return p_; }

 private:
  static Slot reserve(Timeline& t, uint64_t rate, SimTime now, SimTime start, uint64_t bytes) {
    if (rate == 0 || bytes == 0) return {start, start};
    const SimTime d = transfer_time(bytes, rate);
    const SimTime end = t.reserve(now, start, d);
    return {end - d, end};
  }
  DataPathProfile p_;
  Timeline to_host_, from_host_;
};

}  // namespace pollux::emu::timing
