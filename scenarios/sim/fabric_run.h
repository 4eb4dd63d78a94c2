// One perf run over NVMe-oF/RDMA in virtual time (pollux-sim --transport rdma): the timed
// devices behind a Pollux NVMe-oF target on an emulated RoCEv2 NIC (one subsystem per device,
// namespace 1 through the target's bdev_nvme), the host's driver attached over trtype:rdma on
// another NIC of the same wire, the CM's exchange on a SimNetwork — all in one lockstep. The
// host's jobs, metrics and report are run_perf()'s; the trace hash covers the devices, the
// CM's network and the wire's packet decisions.
#pragma once

#include "scenarios/sim/run.h"

namespace pollux::sim {

RunReport run_rdma_perf(const RunSpec& spec);

}  // namespace pollux::sim
