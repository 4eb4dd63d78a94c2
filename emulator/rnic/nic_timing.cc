#include "emulator/rnic/nic_timing.h"

#include "spec/rnic.h"

namespace pollux::emu::rnic {

SimTime NicTiming::fetch_wqe(SimTime now, SimTime start) {
  return link_.dma_read(now, start, sizeof(spec::rnic::SendWqe)) + p_.nic.wqe_latency;
}

SimTime NicTiming::pushed_wqe(SimTime now) const {
  // Two 64-byte write-combined TLPs behind the doorbell's own.
  const uint64_t bytes = sizeof(spec::rnic::SendWqe) + 2 * uint64_t{p_.pcie.tlp_overhead};
  const uint64_t rate = link_.raw_bytes_per_second();
  return link_.mmio_write(now) + (rate ? timing::transfer_time(bytes, rate) : 0) +
         p_.nic.wqe_latency;
}

void NicTiming::prefetch_recv_wqe(SimTime now) {
  (void)link_.dma_read(now, now, sizeof(spec::rnic::RecvWqe));
}

}  // namespace pollux::emu::rnic
