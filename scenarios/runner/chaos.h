// Chaos mode: a random but bounded scenario drawn from a seed — devices, verified workloads
// and a fault schedule over every fault class, with intensities — so that the same seed
// always gives the same scenario (and, run in virtual time, the same run).
#pragma once

#include <cstdint>

#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {

struct ChaosOptions {
  uint64_t seed = 1;
  uint64_t duration_ns = 20'000'000;
  uint32_t max_faults = 6;
  // A fabric topology (the drives behind an NVMe-oF/TCP target over a simulated network):
  // fabric faults are drawn too, with the device faults that apply behind a target.
  bool fabric = false;
  // With fabric: NVMe/RDMA over emulated RoCEv2 NICs instead of NVMe/TCP, and RDMA faults
  // (link flaps, loss, corruption, QPs to Error, a host NIC reset, bad rkeys) drawn.
  bool rdma = false;
  // With fabric: the target's cores; 0: drawn from the seed (one or two).
  uint32_t target_cores = 0;
};

Scenario make_chaos_scenario(const ChaosOptions& o);

}  // namespace pollux::scenarios
