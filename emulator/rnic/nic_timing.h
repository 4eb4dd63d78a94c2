// When things happen inside one timed RNIC: its PCIe link to host memory (the SSD's
// timing::PcieLink: one timeline per direction, TLP overheads, read round trips) and its
// transmit and receive pipelines (a latency and a per-packet interval each). The functional
// Rnic asks it, at each step of its work, when that step's effect is due; it decides nothing
// itself. Times are picoseconds (timing::SimTime).
//
// The calls reserve resources as they go (loosely timed, as the SSD's modules do): a payload
// read asked for now may be booked for later, behind transfers already on the link.
#pragma once

#include <algorithm>
#include <cstdint>

#include "emulator/rnic/nic_profile.h"
#include "emulator/timing/pcie_link.h"

namespace pollux::emu::rnic {

class NicTiming {
 public:
  explicit NicTiming(const NicProfile& p) : p_(p), link_(p.pcie) {}

  const NicProfile& profile() const { return p_; }
  const timing::PcieLink& pcie() const { return link_; }

  // The host's doorbell store seen at `now` reaches the NIC.
  SimTime doorbell(SimTime now) const { return link_.mmio_write(now); }
  // A send WQE (128 bytes) read from host memory from `start` on, then checked and segmented.
  SimTime fetch_wqe(SimTime now, SimTime start);
  // A send WQE that came with its doorbell (the push window): the MMIO write carries its 128
  // bytes, then it is checked and segmented as a fetched one.
  SimTime pushed_wqe(SimTime now) const;
  // A receive WQE read: its bytes use the link, but the NIC prefetches receive queues, so
  // nothing waits for it.
  void prefetch_recv_wqe(SimTime now);
  // `bytes` of payload read from host memory from `start` on: when the last byte is in.
  SimTime read_payload(SimTime now, SimTime start, uint64_t bytes) {
    return bytes == 0 ? start : link_.dma_read(now, start, bytes);
  }
  // A packet whose data (or header) is ready at `data_ready` goes through the transmit
  // pipeline: when it reaches the MAC.
  SimTime transmit(SimTime data_ready) { return through(tx_free_, data_ready) + p_.nic.tx_latency; }
  // A packet fully received at `arrival` goes through the receive pipeline: when the
  // transport may act on it.
  SimTime receive(SimTime arrival) { return through(rx_free_, arrival) + p_.nic.rx_latency; }
  // `bytes` written to host memory from `now` on (payload, CQE): when the host can see them.
  SimTime write(SimTime now, uint64_t bytes) { return link_.dma_write(now, now, bytes); }

 private:
  // A pipeline takes one packet per interval, in arrival order.
  SimTime through(SimTime& free, SimTime t) {
    const SimTime start = std::max(free, t);
    free = start + p_.nic.packet_interval;
    return start;
  }
  NicProfile p_;
  timing::PcieLink link_;
  SimTime tx_free_ = 0, rx_free_ = 0;
};

}  // namespace pollux::emu::rnic
