// Scenario files that must be refused, with the field and line named — by `check` exactly as
// by `run` — and reports that survive any name.
#include <gtest/gtest.h>

#include <string>

#include "scenarios/runner/report.h"
#include "scenarios/runner/runner.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {
namespace {

std::string error_of(const std::string& yaml) {
  auto s = parse_scenario(yaml);
  return s ? "" : s.error();
}

// A small valid scenario; each test changes one thing.
constexpr const char* kWorkload = "{name: w, bdev: nvme0n1, duration: 2ms, range: 1MiB}";
std::string base(const std::string& device = "{name: nvme0, profile: p4800x}",
                 const std::string& workload = kWorkload,
                 const std::string& faults = "[{at: 1ms, action: clear, label: x}]") {
  return "name: t\nseed: 3\ntopology:\n  devices: [" + device + "]\nworkloads:\n  - " + workload +
         "\nfaults: " + faults + "\n";
}

TEST(ScenarioInput, TheBaseIsValid) { EXPECT_EQ(error_of(base()), ""); }

TEST(ScenarioInput, TextThatIsNotUtf8IsRefusedWithItsLine) {
  const std::string label = error_of(base("{name: nvme0}", "{bdev: nvme0n1}",
                                          "[{at: 1ms, action: clear, label: \"lab\xbd\"}]"));
  EXPECT_NE(label.find("line 7: byte 0xBD is not UTF-8"), std::string::npos) << label;
  const std::string name = error_of(base("{name: \"nv\xbd\"}", "{bdev: \"nv\xbdn1\"}"));
  EXPECT_NE(name.find("line 4: byte 0xBD is not UTF-8"), std::string::npos) << name;
}

TEST(ScenarioInput, WhatRunWouldRefuseCheckRefusesToo) {
  // An unknown profile failed only when the run built the device.
  EXPECT_NE(error_of(base("{name: nvme0, profile: p9999}")).find("profile 'p9999'"),
            std::string::npos);
  EXPECT_NE(error_of(base("{name: nvme0, profile: gen4-tlc, scale_blocks: 1}")).find("scale_blocks"),
            std::string::npos);
  // A range larger than the drive ran silently on the part that exists.
  const std::string range = error_of(base(
      "{name: nvme0}", "{name: w, bdev: nvme0n1, duration: 2ms, range: 1000000TiB}"));
  EXPECT_NE(range.find("workloads[0].range: 1024000000.0 GiB (1099511627776000000 bytes) is "
                       "larger than nvme0n1, 349.3 GiB (375083606016 bytes) (line 6)"),
            std::string::npos)
      << range;
  // Scaled down: the capacity is the scaled drive's.
  EXPECT_NE(error_of(base("{name: nvme0, profile: gen4-tlc, scale_blocks: 64}",
                          "{name: w, bdev: nvme0n1, duration: 2ms, range: 100GiB}"))
                .find("is larger than nvme0n1"),
            std::string::npos);
  EXPECT_NE(error_of(base("{name: nvme0}", "{bdev: nvme0n1, queue_depth: 8, range: 16KiB}"))
                .find("range: holds fewer I/Os of block_size than queue_depth"),
            std::string::npos);
}

TEST(ScenarioInput, SeedsBeyond64BitsOrNegativeAreRefused) {
  for (const char* seed : {"18446744073709551616", "99999999999999999999999", "-1"}) {
    std::string y = base();
    y.replace(y.find("seed: 3"), 7, std::string("seed: ") + seed);
    EXPECT_NE(error_of(y).find("seed: "), std::string::npos) << seed;
  }
  std::string max = base();
  max.replace(max.find("seed: 3"), 7, "seed: 18446744073709551615");
  EXPECT_EQ(error_of(max), "");
}

TEST(ScenarioInput, KeysGivenTwiceAreRefused) {
  std::string top = base();
  top.replace(top.find("seed: 3"), 7, "seed: 3\nseed: 4");
  EXPECT_NE(error_of(top).find("seed: given twice (line 3)"), std::string::npos) << error_of(top);
  const std::string nested =
      error_of(base("{name: nvme0}", "{bdev: nvme0n1, queue_depth: 2, queue_depth: 4}"));
  EXPECT_NE(nested.find("workloads[0].queue_depth: given twice (line 6)"), std::string::npos)
      << nested;
}

TEST(ScenarioInput, WorkloadNamesAreUnique) {
  const std::string e = error_of(base("{name: nvme0}", "{name: w, bdev: nvme0n1}\n  - {name: w, "
                                                       "bdev: nvme0n1}"));
  EXPECT_NE(e.find("workloads[1].name: duplicate name 'w' (line 7)"), std::string::npos) << e;
}

TEST(ScenarioInput, FaultLbasBeyondTheDriveAreRefused) {
  const std::string e = error_of(base(
      "{name: nvme0, profile: gen4-tlc, scale_blocks: 64}", kWorkload,
      "[{at: 1ms, action: status, status: unrecovered_read_error, lba: [0, 999999999999]}]"));
  EXPECT_NE(e.find("faults[0].lba: 999999999999 is beyond the device ("), std::string::npos) << e;
  EXPECT_EQ(error_of(base("{name: nvme0}", kWorkload,
                          "[{at: 1ms, action: status, status: write_fault, lba: [0, 100]}]")),
            "");
}

TEST(ScenarioInput, AHotInsertOfADriveTheTimelineLeftInIsRefused) {
  auto insert_error = [](const std::string& faults) {
    return error_of(base("{name: nvme0}", kWorkload, faults));
  };
  // Never removed.
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_insert}]")
                .find("faults[0]: hot_insert of nvme0, which is present then (no hot_remove of "
                      "it) (line 7)"),
            std::string::npos);
  EXPECT_NE(insert_error("[{after_ios: 10, action: hot_insert}]").find("no hot_remove of it"),
            std::string::npos);
  // Removed after the insert, or back by then.
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_insert}, {at: 2ms, action: hot_remove}]")
                .find("faults[0]: hot_insert of nvme0, which is present then"),
            std::string::npos);
  EXPECT_NE(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 100us}, "
                         "{at: 1500us, action: hot_insert}]")
                .find("faults[1]: hot_insert"),
            std::string::npos);
  // Out at the insert: fine. An order decided by I/O counts or equal instants: the run's.
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove}, {at: 2ms, action: hot_insert}]"), "");
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 1ms}, "
                         "{at: 1500us, action: hot_insert}]"),
            "");
  EXPECT_EQ(insert_error("[{after_ios: 10, action: hot_remove}, {at: 1ms, action: hot_insert}]"),
            "");
  EXPECT_EQ(insert_error("[{at: 1ms, action: hot_remove, reinsert_after: 1ms}, "
                         "{at: 2ms, action: hot_insert}]"),
            "");
}

TEST(ScenarioInput, AHotInsertOfAPresentDriveFailsTheRun) {
  // The removal waits for I/Os the workload completes only after the insert's instant.
  auto s = parse_scenario(base("{name: nvme0}", "{bdev: nvme0n1, duration: 2ms, range: 1MiB}",
                               "[{after_ios: 1000000, action: hot_remove}, "
                               "{at: 500us, action: hot_insert, label: back}]"));
  ASSERT_TRUE(s) << s.error();
  const RunResult r = run_scenario(s.value(), {});
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.passed);
  bool named = false;
  for (const std::string& f : r.failures) {
    named |= f.find("fault 'back' (line 7): hot_insert of nvme0, which is present") !=
             std::string::npos;
  }
  EXPECT_TRUE(named) << testing::PrintToString(r.failures);
}

// A fabric topology: the devices behind an NVMe-oF/TCP target.
std::string fabric(const std::string& section,
                   const std::string& faults = "[{at: 1ms, action: connection_drop}]",
                   const std::string& device = "{name: nvme0, profile: p4800x}") {
  return "name: t\nseed: 3\ntopology:\n  fabric: " + section + "\n  devices: [" + device +
         "]\nworkloads:\n  - " + kWorkload + "\nfaults: " + faults + "\n";
}

TEST(ScenarioInput, AFabricTopologyParsesWithItsKnobs) {
  auto s = parse_scenario(fabric(
      "{transport: tcp, link: {latency: 20us, bandwidth: 10Gbps, mtu: 9000, loss: 0.001, "
      "rto: 300us, jitter: 2us, user_timeout: 15ms}, digests: true, io_queues: 2, "
      "keep_alive_timeout: 5ms, connect_timeout: 3ms, reconnect_delay: 1ms, "
      "ctrlr_loss_timeout: 100ms, fast_io_fail_timeout: 4ms}",
      "[{at: 1ms, action: partition, duration: 2ms}, {at: 1ms, action: latency, latency: 50us, "
      "duration: 1ms}, {at: 1ms, action: corruption, rate: 0.01, duration: 1ms}, "
      "{at: 1ms, action: keepalive_expiry, duration: 9ms}, {at: 1ms, action: target_restart, "
      "duration: 2ms}, {at: 1ms, action: fatal}]"));
  ASSERT_TRUE(s.ok()) << s.error();
  const FabricSpec& f = *s.value().fabric;
  EXPECT_EQ(f.link.latency_ns, 20'000u);
  EXPECT_EQ(f.link.bandwidth_bps, 10'000'000'000u);
  EXPECT_EQ(f.link.mtu, 9000u);
  EXPECT_DOUBLE_EQ(f.link.loss, 0.001);
  EXPECT_EQ(f.link.user_timeout_ns, 15'000'000u);
  EXPECT_TRUE(f.digests);
  EXPECT_EQ(f.io_queues, 2u);
  EXPECT_EQ(f.keep_alive_timeout_ms, 5u);
  EXPECT_EQ(f.reconnect_delay_ns, 1'000'000u);
  EXPECT_EQ(f.ctrlr_loss_timeout_ns, 100'000'000u);
  EXPECT_EQ(f.fast_io_fail_timeout_ns, 4'000'000u);
  const auto& faults = s.value().faults;
  EXPECT_EQ(faults[0].kind, FaultKind::kPartition);
  EXPECT_EQ(faults[0].duration_ns, 2'000'000u);
  EXPECT_EQ(faults[1].delay_ns, 50'000u);
  EXPECT_DOUBLE_EQ(faults[2].rate, 0.01);
  EXPECT_EQ(faults[4].kind, FaultKind::kTargetRestart);
  EXPECT_EQ(faults[5].kind, FaultKind::kFatal);  // device faults apply behind the target
}

TEST(ScenarioInput, ADriveBehindTheFabricTargetMayBePulledAndReinserted) {
  auto s = parse_scenario(fabric("{}", "[{at: 1ms, action: hot_remove, reinsert_after: 2ms}]"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s.value().faults[0].kind, FaultKind::kHotRemove);
}

TEST(ScenarioInput, FabricFaultsMayNameOnePath) {
  auto s = parse_scenario(fabric("{paths: 2}",
                                 "[{at: 1ms, action: partition, path: 1, "
                                 "duration: 2ms}, {at: 2ms, action: connection_drop}]"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s.value().fabric->paths, 2u);
  EXPECT_EQ(s.value().faults[0].path, 1);
  EXPECT_EQ(s.value().faults[1].path, -1);  // every path
}

TEST(ScenarioInput, BadFabricInputIsRefusedWithTheFieldNamed) {
  auto has = [](const std::string& yaml, const std::string& what) {
    const std::string e = error_of(yaml);
    EXPECT_NE(e.find(what), std::string::npos) << "got: " << e;
  };
  has(fabric("{transport: iwarp}"), "topology.fabric.transport: 'iwarp' (expected tcp");
  has(fabric("{link: {latency: fast}}"), "topology.fabric.link.latency: 'fast' is not a duration");
  has(fabric("{link: {bandwidth: 10GB}}"), "topology.fabric.link.bandwidth: '10GB'");
  has(fabric("{link: {mtu: 100}}"), "topology.fabric.link.mtu: 100 is out of range [576, 65535]");
  has(fabric("{link: {loss: 0.9}}"),
      "topology.fabric.link.loss: '0.9' (expected a number in [0, 0.5])");
  has(fabric("{link: {speed: 1}}"), "topology.fabric.link.speed: unknown key");
  has(fabric("{digest: true}"), "topology.fabric.digest: unknown key");
  has(fabric("{io_queues: 0}"), "topology.fabric.io_queues: 0 is out of range [1, 64]");
  has(fabric("{keep_alive_timeout: 1500us}"), "keep_alive_timeout: whole milliseconds");
  has(fabric("{ctrlr_loss_timeout: 10ms, reconnect_delay: 20ms}"),
      "reconnect_delay: must be more than 0 and at most ctrlr_loss_timeout");
  has(fabric("{ctrlr_loss_timeout: 10ms, reconnect_delay: 1ms, fast_io_fail_timeout: 20ms}"),
      "fast_io_fail_timeout: at most ctrlr_loss_timeout");
  has(fabric("{}", "[{at: 1ms, action: partition}]"), "faults[0].duration: required for partition");
  has(fabric("{}", "[{at: 1ms, action: latency, duration: 1ms}]"), "faults[0].latency: required");
  has(fabric("{}", "[{at: 1ms, action: corruption, duration: 1ms}]"), "faults[0].rate: required");
  has(fabric("{}", "[{at: 1ms, action: corruption, rate: 2, duration: 1ms}]"),
      "faults[0].rate: '2' (expected a number in [0, 1])");
  has(fabric("{}", "[{at: 1ms, action: connection_drop, device: nvme0}]"),
      "faults[0].device: a fabric fault acts on the fabric");
  has(fabric("{}", "[{at: 1ms, action: connection_drop}]", "{name: nvme0, type: qemu}"),
      "the target serves emulated devices");
  has(fabric("{paths: 2}", "[{at: 1ms, action: partition, path: 2, duration: 1ms}]"),
      "faults[0].path: 2 (topology.fabric has 2 paths, numbered from 0)");
  has(fabric("{}", "[{at: 1ms, action: keepalive_expiry, path: 0, duration: 1ms}]"),
      "faults[0].path: unknown key");
  has(fabric("{paths: 5}"), "topology.fabric.paths: 5 is out of range [1, 4]");
  has(fabric("{target_cores: 0}"), "topology.fabric.target_cores: 0 is out of range [1, 8]");
  has(fabric("{target_cores: 9}"), "topology.fabric.target_cores: 9 is out of range [1, 8]");
  // Fabric faults need a fabric.
  has(base("{name: nvme0}", kWorkload, "[{at: 1ms, action: partition, duration: 1ms}]"),
      "faults[0]: 'partition' is a fabric fault: it needs topology.fabric");
}

// The target's cores (poll groups): one unless the scenario says.
TEST(ScenarioInput, TheTargetRunsOnOneCoreUnlessToldOtherwise) {
  EXPECT_EQ(parse_scenario(fabric("{}")).value().fabric->target_cores, 1u);
  EXPECT_EQ(parse_scenario(fabric("{target_cores: 3}")).value().fabric->target_cores, 3u);
}

// The target core's CPU time per command: the Figure 8 calibration unless set; 0 turns it off.
TEST(ScenarioInput, TheTargetCommandCostDefaultsToItsCalibrationAndIsBounded) {
  EXPECT_EQ(parse_scenario(fabric("{}")).value().fabric->target_command_ns, 480u);
  EXPECT_EQ(parse_scenario(fabric("{target_command_cost: 0}")).value().fabric->target_command_ns,
            0u);
  EXPECT_EQ(
      parse_scenario(fabric("{target_command_cost: 2us}")).value().fabric->target_command_ns,
      2000u);
  const std::string e = error_of(fabric("{target_command_cost: 2ms}"));
  EXPECT_NE(e.find("topology.fabric.target_command_cost: at most 1ms"), std::string::npos) << e;
}

// Real sockets: realtime only, and only the knob the kernel's loopback does not set itself.
TEST(ScenarioInput, AKernelSocketFabricNeedsRealtimeAndTakesOnlyTheUserTimeout) {
  auto has = [](const std::string& yaml, const std::string& what) {
    const std::string e = error_of(yaml);
    EXPECT_NE(e.find(what), std::string::npos) << "got: " << e;
  };
  const std::string realtime = "time: realtime\n";
  auto ok = parse_scenario(realtime + fabric("{network: kernel, link: {user_timeout: 20ms}}"));
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok.value().fabric->network, "kernel");
  EXPECT_EQ(ok.value().fabric->link.user_timeout_ns, 20'000'000u);
  EXPECT_EQ(parse_scenario(fabric("{}")).value().fabric->network, "simulated");
  has(fabric("{network: kernel}"),
      "topology.fabric.network: kernel sockets run on the wall clock, not in virtual time "
      "(time: realtime) (line 4)");
  has(realtime + fabric("{network: kernel, link: {latency: 1ms}}"),
      "topology.fabric.link.latency: not with network: kernel");
  has(realtime + fabric("{network: rdma}"), "topology.fabric.network: 'rdma' (expected simulated");
  // --time virtual on a file that says realtime: refused by the run, before anything starts.
  RunOptions o;
  o.time = "virtual";
  const RunResult r = run_scenario(ok.value(), o);
  EXPECT_NE(r.error.find("kernel sockets run on the wall clock: they cannot run in virtual time"),
            std::string::npos)
      << r.error;
}

// Timed NICs by profile: a known one (or a YAML file), and then the profile's cables set the
// latency, not link.latency.
TEST(ScenarioInput, AnRdmaFabricTakesATimedNicProfile) {
  auto s = parse_scenario(fabric("{transport: rdma, nic: {profile: cx5-100g}}", "[]"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s.value().fabric->nic.profile, "cx5-100g");
  EXPECT_EQ(parse_scenario(fabric("{transport: rdma}", "[]")).value().fabric->nic.profile, "");
  const std::string unknown = error_of(fabric("{transport: rdma, nic: {profile: cx9-800g}}", "[]"));
  EXPECT_NE(unknown.find("topology.fabric.nic.profile: "), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("cx9-800g"), std::string::npos) << unknown;
  const std::string both =
      error_of(fabric("{transport: rdma, link: {latency: 2us}, nic: {profile: cx5-100g}}", "[]"));
  EXPECT_NE(both.find("topology.fabric.link.latency: not with nic.profile"), std::string::npos)
      << both;
}

TEST(ScenarioInput, AnRdmaFabricParsesWithItsWireNicsAndFaults) {
  auto s = parse_scenario(
      fabric("{transport: rdma, link: {latency: 3us, loss: 0.001, mtu: 1024}, "
             "nic: {ack_timeout: 500us, retry_count: 3, rnr_retry: 6}, io_queues: 2, "
             "keep_alive_timeout: 20ms, reconnect_delay: 1ms, ctrlr_loss_timeout: 1s, "
             "connect_timeout: 2ms}",
             "[{at: 1ms, action: link_flap, side: target, duration: 2ms}, "
             "{at: 1ms, action: loss, rate: 0.05, duration: 3ms}, "
             "{at: 1ms, action: qp_error, side: target, qp: 2}, {at: 1ms, action: qp_error}, "
             "{at: 1ms, action: nic_reset}, {at: 1ms, action: bad_rkey, device: nvme0, count: 3}, "
             "{at: 1ms, action: partition, duration: 1ms}, "
             "{at: 1ms, action: corruption, rate: 0.01, duration: 1ms}, "
             "{at: 1ms, action: target_restart, duration: 2ms}, {at: 1ms, action: bad_rkey}]"));
  ASSERT_TRUE(s.ok()) << s.error();
  const FabricSpec& f = *s.value().fabric;
  EXPECT_EQ(f.transport, "rdma");
  EXPECT_EQ(f.link.latency_ns, 3'000u);
  EXPECT_DOUBLE_EQ(f.link.loss, 0.001);
  EXPECT_EQ(f.link.mtu, 1024u);
  EXPECT_EQ(f.nic.ack_timeout, 7);  // 4.096 us * 2^7 = 524 us: the first at least 500 us
  EXPECT_EQ(f.nic.retry_count, 3);
  EXPECT_EQ(f.nic.rnr_retry, 6);
  EXPECT_EQ(f.io_queues, 2u);
  const auto& x = s.value().faults;
  EXPECT_EQ(x[0].kind, FaultKind::kLinkFlap);
  EXPECT_EQ(x[0].side, "target");
  EXPECT_EQ(x[0].duration_ns, 2'000'000u);
  EXPECT_EQ(x[1].kind, FaultKind::kLoss);
  EXPECT_DOUBLE_EQ(x[1].rate, 0.05);
  EXPECT_EQ(x[2].kind, FaultKind::kQpError);
  EXPECT_EQ(x[2].qp, 2);
  EXPECT_EQ(x[3].side, "host");  // the defaults: the host's side, a QP drawn from the seed
  EXPECT_EQ(x[3].qp, -1);
  EXPECT_EQ(x[4].kind, FaultKind::kNicReset);
  EXPECT_EQ(x[5].kind, FaultKind::kBadRkey);
  EXPECT_EQ(x[5].count, 3u);
  EXPECT_EQ(x[9].count, 1u);
  // The RDMA defaults: a 2 us wire, 4 KiB path MTU, a 1 ms ACK timeout, seven retries.
  auto d = parse_scenario(fabric("{transport: rdma}", "[{at: 1ms, action: nic_reset}]"));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().fabric->link.latency_ns, 2'000u);
  EXPECT_EQ(d.value().fabric->link.mtu, 4096u);
  EXPECT_EQ(d.value().fabric->nic.ack_timeout, 8);
  EXPECT_EQ(d.value().fabric->nic.retry_count, 7);
}

// What does not apply to RDMA (or only to it) is refused by name, with why.
TEST(ScenarioInput, WhatDoesNotApplyToRdmaIsRefusedWithWhy) {
  auto has = [](const std::string& yaml, const std::string& what) {
    const std::string e = error_of(yaml);
    EXPECT_NE(e.find(what), std::string::npos) << "got: " << e;
  };
  const std::string rdma = "{transport: rdma}";
  has(fabric("{transport: rdma, digests: true}"),
      "topology.fabric.digests: NVMe/TCP only (each RDMA packet carries its ICRC)");
  has(fabric("{transport: rdma, paths: 2}"), "topology.fabric.paths: one with transport: rdma");
  has(fabric("{transport: rdma, link: {bandwidth: 100Gbps}}"),
      "topology.fabric.link.bandwidth: not with transport: rdma");
  has(fabric("{transport: rdma, link: {user_timeout: 10ms}}"),
      "topology.fabric.link.user_timeout: not with transport: rdma");
  has(fabric("{transport: rdma, link: {mtu: 1500}}"),
      "topology.fabric.link.mtu: 1500 (an IB path MTU: 256, 512, 1024, 2048 or 4096)");
  has(fabric("{transport: rdma, nic: {retry_count: 8}}"),
      "topology.fabric.nic.retry_count: 8 is out of range [0, 7]");
  has(fabric("{transport: rdma, nic: {timeout: 1ms}}"), "topology.fabric.nic.timeout: unknown key");
  has(fabric("{transport: tcp, nic: {retry_count: 3}}"),
      "topology.fabric.nic: only with transport: rdma");
  has(fabric(rdma, "[{at: 1ms, action: connection_drop}]"),
      "faults[0]: 'connection_drop' resets NVMe/TCP connections; an RDMA queue has no byte "
      "stream to reset");
  has(fabric(rdma, "[{at: 1ms, action: latency, latency: 5us, duration: 1ms}]"),
      "faults[0]: 'latency' adds delay on the simulated TCP network only");
  has(fabric(rdma, "[{at: 1ms, action: nic_reset, side: target}]"),
      "faults[0].side: a reset of the target's NIC is not supported yet");
  has(fabric(rdma, "[{at: 1ms, action: link_flap, side: switch, duration: 1ms}]"),
      "faults[0].side: 'switch' (expected host or target");
  has(fabric(rdma, "[{at: 1ms, action: link_flap}]"), "faults[0].duration: required for link_flap");
  has(fabric(rdma, "[{at: 1ms, action: loss, duration: 1ms}]"),
      "faults[0].rate: required for loss");
  has(fabric(rdma, "[{at: 1ms, action: qp_error, qp: 300}]"),
      "faults[0].qp: 300 is out of range [0, 255]");
  has(fabric(rdma, "[{at: 1ms, action: qp_error, device: nvme0}]"),
      "faults[0].device: a fabric fault acts on the fabric");
  has(fabric(rdma, "[{at: 1ms, action: bad_rkey, count: 0}]"),
      "faults[0].count: 0 is out of range [1, 1000]");
  // RDMA faults need an RDMA fabric.
  has(fabric("{}", "[{at: 1ms, action: qp_error}]"),
      "faults[0]: 'qp_error' is an RDMA fault: it needs topology.fabric.transport: rdma");
  has(base("{name: nvme0}", kWorkload, "[{at: 1ms, action: nic_reset}]"),
      "faults[0]: 'nic_reset' is a fabric fault: it needs topology.fabric with transport: rdma");
  has(base("{name: nvme0}") + "expect: {min_retransmissions: 5}\n",
      "expect.min_retransmissions: only with topology.fabric");
}

TEST(ScenarioInput, LvolWorkloadsParseAndBadOnesAreRefused) {
  auto ok = parse_scenario(base("{name: nvme0, profile: p4800x}",
                                "{name: v, bdev: nvme0n1, range: 1MiB, "
                                "lvol: {thin: false, cluster_size: 64KiB, md_pages: 300}}"));
  ASSERT_TRUE(ok) << ok.error();
  ASSERT_TRUE(ok.value().workloads[0].lvol.has_value());
  EXPECT_FALSE(ok.value().workloads[0].lvol->thin);
  EXPECT_EQ(ok.value().workloads[0].lvol->cluster_bytes, 64u << 10);
  EXPECT_EQ(ok.value().workloads[0].lvol->md_pages, 300u);
  auto yes = parse_scenario(base("{name: nvme0}", "{name: v, bdev: nvme0n1, lvol: true}"));
  ASSERT_TRUE(yes) << yes.error();
  EXPECT_TRUE(yes.value().workloads[0].lvol->thin);  // thin by default
  const auto refused = [](const std::string& workloads, const std::string& want) {
    const std::string e = error_of("name: t\ntopology:\n  devices: [{name: nvme0}]\nworkloads:\n" +
                                   workloads);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  refused("  - {name: v, bdev: nvme0n1, lvol: maybe}\n", "workloads[0].lvol: 'maybe'");
  refused("  - {name: v, bdev: nvme0n1, lvol: {cluster_size: 1000}}\n",
          "workloads[0].lvol.cluster_size: 1000");
  refused("  - {name: v, bdev: nvme0n1, lvol: {thinn: true}}\n", "thinn");
  refused("  - {name: v, bdev: nvme0n1, lvol: true}\n  - {name: raw, bdev: nvme0n1}\n",
          "cannot write it directly");
  refused("  - {name: a, bdev: nvme0n1, lvol: {cluster_size: 64KiB}}\n"
          "  - {name: b, bdev: nvme0n1, lvol: {cluster_size: 128KiB}}\n",
          "one cluster size");
  refused("  - {name: \"a/b\", bdev: nvme0n1, lvol: true}\n", "cannot name an lvol");
}

TEST(ScenarioInput, ReportsOfNamesThatAreNotUtf8AreWritten) {
  RunResult r;
  r.scenario = "t\xbd";
  FaultOutcome f;
  f.spec.label = "lab\xbd";
  r.faults.push_back(f);
  DeviceOutcome d;
  d.name = "nv\xbd";
  r.devices.push_back(d);
  std::string json;
  ASSERT_NO_THROW(json = report_json(r));
  EXPECT_NE(json.find("lab\xef\xbf\xbd"), std::string::npos);  // U+FFFD for the bad byte
}

}  // namespace
}  // namespace pollux::scenarios

// Its own main: SystemC's library (linked through the runner) has one too.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
