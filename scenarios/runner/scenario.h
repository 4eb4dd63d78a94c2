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

enum class Pattern { kRandom, kSequential };

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
};

enum class FaultKind {
  kHotRemove, kHotInsert, kFatal, kDisable, kPowerLoss, kReadyDelay, kHostReset,
  kCommand,    // a device fault rule (status, never_complete, delay, duplicate_completion, ...)
  kBadBlocks,  // persistent bad blocks in the workload range
  kClear,      // remove every device fault rule and bad block
};
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
};

struct Scenario {
  std::string name;
  std::string description;
  std::string file;                  // where it came from (for the replay command)
  uint64_t seed = 1;
  std::string time = "virtual";      // virtual | realtime
  std::vector<DeviceSpec> devices;
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
