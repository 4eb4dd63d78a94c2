// Pollux's NVMe/RDMA host and target in one process on the lockstep engine: two emulated
// RoCEv2 NICs on one wire (sim::RdmaFabric) stepped as part of the world, the target's RDMA
// transport on one, the host's controller (trtype:rdma) on the other, the CM exchange on a
// SimNetwork. Verified I/O; the same seed replays the same packet decisions and CM trace,
// another seed differs; a lossy wire and a link flap cost retransmissions, not I/O; the
// metrics say so per port and per QP.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "driver/bdev/modules/malloc.h"
#include "driver/env/dma_memory.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/transport_id.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/host.h"
#include "scenarios/sim/fabric_target.h"
#include "scenarios/sim/lockstep.h"
#include "scenarios/sim/verified_io.h"
#include "scenarios/sim/rdma_fabric.h"

namespace pollux::sim {
namespace {

constexpr char kNqn[] = "nqn.2026-11.io.pollux:rdma-sim";

struct Outcome {
  uint64_t wire_hash = 0, wire_records = 0, cm_hash = 0, end_ns = 0, verified = 0, failed = 0;
  uint64_t wrong = 0, retransmitted = 0, packets = 0;
  int outstanding = 0;
  std::string metrics;  // the text exposition of the fabric's metrics at the end
};

struct WorldOptions {
  WorldOptions(uint64_t s, double l = 0) : seed(s), loss(l) {}
  uint64_t seed = 1;
  double loss = 0;
  // Called once the host is attached, with the fabric: faults for the run.
  std::function<void(RdmaFabric&)> faults;
};

// Random 4 KiB writes at QD 8 over 128 KiB, then every chunk read back and compared.
Outcome run_world(const WorldOptions& wo) {
  Outcome out;
  env::VirtualClock clock(1'000'000'000);
  env::MemoryRegistry registry;
  emu::timing::Simulation devices(wo.seed);  // no SSDs: the NICs and the target are the world
  event::FrameworkOptions fo;
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &clock;
  auto host_fw = event::Framework::create(fo).value();
  host_fw->create_thread("sim-host", 0);
  Lockstep ls(devices, *host_fw, clock);
  fabric::net::SimNetwork net(clock, wo.seed);  // the CM's out-of-band exchange
  fabric::net::LinkConfig cm;
  cm.latency_ns = 2'000;
  cm.rto_ns = 200'000;
  net.set_default_link(cm);
  std::string err;
  auto fab = RdmaFabric::create(clock, registry, {wo.seed, 2'000, wo.loss}, &err);
  EXPECT_NE(fab, nullptr) << err;
  if (!fab) return out;
  FabricTargetOptions to;
  to.trtype = "RDMA";
  to.rdma_context = &fab->context(RdmaSide::kTarget);
  to.registry = &registry;
  to.rdma.qp.timeout = 8;  // 1 ms local ACK timeout: a loss costs little virtual time
  auto tgt = FabricTarget::create(clock, net, to, &err);
  EXPECT_NE(tgt, nullptr) << err;
  if (!tgt) return out;
  ls.add_world([&] { return tgt->step(); });
  ls.add_world([&] { return fab->step(); });  // after the target: its doorbells are seen now
  ls.add_event_source([&] { return net.next_event_ns(); });
  ls.add_event_source([&] { return fab->next_event_ns(); });
  net.set_wait_hook([&] { ls.wait_turn(); });
  auto turn = [&] { ls.wait_turn(); };
  {
    event::CurrentThreadScope scope(&tgt->thread());
    EXPECT_TRUE(
        bdev::create_malloc_bdev(tgt->bdevs(), {"Malloc0", 8192, 512, nullptr, nullptr}).ok());
  }
  EXPECT_EQ(tgt->start({{kNqn, {"Malloc0"}}}, turn), "");

  auto trid = nvme::parse_transport_id(
      std::string("trtype:rdma adrfam:ipv4 traddr:10.0.0.1 trsvcid:4420 subnqn:") + kNqn);
  EXPECT_TRUE(trid.ok());
  fabric::rdma::RdmaHostOptions ho;
  ho.context = &fab->context(RdmaSide::kHost);
  ho.cm_network = &net;
  ho.registry = &registry;
  ho.qp.timeout = 8;
  auto transport = fabric::rdma::RdmaTransport::create(trid.value(), ho);
  EXPECT_TRUE(transport.ok()) << (transport.ok() ? "" : transport.error().message);
  if (!transport) return out;
  nvme::ControllerOptions co;
  co.clock = &clock;
  co.registry = &registry;
  co.wait_hook = turn;
  co.hostnqn = "nqn.2026-11.io.pollux:host";
  co.io_queues_requested = 1;
  auto ctrl = nvme::Controller::attach(std::move(transport).value(), co);
  EXPECT_TRUE(ctrl.ok()) << (ctrl.ok() ? "" : ctrl.error().message);
  if (!ctrl) return out;
  nvme::Controller& c = *ctrl.value();
  auto qp = c.alloc_io_qpair();
  EXPECT_TRUE(qp.ok());
  ls.watch(qp.value().get());
  const nvme::Namespace& ns = *c.ns(1);
  if (wo.faults) wo.faults(*fab);

  auto mem = env::DmaRegion::create(registry, VerifiedIo::kBufferBytes, env::DmaOptions{false});
  EXPECT_TRUE(mem.ok());
  if (!mem) return out;
  // Reads come back by RDMA WRITE (keyed SGL): the buffers are registered memory. The read
  // contexts live until the queue pair is freed (it fails a read never completed).
  VerifiedIo io;
  run_verified_io(io, *qp.value(), ns, static_cast<uint8_t*>(mem.value()->data()), wo.seed, clock,
                  [&] {
                    qp.value()->process_completions();
                    c.process_admin_completions();
                    ls.step();
                  });
  {  // while the QPs exist: their own series are there too
    metrics::Exporter exporter;
    exporter.add_source([&](metrics::Builder& b) { fab->collect_metrics(b); });
    out.metrics = exporter.render();
  }
  ls.unwatch(qp.value().get());
  EXPECT_EQ(c.free_io_qpair(std::move(qp).value()), 0);
  // (after the free, which fails what never completed)
  out.verified = io.verified;
  out.failed = io.failed;
  out.wrong = io.wrong;
  out.outstanding = io.writes_outstanding;
  ctrl.value().reset();
  EXPECT_TRUE(tgt->shutdown(turn));
  out.wire_hash = fab->trace_hash();
  out.wire_records = fab->trace_records();
  out.cm_hash = net.trace_hash();
  out.end_ns = clock.now();
  for (RdmaSide s : {RdmaSide::kTarget, RdmaSide::kHost}) {
    out.retransmitted += fab->nic(s).counters().retransmitted_packets;
    out.packets += fab->nic(s).counters().tx_packets;
  }
  tgt.reset();
  host_fw->stop(0);
  for (int i = 0; i < 1000 && !host_fw->finished(); ++i) host_fw->step();
  return out;
}

uint64_t test_seed() {
  const char* env = std::getenv("POLLUX_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 0) : (std::random_device{}() | 1);
  std::printf("seed %lu (POLLUX_TEST_SEED replays)\n", static_cast<unsigned long>(seed));
  return seed;
}

TEST(RdmaLockstep, VerifiedIoOverTwoEmulatedNics) {
  const uint64_t seed = test_seed();
  const Outcome o = run_world(WorldOptions(seed));
  EXPECT_EQ(o.failed, 0u) << "seed " << seed;
  EXPECT_EQ(o.outstanding, 0) << "seed " << seed;
  EXPECT_GE(o.verified, 30u) << "seed " << seed;  // nearly all 32 chunks were written
  EXPECT_GT(o.packets, 2000u);
  EXPECT_EQ(o.retransmitted, 0u) << "a clean wire";
  std::printf("virtual time %.3f ms, %lu packets, wire decisions %016lx\n", o.end_ns / 1e6,
              static_cast<unsigned long>(o.packets), static_cast<unsigned long>(o.wire_hash));
}

TEST(RdmaLockstep, SameSeedSameTraceAnotherSeedAnother) {
  const uint64_t seed = test_seed();
  const Outcome a = run_world(WorldOptions(seed, 0.01));
  const Outcome b = run_world(WorldOptions(seed, 0.01));
  const Outcome c = run_world(WorldOptions(seed + 1, 0.01));
  EXPECT_EQ(a.wire_hash, b.wire_hash) << "seed " << seed;
  EXPECT_EQ(a.wire_records, b.wire_records);
  EXPECT_EQ(a.cm_hash, b.cm_hash);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_NE(a.wire_hash, c.wire_hash) << "seed " << seed;
  EXPECT_EQ(a.failed, 0u) << "1 % loss: the NICs retransmit";
  EXPECT_GE(a.verified, 30u);
  EXPECT_GT(a.retransmitted, 0u);
}

// The host's link down for 3 ms (three ACK timeouts; seven retries allowed) in the middle of
// the writes: nothing fails, the requesters went back and sent again, and the metrics show it
// per port and per QP.
TEST(RdmaLockstep, ALinkFlapCostsRetransmissionsNotIo) {
  const uint64_t seed = test_seed();
  WorldOptions wo(seed);
  wo.faults = [](RdmaFabric& f) { f.link_down(RdmaSide::kHost, 3'000'000); };
  const Outcome o = run_world(wo);
  EXPECT_EQ(o.failed, 0u) << "seed " << seed;
  EXPECT_GE(o.verified, 30u) << "seed " << seed;
  EXPECT_GT(o.retransmitted, 0u);
  for (const char* m :
       {"pollux_rnic_retransmitted_packets_total{nic=\"host\"", "pollux_rnic_ack_timeouts_total",
        "pollux_rnic_qp_retransmitted_packets_total{nic=", "pollux_rnic_qp_messages_total",
        "pollux_rnic_qp_message_latency_seconds_total", "pollux_rnic_link_flaps_total 1",
        "pollux_rnic_link_up{nic=\"host\",port=\"2\"} 1", "pollux_rnic_qps{nic=\"target\""})
    EXPECT_NE(o.metrics.find(m), std::string::npos) << m << " in\n" << o.metrics;
}

}  // namespace
}  // namespace pollux::sim

// SystemC's library brings a main(): the test brings its own (no gtest_main).
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
