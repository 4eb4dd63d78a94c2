#include "emulator/rnic/nic_timing.h"

#include "spec/rnic.h"

namespace pollux::emu::rnic {

SimTime NicTiming::fetch_wqe(SimTime now, SimTime start) {
  return link_.dma_read(now, start, sizeof(spec::rnic::SendWqe)) + p_.nic.wqe_latency;
}

void NicTiming::prefetch_recv_wqe(SimTime now) {
  (void)link_.dma_read(now, now, sizeof(spec::rnic::RecvWqe));
}

}  // namespace pollux::emu::rnic
