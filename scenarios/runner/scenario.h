// A scenario: the topology (emulated devices), the host stack's recovery settings, verified
// workloads on bdevs, a timeline of faults, and the expectations the run must meet.
// Parsed from YAML (scenarios/README.md has the format); every field is checked and an error
// names the field and its line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/nvme/result.h"
#include "scenarios/oracle/oracle.h"

namespace pollux::scenarios {

// emulated: Pollux's timed SSD emulator in the runner's process. qemu: QEMU's NVMe
// controller seen through vfio-pci (the runner runs in the HIL guest, in real time).
enum class DeviceType { kEmulated, kQemu };

struct DeviceSpec {
  int line = 0;                // in the scenario file (0: generated)
  std::string name;            // controller name; its bdev is "<name>n1"
  DeviceType type = DeviceType::kEmulated;
  // qemu: the PCI function ("auto": the Nth NVMe function of the machine, N counting the
  // topology's auto devices), QEMU's id of the device (device_del/device_add; default: name)
  // and the character device on which QEMU's monitor agent takes hot-plug requests.
  std::string traddr = "auto";
  std::string qemu_id;
  std::string monitor = "/dev/ttyS1";
  std::string profile = "p4800x";
  std::string fidelity = "timed";  // timed | rtl
  uint32_t scale_blocks = 0;   // NAND blocks per plane (a smaller drive of the same make); 0: as is
  uint32_t scale_pages = 0;    // with scale_blocks: pages per block too (0: unchanged)
  // NAND state at the start: none (fresh), sequential (full, nothing invalid) or steady (full
  // and randomly overwritten until write amplification settles: GC runs from the first
  // writes; meant for scaled-down drives). "": the profile's.
  std::string precondition;
};

struct HostSpec {
  // Per I/O command; 0: none. Off by default, as SPDK's bdev_nvme (timeout_us = 0): a fixed
  // default either fires on a slow healthy device (gen4-tlc writes take up to ~8 ms at QD 16
  // with 128 KiB) or is too long to matter. Faults that lose a completion require one.
  uint64_t io_timeout_us = 0;
  std::string timeout_action = "reset";  // none | abort | reset
  uint32_t retry_count = 3;        // bdev_nvme retries of retriable statuses
  uint64_t admin_poll_us = 200;    // admin completions, health check, removal probe
  uint64_t hotplug_poll_us = 500;  // the hot-plug poller (0: off; removed devices stay gone)
  uint32_t max_reset_failures = 3;
};

// A fabric topology: the devices are served by an in-process Pollux NVMe-oF target (one
// subsystem per device, nqn.2026-11.io.pollux:<name>) and the host's bdev_nvme reaches it over
// a simulated network (fabric/net's SimNetwork) in virtual time — NVMe/TCP — or over the
// kernel's TCP on loopback behind fabric/net's FaultNetwork (network: kernel; realtime only),
// or over two emulated RoCEv2 NICs on a wire (emulator/rnic), the CM's exchange on the
// simulated network — NVMe/RDMA.
struct FabricLinkSpec {
  // TCP: bandwidth, mtu (segments), loss, rto, jitter and user_timeout are the simulated
  // network's. RDMA: latency (the wire's; default 2 us), loss (per packet) and mtu (the QPs'
  // path MTU: 256-4096, default 4096) only.
  uint64_t latency_ns = 10'000;             // one way
  uint64_t bandwidth_bps = 25'000'000'000;  // per direction
  uint32_t mtu = 1500;
  double loss = 0;  // per segment: retransmitted after an RTO (then 2x, 4x...)
  uint64_t rto_ns = 1'000'000;
  uint64_t jitter_ns = 0;
  uint64_t user_timeout_ns = 50'000'000;  // a partition this long ends the connections
};

// RDMA: the RC QPs' transport timing, on both sides (IBA's QP attributes).
struct FabricNicSpec {
  uint8_t ack_timeout = 8;  // local ACK timeout 4.096 us * 2^t (8: 1.05 ms)
  uint8_t retry_count = 7;  // retransmissions after a timeout or NAK before the QP fails
  uint8_t rnr_retry = 7;    // retries after an RNR NAK (7: for ever)
  // Timed NICs of this profile (emulator/profiles: cx5-100g, cx4lx-25g, or a YAML file):
  // PCIe, pipelines, link rate, cables and switch take their time and the link's latency is
  // theirs; "": functional NICs on a wire of link.latency.
  std::string profile;
  // The hosts' providers push a lone WQE to the NIC with its doorbell (mlx5's BlueFlame;
  // rdma::RnicOptions::push_wqes) instead of the NIC reading every WQE from the ring.
  bool push = false;
};

struct FabricSpec {
  int line = 0;
  std::string transport = "tcp";  // tcp | rdma
  // simulated: SimNetwork, the link below; kernel: real sockets on 127.0.0.x (the link's
  // user_timeout applies; latency, bandwidth, MTU, loss, RTO and jitter are the kernel's).
  std::string network = "simulated";
  FabricLinkSpec link;
  FabricNicSpec nic;     // rdma only
  bool digests = false;  // NVMe/TCP header and data digests (CRC32C)
  uint32_t io_queues = 1;
  // Paths to the target (multipath, failover): the target listens on 10.0.0.1, 10.0.0.2...,
  // one link each; the host's controllers know every path and fail over when a reset fails.
  uint32_t paths = 1;
  uint32_t keep_alive_timeout_ms = 10'000;  // KATO asked for at Connect (0: none)
  uint64_t connect_timeout_ns = 5'000'000;  // a connection's TCP connect + ICReq/ICResp
  // bdev_nvme's recovery knobs (SPDK's *_sec, in time units here): a lost controller is
  // reconnected every reconnect_delay, I/O fails at once after fast_io_fail_timeout (0: never),
  // the controller is given up after ctrlr_loss_timeout (0: the driver's reset-failure rule).
  uint64_t reconnect_delay_ns = 1'000'000;
  uint64_t ctrlr_loss_timeout_ns = 0;
  uint64_t fast_io_fail_timeout_ns = 0;
  // The target core's CPU time per I/O command in virtual time (scenarios/sim's
  // TargetCostModel: one core, busy for what its work costs; the default is its calibration
  // on the SPDK paper's Figure 8); 0: the target takes no time.
  uint64_t target_command_ns = 480;
  // The target's cores: a reactor and a poll group on each, connections spread over them in
  // turn (SPDK's target on N cores), each drive giving every core a queue pair of its own.
  uint32_t target_cores = 1;
};

enum class Pattern { kRandom, kSequential };

// A workload on a logical volume (driver/lvol) instead of the bdev itself: the runner puts an
// lvstore "lvs_<device>" on the bdev (the first lvol workload on it sets the cluster size)
// and one lvol per workload, named after it and sized to its range. The oracle checks the
// lvol's blocks; power loss crashes the host's lvstore (it is loaded again, dirty, when the
// device is back), a hot removal takes it down with the bdev, and at the end every lvstore
// is crashed and loaded again before the final sweep reads the lvols back.
struct LvolSpec {
  bool thin = true;
  uint64_t cluster_bytes = 1 << 20;
  // The lvstore's metadata pages. 0: sized to its lvols (at least 256, one per lvol cluster).
  // SPDK's default is one per cluster of the whole bdev, which on a large drive makes every
  // dirty load read gigabytes: give the bdev's cluster count to see that.
  uint64_t md_pages = 0;
  // Snapshots of the lvol while the workload runs (0: none): one every this long, each named
  // "<workload>.s<N>"; beyond `keep_snapshots` the oldest is deleted, which merges it into
  // the next one (its only clone). Each snapshot freezes the lvol's I/O for its three writes.
  uint64_t snapshot_every_ns = 0;
  uint32_t keep_snapshots = 2;
};

struct WorkloadSpec {
  int line = 0;                   // in the scenario file (0: generated)
  std::string name;
  std::string bdev;               // e.g. "nvme0n1"
  Pattern pattern = Pattern::kRandom;
  uint32_t read_percent = 50;
  uint32_t block_size = 4096;     // bytes per I/O
  uint32_t queue_depth = 8;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 10'000'000;
  uint64_t range_bytes = 8 << 20; // the LBA span used, from LBA 0
  bool verify = true;             // the oracle checks every read and a final sweep
  uint32_t flush_every = 0;       // a Flush after every N writes (0: never)
  std::optional<LvolSpec> lvol;   // on an lvol on `bdev` (see LvolSpec)
};

enum class FaultKind {
  kHotRemove,
  kHotInsert,
  kFatal,
  kDisable,
  kPowerLoss,
  kReadyDelay,
  kHostReset,
  kCommand,    // a device fault rule (status, never_complete, delay, duplicate_completion, ...)
  kBadBlocks,  // persistent bad blocks in the workload range
  kClear,      // remove every device fault rule and bad block
  // Fabric faults (a fabric topology): on the network between host and target, or the target.
  kConnectionDrop,   // every connection reset (RST to both ends)
  kPartition,        // nothing crosses for `duration` (at least user_timeout: connections end)
  kLatency,          // + `latency` one way for `duration`
  kCorruption,       // segments corrupted past TCP's checksum with `rate` for `duration`
  kKeepaliveExpiry,  // the target stops answering for `duration`: the host's KATO fires
  kTargetRestart,    // the target process exits; it is back after `duration`
  // RDMA faults (transport: rdma), on the emulated NICs and their wire.
  kLinkFlap,  // `side`'s link down for `duration` (the NICs retransmit; long: QPs fail)
  kLoss,      // packets lost with `rate` for `duration` (retransmissions in the NIC counters)
  kQpError,   // one of `side`'s connected QPs (`qp`: the n-th by number) fails: to Error
  kNicReset,  // `side`'s NIC is reset (every QP, CQ, MR gone): its driver brings it up again
  kBadRkey,   // the next `count` keyed commands of `device`'s host controller name a wrong rkey
};
constexpr int kFaultKinds = static_cast<int>(FaultKind::kBadRkey) + 1;
bool is_fabric_fault(FaultKind k);
bool is_rdma_fault(FaultKind k);  // needs transport: rdma
const char* to_string(FaultKind k);

enum class TriggerKind { kAt, kAfterIos, kOnState };

struct FaultSpec {
  int line = 0;                  // in the scenario file (0: generated)
  TriggerKind trigger = TriggerKind::kAt;
  uint64_t at_ns = 0;            // kAt: since the start
  uint64_t after_ios = 0;        // kAfterIos: completed I/Os of all workloads
  std::string state;             // kOnState: "controller_init" (the device is enabling)
  uint32_t occurrence = 1;       // kOnState: the Nth time the state is entered
  std::string device;            // target device name (default: the first)
  FaultKind kind = FaultKind::kCommand;
  std::string command_json;      // kCommand: the device fault command (fault_commands.h)
  std::optional<uint64_t> lba_last;  // kCommand with an LBA range: its last LBA
  uint64_t delay_ns = 0;         // kReadyDelay: extra time before CSTS.RDY; kHotRemove:
                                 // re-insert after this long (0: stays out unless kHotInsert)
  uint32_t count = 0;            // kBadBlocks: how many (drawn from the seed)
  uint64_t duration_ns = 0;      // fabric faults that last: partition, latency, corruption,
                                 // keepalive_expiry, target_restart
  double rate = 0;               // kCorruption: probability per segment
  int path = -1;                 // fabric faults: on this path's link only (-1: every link)
  std::string side = "host";     // RDMA faults on a NIC: host | target
  int qp = -1;                   // kQpError: the n-th connected QP (-1: drawn from the seed)
  uint64_t window_ns = 0;        // errors are allowed from the fault to this long after it
                                 // (hot-remove: after the re-insertion); 0: the default
  std::string label;             // shown in the report
};

struct LatencyExpectation {
  double percentile = 99;
  uint64_t max_us = 0;           // 0: not checked
};

struct Expectations {
  bool no_lost_writes = true;        // the oracle finds no violation (reads and final sweep)
  bool errors_only_in_windows = true;
  uint64_t recovery_within_ns = 0;   // first successful I/O after each fault within this; 0: no
  std::vector<LatencyExpectation> latency_outside_faults;
  int devices_at_end = -1;           // attached controllers at the end; -1: not checked
  // The oracle must report at least one violation of each kind (a scenario whose faults
  // corrupt data on purpose); implies no_lost_writes: false.
  std::vector<oracle::ViolationKind> detects;
  uint64_t min_ios = 1;              // successful I/Os, at least
  uint64_t max_errors = ~0ull;       // failed I/Os seen by the workloads, at most
  uint64_t min_errors = 0;           // failed I/Os, at least (a fault meant to fail I/O)
  // Every failed I/O failed within this of its submission (fast_io_fail_timeout at work);
  // 0: not checked.
  uint64_t errors_within_ns = 0;
  // A fabric's packets (RDMA) or segments (TCP) sent again, at least: a fault meant to cost
  // retransmissions, not I/O.
  uint64_t min_retransmissions = 0;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string file;                  // where it came from (for the replay command)
  uint64_t seed = 1;
  std::string time = "virtual";      // virtual | realtime
  std::vector<DeviceSpec> devices;
  std::optional<FabricSpec> fabric;  // the devices behind an NVMe-oF target
  HostSpec host;
  std::vector<WorkloadSpec> workloads;
  std::vector<FaultSpec> faults;
  Expectations expect;
  uint64_t end_ns() const;           // when the last workload ends
};

emu::nvme::Result<Scenario> parse_scenario(std::string_view yaml_text, const std::string& file = "");
emu::nvme::Result<Scenario> load_scenario(const std::string& path);
// Everything that can be known before running (validate.cc): cross-field checks (bdev names
// match devices, faults name devices, unique names), what the emulated drives hold (their
// profiles load; workload ranges and fault LBAs fit them), and a hot_insert whose drive the
// timeline has certainly not removed. parse_scenario() runs it, so `check` and `run` agree.
emu::nvme::Status validate(const Scenario& s);

// "2s", "1.5ms", "20us", "100ns" -> ns.
emu::nvme::Result<uint64_t> parse_duration_ns(std::string_view text);
std::string format_ns(uint64_t ns);  // "1.5ms"

}  // namespace pollux::scenarios
