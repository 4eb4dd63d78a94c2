#include "scenarios/runner/scenario.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "common/text.h"
#include "emulator/nvme/faults.h"
#include "emulator/rnic/nic_profile.h"
#include "emulator/timing/yaml_section.h"

namespace pollux::scenarios {
namespace {

using emu::nvme::Error;
using emu::nvme::Result;
using emu::nvme::Status;
using emu::timing::kNs;
using emu::timing::yaml::err;
using emu::timing::yaml::Section;
using emu::timing::yaml::where;

constexpr emu::timing::SimTime kMaxScenarioTime = 3600 * emu::timing::kSec;

// Section::duration reads simulated time (ps); scenarios speak ns.
Status duration_ns(Section& s, const char* key, uint64_t* out) {
  emu::timing::SimTime t = *out * kNs;
  POLLUX_TRY(s.duration(key, &t, kMaxScenarioTime));
  *out = t / kNs;
  return {};
}

int line_of(const YAML::Node& n) { return n.Mark().line < 0 ? 0 : n.Mark().line + 1; }

Status parse_device(const YAML::Node& n, size_t i, DeviceSpec* d) {
  const std::string prefix = "topology.devices[" + std::to_string(i) + "]";
  if (!n.IsMap()) return err(prefix + ": expected a mapping" + where(n));
  Section s(n, prefix);
  d->line = line_of(n);
  d->name = "nvme" + std::to_string(i);
  POLLUX_TRY(s.string("name", &d->name));
  std::string type = "emulated";
  POLLUX_TRY(s.string("type", &type));
  if (type == "qemu") {
    d->type = DeviceType::kQemu;
    d->profile = "qemu";  // what reports show in the profile column
    d->qemu_id = d->name;
    POLLUX_TRY(s.string("traddr", &d->traddr));
    POLLUX_TRY(s.string("qemu_id", &d->qemu_id));
    POLLUX_TRY(s.string("monitor", &d->monitor));
    if (d->traddr.empty() || d->qemu_id.empty() || d->monitor.empty()) {
      return err(prefix + ": traddr, qemu_id and monitor must not be empty" + where(n));
    }
    // What describes an emulated drive has no meaning here: refused by unknown_keys().
    return s.unknown_keys();
  }
  if (type != "emulated") {
    return err(prefix + ".type: '" + type + "' (expected emulated or qemu)" + where(n["type"]));
  }
  POLLUX_TRY(s.string("profile", &d->profile));
  POLLUX_TRY(s.string("fidelity", &d->fidelity));
  POLLUX_TRY(s.uint("scale_blocks", 1, 1u << 20, &d->scale_blocks));
  POLLUX_TRY(s.uint("scale_pages", 1, 1u << 16, &d->scale_pages));
  if (d->scale_pages && !d->scale_blocks) {
    return err(prefix + ".scale_pages: only with scale_blocks" + where(n["scale_pages"]));
  }
  POLLUX_TRY(s.string("precondition", &d->precondition));
  if (!d->precondition.empty() && d->precondition != "none" && d->precondition != "sequential" &&
      d->precondition != "steady") {
    return err(prefix + ".precondition: '" + d->precondition +
               "' (expected none, sequential or steady)" + where(n["precondition"]));
  }
  if (d->fidelity != "timed" && d->fidelity != "rtl") {
    return err(prefix + ".fidelity: '" + d->fidelity + "' (expected timed or rtl: a scenario " +
               "runs in virtual time)" + where(n["fidelity"]));
  }
  return s.unknown_keys();
}

// A number in [lo, hi] ("0.01"); absent: unchanged.
Status real(Section& s, const YAML::Node& n, const std::string& field, const char* key, double lo,
            double hi, double* out) {
  YAML::Node v = s.take(key);
  if (!v || v.IsNull()) return {};
  const std::string t = v.IsScalar() ? v.Scalar() : "";
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || *end || !(x >= lo && x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    return err(field + "." + key + ": '" + t + "' (expected a number in " + range + ")" + where(v));
  }
  (void)n;
  *out = x;
  return {};
}

// "25Gbps", "100 Mbps", "1e9" (bits per second).
Status bandwidth(Section& s, const std::string& field, uint64_t* out) {
  YAML::Node v = s.take("bandwidth");
  if (!v || v.IsNull()) return {};
  const std::string t = v.IsScalar() ? v.Scalar() : "";
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  std::string unit(end ? end : "");
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 0;
  if (unit.empty() || unit == "bps") scale = 1;
  else if (unit == "Kbps") scale = 1e3;
  else if (unit == "Mbps") scale = 1e6;
  else if (unit == "Gbps") scale = 1e9;
  if (t.empty() || end == t.c_str() || scale == 0 || !(x * scale >= 1e6) || x * scale > 1e12) {
    return err(field + ".bandwidth: '" + t +
               "' (expected bits per second from 1Mbps to 1000Gbps, e.g. 25Gbps)" + where(v));
  }
  *out = static_cast<uint64_t>(x * scale);
  return {};
}

Status parse_fabric_host(const YAML::Node& n, Section& s, const std::string& prefix, FabricSpec* f);

// transport: rdma — the wire (latency, loss, path MTU) and the NICs' QP timing; what only
// the simulated TCP network has is refused by name.
Status parse_rdma_fabric(const YAML::Node& n, Section& s, const std::string& prefix,
                         FabricSpec* f) {
  f->link.latency_ns = 2'000;
  f->link.mtu = 4096;
  std::string network = "simulated";
  POLLUX_TRY(s.string("network", &network));
  if (network != "simulated") {
    return err(prefix + ".network: '" + network + "' not with transport: rdma (the emulated " +
               "NICs' wire runs in the lockstep; the CM's exchange on the simulated network)" +
               where(n["network"]));
  }
  if (YAML::Node l = s.take("link")) {
    const std::string lp = prefix + ".link";
    if (!l.IsMap()) return err(lp + ": expected a mapping" + where(l));
    Section ls(l, lp);
    for (const char* tcp_only : {"bandwidth", "rto", "jitter", "user_timeout"}) {
      if (l[tcp_only]) {
        return err(lp + "." + tcp_only + ": not with transport: rdma (the RDMA wire has " +
                   "latency, loss and mtu; bandwidth and switch timing are not modelled yet)" +
                   where(l[tcp_only]));
      }
    }
    FabricLinkSpec& k = f->link;
    POLLUX_TRY(duration_ns(ls, "latency", &k.latency_ns));
    POLLUX_TRY(real(ls, l, lp, "loss", 0, 0.5, &k.loss));
    POLLUX_TRY(ls.uint("mtu", 256, 4096, &k.mtu));
    if (k.mtu != 256 && k.mtu != 512 && k.mtu != 1024 && k.mtu != 2048 && k.mtu != 4096) {
      return err(lp + ".mtu: " + std::to_string(k.mtu) +
                 " (an IB path MTU: 256, 512, 1024, 2048 or 4096)" + where(l["mtu"]));
    }
    POLLUX_TRY(ls.unknown_keys());
  }
  if (YAML::Node nic = s.take("nic")) {
    const std::string np = prefix + ".nic";
    if (!nic.IsMap()) return err(np + ": expected a mapping" + where(nic));
    Section ns(nic, np);
    // The local ACK timeout as a time: the smallest 4.096 us * 2^t (t 1..31) at least that.
    uint64_t ack = 0;
    POLLUX_TRY(duration_ns(ns, "ack_timeout", &ack));
    if (nic["ack_timeout"]) {
      uint8_t t = 1;
      while (t < 31 && 4096ull << t < ack) ++t;
      if (4096ull << t < ack) {
        return err(np + ".ack_timeout: at most 4.096us * 2^31 (2.4 hours)" + where(nic));
      }
      f->nic.ack_timeout = t;
    }
    if (YAML::Node p = nic["profile"]) {
      POLLUX_TRY(ns.string("profile", &f->nic.profile));
      if (auto loaded = emu::rnic::load_nic_profile(f->nic.profile); !loaded) {
        return err(np + ".profile: " + loaded.error() + where(p));
      }
      if (YAML::Node l = n["link"]; l && l.IsMap() && l["latency"]) {
        return err(prefix + ".link.latency: not with nic.profile (the profile's cables and "
                   "switch set it)" + where(p));
      }
    }
    POLLUX_TRY(ns.boolean("push", &f->nic.push));
    uint32_t retry = f->nic.retry_count, rnr = f->nic.rnr_retry;
    POLLUX_TRY(ns.uint("retry_count", 0, 7, &retry));
    POLLUX_TRY(ns.uint("rnr_retry", 0, 7, &rnr));
    f->nic.retry_count = static_cast<uint8_t>(retry);
    f->nic.rnr_retry = static_cast<uint8_t>(rnr);
    POLLUX_TRY(ns.unknown_keys());
  }
  if (n["digests"]) {
    return err(prefix + ".digests: NVMe/TCP only (each RDMA packet carries its ICRC)" +
               where(n["digests"]));
  }
  if (n["paths"]) {
    uint32_t paths = 1;
    POLLUX_TRY(s.uint("paths", 1, 4, &paths));
    if (paths != 1) {
      return err(prefix + ".paths: one with transport: rdma (multipath over RDMA is not " +
                 "built: one NIC each side)" + where(n["paths"]));
    }
  }
  return parse_fabric_host(n, s, prefix, f);
}

Status parse_fabric(const YAML::Node& n, FabricSpec* f) {
  const std::string prefix = "topology.fabric";
  if (!n.IsMap()) return err(prefix + ": expected a mapping" + where(n));
  Section s(n, prefix);
  f->line = line_of(n);
  POLLUX_TRY(s.string("transport", &f->transport));
  if (f->transport != "tcp" && f->transport != "rdma") {
    return err(prefix + ".transport: '" + f->transport +
               "' (expected tcp — NVMe/TCP over the simulated network — or rdma — NVMe/RDMA " +
               "over emulated RoCEv2 NICs)" + where(n["transport"]));
  }
  if (f->transport == "rdma") return parse_rdma_fabric(n, s, prefix, f);
  if (YAML::Node nic = s.take("nic")) {
    return err(prefix + ".nic: only with transport: rdma (the emulated NICs' QP timing)" +
               where(nic));
  }
  POLLUX_TRY(s.string("network", &f->network));
  if (f->network != "simulated" && f->network != "kernel") {
    return err(prefix + ".network: '" + f->network +
               "' (expected simulated — fabric/net's SimNetwork — or kernel: real sockets on " +
               "loopback)" + where(n["network"]));
  }
  if (YAML::Node l = s.take("link")) {
    const std::string lp = prefix + ".link";
    if (!l.IsMap()) return err(lp + ": expected a mapping" + where(l));
    if (f->network == "kernel") {
      for (const auto& kv : l) {
        const std::string key = kv.first.as<std::string>();
        if (key != "user_timeout") {
          return err(lp + "." + key + ": not with network: kernel (the kernel's loopback has " +
                     "its own latency, bandwidth, MTU and retransmissions; only user_timeout " +
                     "applies)" + where(kv.first));
        }
      }
    }
    Section ls(l, lp);
    FabricLinkSpec& k = f->link;
    POLLUX_TRY(duration_ns(ls, "latency", &k.latency_ns));
    POLLUX_TRY(bandwidth(ls, lp, &k.bandwidth_bps));
    POLLUX_TRY(ls.uint("mtu", 576, 65535, &k.mtu));
    POLLUX_TRY(real(ls, l, lp, "loss", 0, 0.5, &k.loss));
    POLLUX_TRY(duration_ns(ls, "rto", &k.rto_ns));
    POLLUX_TRY(duration_ns(ls, "jitter", &k.jitter_ns));
    POLLUX_TRY(duration_ns(ls, "user_timeout", &k.user_timeout_ns));
    if (k.rto_ns < 1000) return err(lp + ".rto: at least 1us" + where(l));
    if (k.user_timeout_ns < 1'000'000) return err(lp + ".user_timeout: at least 1ms" + where(l));
    POLLUX_TRY(ls.unknown_keys());
  }
  POLLUX_TRY(s.boolean("digests", &f->digests));
  POLLUX_TRY(s.uint("paths", 1, 4, &f->paths));
  return parse_fabric_host(n, s, prefix, f);
}

// The knobs of both transports: queues, keep-alive, connect timeout, bdev_nvme's recovery.
Status parse_fabric_host(const YAML::Node& n, Section& s, const std::string& prefix,
                         FabricSpec* f) {
  POLLUX_TRY(s.uint("io_queues", 1, 64, &f->io_queues));
  uint64_t kato = uint64_t{f->keep_alive_timeout_ms} * 1'000'000;
  POLLUX_TRY(duration_ns(s, "keep_alive_timeout", &kato));
  if (kato % 1'000'000 != 0) {
    return err(prefix + ".keep_alive_timeout: whole milliseconds (KATO's unit)" + where(n));
  }
  f->keep_alive_timeout_ms = static_cast<uint32_t>(kato / 1'000'000);
  POLLUX_TRY(duration_ns(s, "connect_timeout", &f->connect_timeout_ns));
  if (f->connect_timeout_ns < 1'000'000) {
    return err(prefix + ".connect_timeout: at least 1ms" + where(n));
  }
  POLLUX_TRY(duration_ns(s, "reconnect_delay", &f->reconnect_delay_ns));
  POLLUX_TRY(duration_ns(s, "ctrlr_loss_timeout", &f->ctrlr_loss_timeout_ns));
  POLLUX_TRY(duration_ns(s, "fast_io_fail_timeout", &f->fast_io_fail_timeout_ns));
  POLLUX_TRY(duration_ns(s, "target_command_cost", &f->target_command_ns));
  if (f->target_command_ns > 1'000'000) {
    return err(prefix + ".target_command_cost: at most 1ms" + where(n));
  }
  POLLUX_TRY(s.uint("target_cores", 1, 8, &f->target_cores));
  // SPDK's rules for the three knobs (bdev_nvme_attach_controller).
  if (f->ctrlr_loss_timeout_ns != 0) {
    if (f->reconnect_delay_ns == 0 || f->reconnect_delay_ns > f->ctrlr_loss_timeout_ns) {
      return err(prefix + ".reconnect_delay: must be more than 0 and at most ctrlr_loss_timeout" +
                 where(n));
    }
    if (f->fast_io_fail_timeout_ns > f->ctrlr_loss_timeout_ns) {
      return err(prefix + ".fast_io_fail_timeout: at most ctrlr_loss_timeout" + where(n));
    }
  }
  if (f->fast_io_fail_timeout_ns != 0 && f->fast_io_fail_timeout_ns < f->reconnect_delay_ns) {
    return err(prefix + ".fast_io_fail_timeout: at least reconnect_delay" + where(n));
  }
  return s.unknown_keys();
}

Status parse_host(const YAML::Node& n, HostSpec* h) {
  Section s(n, "host");
  POLLUX_TRY(s.check_is_map());
  POLLUX_TRY(s.uint("io_timeout_us", 0, 60'000'000, &h->io_timeout_us));
  POLLUX_TRY(s.string("timeout_action", &h->timeout_action));
  POLLUX_TRY(s.uint("retry_count", 0, 100, &h->retry_count));
  POLLUX_TRY(s.uint("admin_poll_us", 1, 10'000'000, &h->admin_poll_us));
  POLLUX_TRY(s.uint("hotplug_poll_us", 0, 10'000'000, &h->hotplug_poll_us));
  POLLUX_TRY(s.uint("max_reset_failures", 1, 100, &h->max_reset_failures));
  if (h->timeout_action != "none" && h->timeout_action != "abort" &&
      h->timeout_action != "reset") {
    return err("host.timeout_action: '" + h->timeout_action + "' (expected none, abort or reset)" +
               where(n["timeout_action"]));
  }
  return s.unknown_keys();
}

// `lvol: true` or `lvol: {thin: false, cluster_size: 4MiB}`.
Status parse_lvol(const YAML::Node& n, const std::string& workload, WorkloadSpec* w) {
  const std::string prefix = workload + ".lvol";
  LvolSpec l;
  if (n.IsScalar()) {
    if (n.Scalar() == "true") return w->lvol = l, Status{};
    if (n.Scalar() == "false") return {};
    return err(prefix + ": '" + n.Scalar() + "' (expected true, false or a mapping)" + where(n));
  }
  if (!n.IsMap()) return err(prefix + ": expected true, false or a mapping" + where(n));
  Section s(n, prefix);
  POLLUX_TRY(s.boolean("thin", &l.thin));
  POLLUX_TRY(s.size("cluster_size", &l.cluster_bytes));
  if (l.cluster_bytes < 4096 || l.cluster_bytes % 4096 || l.cluster_bytes > (1ull << 30)) {
    return err(prefix + ".cluster_size: " + std::to_string(l.cluster_bytes) +
               " (expected a multiple of 4 KiB up to 1 GiB)" + where(n["cluster_size"]));
  }
  POLLUX_TRY(s.uint("md_pages", 0, 1ull << 30, &l.md_pages));
  POLLUX_TRY(duration_ns(s, "snapshot_every", &l.snapshot_every_ns));
  POLLUX_TRY(s.uint("keep_snapshots", 1, 1000, &l.keep_snapshots));
  POLLUX_TRY(s.unknown_keys());
  w->lvol = l;
  return {};
}

Status parse_workload(const YAML::Node& n, size_t i, WorkloadSpec* w) {
  const std::string prefix = "workloads[" + std::to_string(i) + "]";
  if (!n.IsMap()) return err(prefix + ": expected a mapping" + where(n));
  Section s(n, prefix);
  w->line = line_of(n);
  w->name = "w" + std::to_string(i);
  POLLUX_TRY(s.string("name", &w->name));
  POLLUX_TRY(s.string("bdev", &w->bdev));
  std::string pattern = "random";
  POLLUX_TRY(s.string("pattern", &pattern));
  if (pattern == "random") w->pattern = Pattern::kRandom;
  else if (pattern == "sequential") w->pattern = Pattern::kSequential;
  else return err(prefix + ".pattern: '" + pattern + "' (expected random or sequential)" + where(n["pattern"]));
  POLLUX_TRY(s.uint("read_percent", 0, 100, &w->read_percent));
  uint64_t bs = w->block_size;
  POLLUX_TRY(s.size("block_size", &bs));
  if (bs == 0 || bs > (1u << 20) || bs % 512) {
    return err(prefix + ".block_size: " + std::to_string(bs) +
               " (expected a multiple of 512 up to 1 MiB)" + where(n["block_size"]));
  }
  w->block_size = static_cast<uint32_t>(bs);
  POLLUX_TRY(s.uint("queue_depth", 1, 1024, &w->queue_depth));
  POLLUX_TRY(duration_ns(s, "start", &w->start_ns));
  POLLUX_TRY(duration_ns(s, "duration", &w->duration_ns));
  POLLUX_TRY(s.size("range", &w->range_bytes));
  POLLUX_TRY(s.boolean("verify", &w->verify));
  POLLUX_TRY(s.uint("flush_every", 0, 1u << 30, &w->flush_every));
  if (const YAML::Node l = s.take("lvol"); l && !l.IsNull()) POLLUX_TRY(parse_lvol(l, prefix, w));
  if (w->bdev.empty()) return err(prefix + ".bdev: required" + where(n));
  if (w->duration_ns == 0) return err(prefix + ".duration: must be more than 0" + where(n));
  if (w->range_bytes / w->block_size < w->queue_depth) {
    return err(prefix + ".range: holds fewer I/Os of block_size than queue_depth" + where(n));
  }
  return s.unknown_keys();
}

struct ActionName {
  const char* name;
  FaultKind kind;
};
constexpr ActionName kActions[] = {
    {"hot_remove", FaultKind::kHotRemove}, {"hot_insert", FaultKind::kHotInsert},
    {"fatal", FaultKind::kFatal},          {"disable", FaultKind::kDisable},
    {"power_loss", FaultKind::kPowerLoss}, {"ready_delay", FaultKind::kReadyDelay},
    {"host_reset", FaultKind::kHostReset}, {"bad_blocks", FaultKind::kBadBlocks},
    {"clear", FaultKind::kClear},
    {"connection_drop", FaultKind::kConnectionDrop}, {"partition", FaultKind::kPartition},
    {"latency", FaultKind::kLatency},      {"corruption", FaultKind::kCorruption},
    {"keepalive_expiry", FaultKind::kKeepaliveExpiry},
    {"target_restart", FaultKind::kTargetRestart},
    {"link_flap", FaultKind::kLinkFlap},   {"loss", FaultKind::kLoss},
    {"qp_error", FaultKind::kQpError},     {"nic_reset", FaultKind::kNicReset},
    {"bad_rkey", FaultKind::kBadRkey},
};

// Fabric faults that last a while (`duration` required).
bool lasts(FaultKind k) {
  return k == FaultKind::kPartition || k == FaultKind::kLatency || k == FaultKind::kCorruption ||
         k == FaultKind::kKeepaliveExpiry || k == FaultKind::kTargetRestart ||
         k == FaultKind::kLinkFlap || k == FaultKind::kLoss;
}
constexpr const char* kCommandActions[] = {"status",      "never_complete", "delay",
                                           "duplicate_completion", "unknown_cid", "stale_phase",
                                           "drop_data",   "misdirect"};


int parse_opcode(const std::string& s) {
  if (s == "flush") return 0x00;
  if (s == "write") return 0x01;
  if (s == "read") return 0x02;
  if (s == "write_zeroes") return 0x08;
  if (s == "dsm") return 0x09;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 0);
  return (s.empty() || *end || v < 0 || v > 255) ? -1 : static_cast<int>(v);
}

// The command-level fault fields, turned into the JSON the device's fault commands take.
Status parse_command(Section& s, const YAML::Node& n, const std::string& prefix,
                     const std::string& action, FaultSpec* f) {
  nlohmann::json j{{"cmd", "fault"}, {"action", action}};
  std::string status, opcode, queue;
  POLLUX_TRY(s.string("status", &status));
  POLLUX_TRY(s.string("opcode", &opcode));
  POLLUX_TRY(s.string("queue", &queue));
  if (!queue.empty()) {
    if (queue != "io" && queue != "admin") {
      return err(prefix + ".queue: '" + queue + "' (expected io or admin)" + where(n["queue"]));
    }
    if (queue == "admin" && action != "status" && action != "never_complete") {
      return err(prefix + ".queue: admin commands take status or never_complete" + where(n));
    }
    if (queue == "admin" && opcode.empty()) {
      return err(prefix + ".opcode: required with queue: admin (a number, e.g. 8 for Abort)" +
                 where(n));
    }
    j["queue"] = queue;
  }
  if (action == "misdirect") {
    uint64_t shift = 0;
    POLLUX_TRY(s.uint("shift", 1, 1ull << 48, &shift));
    if (shift) j["shift"] = shift;
  }
  if (action == "status") {
    if (status.empty()) return err(prefix + ".status: required for action status" + where(n));
    auto st = emu::nvme::parse_fault_status(status);
    if (!st) return err(prefix + ".status: " + st.error() + where(n["status"]));
    j["status"] = status;
  } else if (!status.empty()) {
    return err(prefix + ".status: only for action status" + where(n["status"]));
  }
  if (!opcode.empty()) {
    const int op = parse_opcode(opcode);
    if (op < 0) {
      return err(prefix + ".opcode: '" + opcode +
                 "' (expected read, write, flush, write_zeroes, dsm or a number 0-255)" +
                 where(n["opcode"]));
    }
    j["opcode"] = op;
  }
  uint64_t count = 0;
  POLLUX_TRY(s.uint("count", 0, 1ull << 40, &count));
  if (count) j["count"] = count;
  if (YAML::Node p = s.take("probability")) {
    char* end = nullptr;
    const std::string t = p.IsScalar() ? p.Scalar() : "";
    const double v = std::strtod(t.c_str(), &end);
    if (t.empty() || *end || !(v >= 0 && v <= 1)) {
      return err(prefix + ".probability: '" + t + "' (expected a number in [0, 1])" + where(p));
    }
    j["probability"] = v;
  }
  if (YAML::Node l = s.take("lba")) {
    if (!l.IsSequence() || l.size() != 2) {
      return err(prefix + ".lba: expected [first, last]" + where(l));
    }
    uint64_t lo = 0, hi = 0;
    try {
      lo = l[0].as<uint64_t>();
      hi = l[1].as<uint64_t>();
    } catch (const YAML::Exception&) {
      return err(prefix + ".lba: expected two integers" + where(l));
    }
    if (lo > hi) return err(prefix + ".lba: first > last" + where(l));
    j["lba"] = {lo, hi};
    f->lba_last = hi;
  }
  if (action == "delay") {
    POLLUX_TRY(duration_ns(s, "delay", &f->delay_ns));
    if (f->delay_ns < 1000) return err(prefix + ".delay: at least 1us for action delay" + where(n));
    j["delay_us"] = f->delay_ns / 1000;
  }
  f->command_json = json_text(j);
  return {};
}

Status parse_fault(const YAML::Node& n, size_t i, FaultSpec* f) {
  const std::string prefix = "faults[" + std::to_string(i) + "]";
  if (!n.IsMap()) return err(prefix + ": expected a mapping" + where(n));
  f->line = line_of(n);
  Section s(n, prefix);
  int triggers = 0;
  if (n["at"]) {
    ++triggers;
    f->trigger = TriggerKind::kAt;
    POLLUX_TRY(duration_ns(s, "at", &f->at_ns));
  }
  if (n["after_ios"]) {
    ++triggers;
    f->trigger = TriggerKind::kAfterIos;
    POLLUX_TRY(s.uint("after_ios", 1, 1ull << 50, &f->after_ios));
  }
  if (n["on"]) {
    ++triggers;
    f->trigger = TriggerKind::kOnState;
    POLLUX_TRY(s.string("on", &f->state));
    if (f->state != "controller_init" && f->state != "gc") {
      return err(prefix + ".on: '" + f->state + "' (expected controller_init or gc)" +
                 where(n["on"]));
    }
    POLLUX_TRY(s.uint("occurrence", 1, 1000, &f->occurrence));
  }
  if (triggers != 1) {
    return err(prefix + ": exactly one of at, after_ios or on is required" + where(n));
  }
  POLLUX_TRY(s.string("device", &f->device));
  POLLUX_TRY(s.string("label", &f->label));
  POLLUX_TRY(duration_ns(s, "window", &f->window_ns));
  std::string action;
  POLLUX_TRY(s.string("action", &action));
  if (action.empty()) return err(prefix + ".action: required" + where(n));
  bool known = false;
  for (const ActionName& a : kActions) {
    if (action == a.name) {
      f->kind = a.kind;
      known = true;
    }
  }
  for (const char* a : kCommandActions) {
    if (action == a) {
      f->kind = FaultKind::kCommand;
      known = true;
      POLLUX_TRY(parse_command(s, n, prefix, action, f));
    }
  }
  if (!known) {
    std::string list;
    for (const ActionName& a : kActions) list += std::string(list.empty() ? "" : ", ") + a.name;
    for (const char* a : kCommandActions) list += std::string(", ") + a;
    return err(prefix + ".action: '" + action + "' (expected one of: " + list + ")" +
               where(n["action"]));
  }
  if (f->kind == FaultKind::kHotRemove) POLLUX_TRY(duration_ns(s, "reinsert_after", &f->delay_ns));
  if (f->kind == FaultKind::kReadyDelay) {
    POLLUX_TRY(duration_ns(s, "delay", &f->delay_ns));
    if (f->delay_ns == 0) return err(prefix + ".delay: required for ready_delay" + where(n));
  }
  if (f->kind == FaultKind::kBadBlocks) {
    POLLUX_TRY(s.uint("count", 1, 1u << 20, &f->count));
    if (f->count == 0) return err(prefix + ".count: required for bad_blocks" + where(n));
  }
  if (lasts(f->kind)) {
    POLLUX_TRY(duration_ns(s, "duration", &f->duration_ns));
    if (f->duration_ns == 0) {
      return err(prefix + ".duration: required for " + action + " (how long it lasts)" + where(n));
    }
  }
  if (f->kind == FaultKind::kConnectionDrop || f->kind == FaultKind::kPartition ||
      f->kind == FaultKind::kLatency || f->kind == FaultKind::kCorruption) {
    uint32_t path = 0;
    if (n["path"]) {
      POLLUX_TRY(s.uint("path", 0, 3, &path));
      f->path = static_cast<int>(path);
    }
  }
  if (f->kind == FaultKind::kLatency) {
    POLLUX_TRY(duration_ns(s, "latency", &f->delay_ns));
    if (f->delay_ns == 0) {
      return err(prefix + ".latency: required for latency (the one-way delay added)" + where(n));
    }
  }
  if (f->kind == FaultKind::kCorruption || f->kind == FaultKind::kLoss) {
    POLLUX_TRY(real(s, n, prefix, "rate", 0, 1, &f->rate));
    if (f->rate <= 0) {
      return err(prefix + ".rate: required for " + action +
                 " (the probability per segment or packet, in (0, 1])" + where(n));
    }
  }
  if (f->kind == FaultKind::kLinkFlap || f->kind == FaultKind::kQpError ||
      f->kind == FaultKind::kNicReset) {
    POLLUX_TRY(s.string("side", &f->side));
    if (f->side != "host" && f->side != "target") {
      return err(prefix + ".side: '" + f->side + "' (expected host or target: whose NIC)" +
                 where(n["side"]));
    }
  }
  if (f->kind == FaultKind::kQpError && n["qp"]) {
    uint32_t qp = 0;
    POLLUX_TRY(s.uint("qp", 0, 255, &qp));
    f->qp = static_cast<int>(qp);
  }
  if (f->kind == FaultKind::kBadRkey) {
    f->count = 1;
    POLLUX_TRY(s.uint("count", 1, 1000, &f->count));
  }
  if (f->label.empty()) f->label = action;
  return s.unknown_keys();
}

Status parse_expect(const YAML::Node& n, Expectations* e) {
  Section s(n, "expect");
  POLLUX_TRY(s.check_is_map());
  POLLUX_TRY(s.boolean("no_lost_writes", &e->no_lost_writes));
  POLLUX_TRY(s.boolean("errors_only_in_windows", &e->errors_only_in_windows));
  POLLUX_TRY(duration_ns(s, "recovery_within", &e->recovery_within_ns));
  POLLUX_TRY(s.uint("min_ios", 0, 1ull << 50, &e->min_ios));
  POLLUX_TRY(s.uint("max_errors", 0, 1ull << 50, &e->max_errors));
  POLLUX_TRY(s.uint("min_errors", 0, 1ull << 50, &e->min_errors));
  POLLUX_TRY(duration_ns(s, "errors_within", &e->errors_within_ns));
  POLLUX_TRY(s.uint("min_retransmissions", 0, 1ull << 50, &e->min_retransmissions));
  if (YAML::Node d = s.take("detects")) {
    if (!d.IsSequence() || d.size() == 0) {
      return err("expect.detects: expected a list of violation kinds (stale, "
                 "lost_durable_write, misdirected, corrupt)" + where(d));
    }
    for (size_t i = 0; i < d.size(); ++i) {
      const std::string k = d[i].IsScalar() ? d[i].Scalar() : "";
      static const std::pair<const char*, oracle::ViolationKind> kKinds[] = {
          {"stale", oracle::ViolationKind::kStale},
          {"lost_durable_write", oracle::ViolationKind::kLostDurableWrite},
          {"misdirected", oracle::ViolationKind::kMisdirected},
          {"corrupt", oracle::ViolationKind::kCorrupt}};
      bool known = false;
      for (const auto& [name, kind] : kKinds) {
        if (k == name) {
          e->detects.push_back(kind);
          known = true;
        }
      }
      if (!known) {
        return err("expect.detects[" + std::to_string(i) + "]: '" + k +
                   "' (expected stale, lost_durable_write, misdirected or corrupt)" + where(d[i]));
      }
    }
    // Corruption is the point: the oracle must see it, so it is no failure of the run.
    e->no_lost_writes = false;
  }
  uint32_t devices = 0;
  if (n && n["devices_at_end"]) {
    POLLUX_TRY(s.uint("devices_at_end", 0, 64, &devices));
    e->devices_at_end = static_cast<int>(devices);
  }
  if (YAML::Node l = s.take("latency_outside_faults")) {
    if (!l.IsSequence()) return err("expect.latency_outside_faults: expected a list" + where(l));
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string p = "expect.latency_outside_faults[" + std::to_string(i) + "]";
      Section ls(l[i], p);
      POLLUX_TRY(ls.check_is_map());
      LatencyExpectation le;
      uint32_t pct = 99;
      POLLUX_TRY(ls.uint("percentile", 1, 100, &pct));
      le.percentile = pct;
      POLLUX_TRY(ls.uint("max_us", 1, 1ull << 40, &le.max_us));
      if (le.max_us == 0) return err(p + ".max_us: required" + where(l[i]));
      POLLUX_TRY(ls.unknown_keys());
      e->latency_outside_faults.push_back(le);
    }
  }
  return s.unknown_keys();
}

Result<Scenario> parse_root(const YAML::Node& root, const std::string& file) {
  if (!root.IsMap()) return err("scenario: the document must be a mapping");
  Scenario sc;
  sc.file = file;
  Section top(root, "");
  POLLUX_TRY(top.string("name", &sc.name));
  POLLUX_TRY(top.string("description", &sc.description));
  POLLUX_TRY(top.uint("seed", 0, ~0ull, &sc.seed));
  POLLUX_TRY(top.string("time", &sc.time));
  if (sc.time != "virtual" && sc.time != "realtime") {
    return err("time: '" + sc.time + "' (expected virtual or realtime)" + where(root["time"]));
  }
  YAML::Node topo = top.take("topology");
  if (!topo || !topo.IsMap()) return err("topology: required (a mapping with devices)" + where(root));
  Section ts(topo, "topology");
  YAML::Node devs = ts.take("devices");
  if (!devs || !devs.IsSequence() || devs.size() == 0) {
    return err("topology.devices: required (a list of devices)" + where(topo));
  }
  for (size_t i = 0; i < devs.size(); ++i) {
    DeviceSpec d;
    POLLUX_TRY(parse_device(devs[i], i, &d));
    sc.devices.push_back(d);
  }
  if (YAML::Node fab = ts.take("fabric")) {
    FabricSpec f;
    POLLUX_TRY(parse_fabric(fab, &f));
    sc.fabric = f;
  }
  POLLUX_TRY(ts.unknown_keys());
  if (YAML::Node h = top.take("host")) POLLUX_TRY(parse_host(h, &sc.host));
  YAML::Node ws = top.take("workloads");
  if (!ws || !ws.IsSequence() || ws.size() == 0) {
    return err("workloads: required (a list of workloads)" + where(root));
  }
  for (size_t i = 0; i < ws.size(); ++i) {
    WorkloadSpec w;
    POLLUX_TRY(parse_workload(ws[i], i, &w));
    sc.workloads.push_back(w);
  }
  if (YAML::Node fs = top.take("faults")) {
    if (!fs.IsSequence()) return err("faults: expected a list" + where(fs));
    for (size_t i = 0; i < fs.size(); ++i) {
      FaultSpec f;
      POLLUX_TRY(parse_fault(fs[i], i, &f));
      sc.faults.push_back(f);
    }
  }
  if (YAML::Node e = top.take("expect")) POLLUX_TRY(parse_expect(e, &sc.expect));
  POLLUX_TRY(top.unknown_keys());
  if (sc.name.empty()) return err("name: required");
  POLLUX_TRY(validate(sc));
  return sc;
}

}  // namespace

bool is_fabric_fault(FaultKind k) {
  return k == FaultKind::kConnectionDrop || k == FaultKind::kPartition ||
         k == FaultKind::kLatency || k == FaultKind::kCorruption ||
         k == FaultKind::kKeepaliveExpiry || k == FaultKind::kTargetRestart || is_rdma_fault(k);
}

bool is_rdma_fault(FaultKind k) {
  return k == FaultKind::kLinkFlap || k == FaultKind::kLoss || k == FaultKind::kQpError ||
         k == FaultKind::kNicReset || k == FaultKind::kBadRkey;
}

const char* to_string(FaultKind k) {
  for (const ActionName& a : kActions)
    if (a.kind == k) return a.name;
  return "device_fault";
}

uint64_t Scenario::end_ns() const {
  uint64_t end = 0;
  for (const WorkloadSpec& w : workloads) end = std::max(end, w.start_ns + w.duration_ns);
  return end;
}

Result<Scenario> parse_scenario(std::string_view yaml_text, const std::string& file) {
  if (Status s = emu::timing::yaml::check_utf8(yaml_text); !s) {
    return err("scenario: " + s.error());
  }
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    POLLUX_TRY(emu::timing::yaml::unique_keys(root));
    return parse_root(root, file);
  } catch (const YAML::Exception& e) {
    return err(std::string("scenario: YAML syntax: ") + e.what());
  }
}

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return err(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_scenario(ss.str(), path);
  if (!r) return err(path + ": " + r.error());
  return r;
}

Result<uint64_t> parse_duration_ns(std::string_view text) {
  YAML::Node n(YAML::NodeType::Map);
  n["d"] = std::string(text);
  Section s(n, "");
  uint64_t v = 0;
  POLLUX_TRY(duration_ns(s, "d", &v));
  return v;
}

std::string format_ns(uint64_t ns) {
  char b[32];
  if (ns >= 1'000'000'000 && ns % 1'000'000 == 0) std::snprintf(b, sizeof b, "%gs", ns / 1e9);
  else if (ns >= 1'000'000) std::snprintf(b, sizeof b, "%gms", ns / 1e6);
  else if (ns >= 1'000) std::snprintf(b, sizeof b, "%gus", ns / 1e3);
  else std::snprintf(b, sizeof b, "%luns", static_cast<unsigned long>(ns));
  return b;
}

}  // namespace pollux::scenarios
