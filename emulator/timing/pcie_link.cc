#include "emulator/timing/pcie_link.h"

#include <algorithm>

namespace pollux::emu::timing {

namespace {
// Transfer rate per lane in megatransfers per second and line-code efficiency per generation.
constexpr uint64_t kMtPerSecond[] = {0, 2500, 5000, 8000, 16000, 32000};
}  // namespace

PcieLink::PcieLink(const PcieProfile& p) : p_(p) {
  if (p.generation == 0) return;
  const uint64_t mt = kMtPerSecond[p.generation] * p.lanes * 1'000'000;  // bits/s on the wire
  // Gen 1-2: 8b/10b; gen 3+: 128b/130b.
  bytes_per_second_ = p.generation <= 2 ? mt / 10 : mt * 128 / 130 / 8;
}

SimTime PcieLink::wire_time(uint64_t payload, uint32_t tlp_payload) const {
  if (bytes_per_second_ == 0) return 0;
  const uint64_t tlps = (payload + tlp_payload - 1) / tlp_payload;
  return transfer_time(payload + tlps * p_.tlp_overhead, bytes_per_second_);
}

SimTime PcieLink::dma_read(SimTime now, SimTime start, uint64_t bytes) {
  if (bytes_per_second_ == 0) return start;
  // Requests go up (headers only), completions come down with the data.
  const uint64_t requests = (bytes + p_.max_read_request - 1) / p_.max_read_request;
  const SimTime req_done =
      up_.reserve(now, start, transfer_time(requests * p_.tlp_overhead, bytes_per_second_));
  up_bytes_ += requests * p_.tlp_overhead;
  down_bytes_ += bytes;
  return down_.reserve(now, req_done + p_.dma_read_latency, wire_time(bytes, p_.max_payload));
}

SimTime PcieLink::dma_write(SimTime now, SimTime start, uint64_t bytes) {
  if (bytes_per_second_ == 0) return start;
  up_bytes_ += bytes;
  return up_.reserve(now, start, wire_time(bytes, p_.max_payload)) + p_.dma_write_latency;
}

}  // namespace pollux::emu::timing
