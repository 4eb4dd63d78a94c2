// validate(): what a scenario file can be refused for before anything runs (scenario.h).
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "emulator/timing/yaml_section.h"
#include "scenarios/runner/device_profile.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

using emu::nvme::Status;
using emu::timing::yaml::err;

std::string line_of(int line) { return line ? " (line " + std::to_string(line) + ")" : ""; }

std::string bytes(uint64_t b) {
  char g[32];
  std::snprintf(g, sizeof g, "%.1f GiB", static_cast<double>(b) / double(1u << 30));
  return std::string(g) + " (" + std::to_string(b) + " bytes)";
}

// An emulated drive's namespace 1; unknown (nullopt) for a qemu device until it runs.
struct Capacity {
  uint64_t bytes = 0;
  uint32_t block = 512;
};

Status names(const Scenario& s) {
  std::set<std::string> devices, workloads;
  for (const DeviceSpec& d : s.devices) {
    if (!devices.insert(d.name).second) {
      return err("topology.devices: duplicate name '" + d.name + "'" + line_of(d.line));
    }
  }
  for (size_t i = 0; i < s.workloads.size(); ++i) {
    const WorkloadSpec& w = s.workloads[i];
    const std::string at = "workloads[" + std::to_string(i) + "]";
    if (!workloads.insert(w.name).second) {
      return err(at + ".name: duplicate name '" + w.name + "'" + line_of(w.line));
    }
    bool found = false;
    for (const DeviceSpec& d : s.devices) found |= w.bdev == d.name + "n1";
    if (!found) {
      return err(at + ".bdev: '" + w.bdev + "' is no device's bdev (devices' bdevs are <name>n1)" +
                 line_of(w.line));
    }
  }
  // An lvstore owns its bdev: nothing else writes it, and its lvols share one cluster size.
  for (size_t i = 0; i < s.workloads.size(); ++i) {
    const WorkloadSpec& w = s.workloads[i];
    if (!w.lvol) continue;
    const std::string at = "workloads[" + std::to_string(i) + "]";
    if (w.name.size() > 63 || w.name.find('/') != std::string::npos) {
      return err(at + ".name: '" + w.name + "' cannot name an lvol (at most 63 bytes, no '/')" +
                 line_of(w.line));
    }
    for (const WorkloadSpec& o : s.workloads) {
      if (o.bdev != w.bdev) continue;
      if (!o.lvol) {
        return err(at + ".lvol: " + w.bdev + " holds an lvstore, so workload '" + o.name +
                   "' cannot write it directly (give it lvol: too)" + line_of(w.line));
      }
      if (o.lvol->cluster_bytes != w.lvol->cluster_bytes) {
        return err(at + ".lvol.cluster_size: the lvols on " + w.bdev +
                   " share one lvstore and one cluster size (workload '" + o.name +
                   "' asks for another)" + line_of(w.line));
      }
    }
  }
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec& f = s.faults[i];
    if (!f.device.empty() && !devices.count(f.device)) {
      return err("faults[" + std::to_string(i) + "].device: no device '" + f.device + "'" +
                 line_of(f.line));
    }
  }
  return {};
}

// Command faults after which only the host's I/O timeout ends the command (the device holds
// it, or its completion never becomes visible to the host).
bool loses_completions(const std::string& command_json) {
  for (const char* a : {"\"never_complete\"", "\"unknown_cid\"", "\"stale_phase\""}) {
    if (command_json.find(a) != std::string::npos) return true;
  }
  return false;
}

Status timeouts(const Scenario& s) {
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec& f = s.faults[i];
    if (f.kind == FaultKind::kCommand && s.host.io_timeout_us == 0 &&
        loses_completions(f.command_json)) {
      return err("faults[" + std::to_string(i) + "]: only an I/O timeout ends the commands " +
                 "this fault loses: set host.io_timeout_us (e.g. 1000; the default is off, as " +
                 "in SPDK)" + line_of(f.line));
    }
  }
  return {};
}

Status qemu_rules(const Scenario& s) {
  const bool qemu = s.devices.front().type == DeviceType::kQemu;
  for (const DeviceSpec& d : s.devices) {
    if ((d.type == DeviceType::kQemu) != qemu) {
      return err("topology.devices: '" + d.name + "' and '" + s.devices.front().name +
                 "' are of different types (one run drives emulated or qemu devices)");
    }
  }
  if (!qemu) return {};
  if (s.time != "realtime") return err("time: qemu devices run in real time (time: realtime)");
  // QEMU's controller takes no fault rules: hot-plug goes through its monitor, resets are the
  // host's.
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec& f = s.faults[i];
    const std::string at = "faults[" + std::to_string(i) + "]";
    if (f.kind != FaultKind::kHotRemove && f.kind != FaultKind::kHotInsert &&
        f.kind != FaultKind::kHostReset) {
      return err(at + ": '" + to_string(f.kind) + "' needs an emulated device (qemu devices " +
                 "take hot_remove, hot_insert and host_reset)" + line_of(f.line));
    }
    if (f.trigger == TriggerKind::kOnState) {
      return err(at + ".on: needs an emulated device (qemu devices: at or after_ios)" +
                 line_of(f.line));
    }
  }
  return {};
}

// A fabric topology: emulated drives behind the in-process target; fabric faults need one.
Status fabric_rules(const Scenario& s) {
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec& f = s.faults[i];
    const std::string at = "faults[" + std::to_string(i) + "]";
    if (is_fabric_fault(f.kind) && !s.fabric) {
      return err(at + ": '" + to_string(f.kind) + "' is a fabric fault: it needs topology.fabric" +
                 (is_rdma_fault(f.kind) ? " with transport: rdma" : "") + line_of(f.line));
    }
    const bool rdma = s.fabric && s.fabric->transport == "rdma";
    if (is_rdma_fault(f.kind) && s.fabric && !rdma) {
      return err(at + ": '" + to_string(f.kind) + "' is an RDMA fault: it needs " +
                 "topology.fabric.transport: rdma" + line_of(f.line));
    }
    if (rdma && f.kind == FaultKind::kConnectionDrop) {
      return err(at + ": 'connection_drop' resets NVMe/TCP connections; an RDMA queue has no " +
                 "byte stream to reset (qp_error fails a QP, partition or link_flap cut the " +
                 "links)" + line_of(f.line));
    }
    if (rdma && f.kind == FaultKind::kLatency) {
      return err(at + ": 'latency' adds delay on the simulated TCP network only (the RDMA " +
                 "wire's latency is topology.fabric.link.latency)" + line_of(f.line));
    }
    if (f.kind == FaultKind::kNicReset && f.side == "target") {
      return err(at + ".side: a reset of the target's NIC is not supported yet (the target " +
                 "transport does not open its device again); nic_reset takes side: host" +
                 line_of(f.line));
    }
    if (is_fabric_fault(f.kind) && f.kind != FaultKind::kBadRkey && !f.device.empty()) {
      return err(at + ".device: a fabric fault acts on the fabric (the link and the target), " +
                 "not on one device" + line_of(f.line));
    }
    if (f.path >= 0 && s.fabric && static_cast<uint32_t>(f.path) >= s.fabric->paths) {
      return err(at + ".path: " + std::to_string(f.path) + " (topology.fabric has " +
                 std::to_string(s.fabric->paths) + " path" + (s.fabric->paths == 1 ? "" : "s") +
                 ", numbered from 0)" + line_of(f.line));
    }
  }
  if (!s.fabric && s.expect.min_retransmissions > 0) {
    return err("expect.min_retransmissions: only with topology.fabric (packets or segments " +
               std::string("sent again on the fabric)"));
  }
  if (!s.fabric) return {};
  if (s.fabric->network == "kernel" && s.expect.min_retransmissions > 0) {
    return err("expect.min_retransmissions: not with network: kernel (the kernel's TCP keeps " +
               std::string("its retransmissions to itself)") + line_of(s.fabric->line));
  }
  if (s.fabric->network == "kernel" && s.time != "realtime") {
    return err("topology.fabric.network: kernel sockets run on the wall clock, not in virtual " +
               std::string("time (time: realtime)") + line_of(s.fabric->line));
  }
  for (const DeviceSpec& d : s.devices) {
    if (d.type != DeviceType::kEmulated) {
      return err("topology.fabric: the target serves emulated devices ('" + d.name +
                 "' is not one)" + line_of(s.fabric->line));
    }
  }
  return {};
}

size_t device_of(const Scenario& s, const std::string& name) {
  for (size_t i = 0; i < s.devices.size(); ++i)
    if (s.devices[i].name == name) return i;
  return 0;  // a fault without a device: the first
}

// What the emulated drives hold: their profiles must load, workloads and fault LBAs fit.
Status capacities(const Scenario& s) {
  std::vector<std::optional<Capacity>> cap(s.devices.size());
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const DeviceSpec& d = s.devices[i];
    if (d.type != DeviceType::kEmulated) continue;
    auto p = device_profile(d);
    if (!p) {
      return err("topology.devices[" + std::to_string(i) + "]: " + p.error() + line_of(d.line));
    }
    const auto& ns = p.value().controller.namespaces.at(0);
    cap[i] = Capacity{ns.size_bytes, ns.lba_size};
  }
  for (size_t i = 0; i < s.workloads.size(); ++i) {
    const WorkloadSpec& w = s.workloads[i];
    const std::string at = "workloads[" + std::to_string(i) + "]";
    const auto& c = cap[device_of(s, w.bdev.substr(0, w.bdev.size() - 2))];
    if (!c) continue;
    if (w.block_size % c->block) {
      return err(at + ".block_size: " + std::to_string(w.block_size) + " is not a multiple of " +
                 w.bdev + "'s block size (" + std::to_string(c->block) + ")" + line_of(w.line));
    }
    if (w.range_bytes > c->bytes) {
      return err(at + ".range: " + bytes(w.range_bytes) + " is larger than " + w.bdev + ", " +
                 bytes(c->bytes) + line_of(w.line));
    }
  }
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec& f = s.faults[i];
    const auto& c = cap[device_of(s, f.device)];
    if (!c || !f.lba_last) continue;
    if (const uint64_t blocks = c->bytes / c->block; *f.lba_last >= blocks) {
      return err("faults[" + std::to_string(i) + "].lba: " + std::to_string(*f.lba_last) +
                 " is beyond the device (" + std::to_string(blocks) + " blocks)" + line_of(f.line));
    }
  }
  return {};
}

// A hot_insert needs its drive out. Refused when the timeline certainly leaves it in: no
// hot_remove of that device at all, or — where every hot-plug of the device is triggered by
// `at`, so the order is the file's — none that has it out at the insert's instant (in time
// order; a removal's reinsert_after brings it back). Equal instants, and orders that depend
// on I/O counts or device states, are left to the run, which fails the fault clearly.
Status hot_inserts(const Scenario& s) {
  for (size_t d = 0; d < s.devices.size(); ++d) {
    std::vector<size_t> plug;  // hot_remove and hot_insert faults of device d
    bool timed = true, removed_ever = false;
    for (size_t i = 0; i < s.faults.size(); ++i) {
      const FaultSpec& f = s.faults[i];
      if ((f.kind != FaultKind::kHotRemove && f.kind != FaultKind::kHotInsert) ||
          device_of(s, f.device) != d) {
        continue;
      }
      plug.push_back(i);
      timed &= f.trigger == TriggerKind::kAt;
      removed_ever |= f.kind == FaultKind::kHotRemove;
    }
    std::stable_sort(plug.begin(), plug.end(), [&](size_t a, size_t b) {
      return s.faults[a].at_ns < s.faults[b].at_ns;
    });
    bool present = true;
    constexpr uint64_t kNever = ~0ull;
    uint64_t back_at = kNever;  // when a pending reinsert_after brings it back
    for (size_t k = 0; k < plug.size(); ++k) {
      const FaultSpec& f = s.faults[plug[k]];
      const uint64_t t = f.at_ns;
      if (back_at < t) present = true, back_at = kNever;
      if (f.kind == FaultKind::kHotRemove) {
        present = false;
        back_at = f.delay_ns ? t + f.delay_ns : kNever;
        continue;
      }
      const bool tie = back_at == t ||
                       (k > 0 && s.faults[plug[k - 1]].at_ns == t) ||
                       (k + 1 < plug.size() && s.faults[plug[k + 1]].at_ns == t);
      if (!removed_ever || (timed && present && !tie)) {
        const std::string why = removed_ever ? "no hot_remove has it out at " + format_ns(t)
                                             : "no hot_remove of it";
        return err("faults[" + std::to_string(plug[k]) + "]: hot_insert of " + s.devices[d].name +
                   ", which is present then (" + why + ")" + line_of(f.line));
      }
      present = true;
      back_at = kNever;
    }
  }
  return {};
}

}  // namespace

Status validate(const Scenario& s) {
  if (s.devices.empty()) return err("topology.devices: required (a list of devices)");
  if (Status st = names(s); !st) return st;
  if (Status st = fabric_rules(s); !st) return st;
  if (Status st = qemu_rules(s); !st) return st;
  if (Status st = capacities(s); !st) return st;
  if (Status st = timeouts(s); !st) return st;
  return hot_inserts(s);
}

}  // namespace pollux::scenarios
