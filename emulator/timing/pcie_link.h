// A PCIe link between host and device, one busy-until per direction.
// Upstream (device -> host) carries DMA read requests, posted writes of read data, CQEs and
// MSI-X messages; downstream (host -> device) carries MMIO writes (doorbells) and the
// completions with data that answer the device's reads (SQEs, PRP lists, write data).
// Each transfer is cut into TLPs (max payload / max read request) that carry `tlp_overhead`
// bytes of framing, sequence number, header and LCRC each.
#pragma once

#include <cstdint>

#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"
#include "emulator/timing/timeline.h"

namespace pollux::emu::timing {

class PcieLink {
 public:
  explicit PcieLink(const PcieProfile& p);
  // Payload bytes per second in one direction (after line encoding, before TLP overhead).
  uint64_t raw_bytes_per_second() const { return bytes_per_second_; }
  // The device reads `bytes` of host memory starting at `start`: returns when the last byte
  // has arrived.
  // `now`: the current simulated time (reservations are made for `start` >= now).
  SimTime dma_read(SimTime now, SimTime start, uint64_t bytes);
  // The device writes `bytes` to host memory: returns when they are visible to the host.
  SimTime dma_write(SimTime now, SimTime start, uint64_t bytes);
  // A host MMIO write (doorbell) issued at `start` reaches the device register.
  SimTime mmio_write(SimTime start) const { return start + p_.mmio_write_latency; }
  uint64_t upstream_bytes() const { return up_bytes_; }
  uint64_t downstream_bytes() const { return down_bytes_; }

 private:
  SimTime wire_time(uint64_t payload, uint32_t tlp_payload) const;
  PcieProfile p_;
  uint64_t bytes_per_second_ = 0;  // 0: ideal link
  Timeline up_, down_;
  uint64_t up_bytes_ = 0, down_bytes_ = 0;
};

}  // namespace pollux::emu::timing
