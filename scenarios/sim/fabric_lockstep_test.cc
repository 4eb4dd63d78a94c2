// Pollux's NVMe/TCP host and Pollux's target in one process on the lockstep engine, connected
// by a SimNetwork: the target on a step-mode framework of its own (another machine in the
// world), the host's driver attached over the simulated wire. Verified I/O; the same seed
// replays the same delivery trace; another seed gives another.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "driver/bdev/modules/malloc.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/transport_id.h"
#include "fabric/net/sim_network.h"
#include "fabric/tcp/host.h"
#include "scenarios/sim/fabric_target.h"
#include "scenarios/sim/lockstep.h"
#include "scenarios/sim/verified_io.h"

namespace pollux::sim {
namespace {

constexpr char kNqn[] = "nqn.2026-11.io.pollux:sim";

struct Outcome {
  uint64_t trace_hash = 0, records = 0, end_ns = 0, verified = 0, failed = 0, segments = 0;
  uint64_t corrupted = 0, wrong = 0;  // wrong: reads that succeeded with the wrong data
  int outstanding = 0;                // writes never completed
};

// One host and one target over a SimNetwork: random writes at QD 8, then every block read
// back and compared.
Outcome run_world(uint64_t seed, fabric::net::LinkConfig link, bool digests,
                  const std::function<void(fabric::net::SimNetwork&)>& after_attach = {}) {
  Outcome out;
  env::VirtualClock clock(1'000'000'000);
  env::MemoryRegistry registry;
  emu::timing::Simulation devices(seed);  // no devices: the wire and the target are the world
  event::FrameworkOptions fo;
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &clock;
  auto host_fw = event::Framework::create(fo).value();
  event::Thread* host = host_fw->create_thread("sim-host", 0);
  Lockstep ls(devices, *host_fw, clock);
  fabric::net::SimNetwork net(clock, seed);
  net.set_default_link(link);
  std::string err;
  auto tgt = FabricTarget::create(clock, net, {}, &err);
  EXPECT_NE(tgt, nullptr) << err;
  if (!tgt) return out;
  ls.add_world([&] { return tgt->step(); });
  ls.add_event_source([&] { return net.next_event_ns(); });
  net.set_wait_hook([&] { ls.wait_turn(); });
  auto turn = [&] { ls.wait_turn(); };
  {
    event::CurrentThreadScope scope(&tgt->thread());
    auto b = bdev::create_malloc_bdev(tgt->bdevs(), {"Malloc0", 8192, 512, nullptr, nullptr});
    EXPECT_TRUE(b.ok());
  }
  EXPECT_EQ(tgt->start({{kNqn, {"Malloc0"}}}, turn), "");

  auto trid = nvme::parse_transport_id(
      std::string("trtype:tcp adrfam:ipv4 traddr:10.0.0.1 trsvcid:4420 subnqn:") + kNqn);
  EXPECT_TRUE(trid.ok());
  fabric::tcp::TcpOptions topt;
  topt.network = &net;
  topt.header_digest = topt.data_digest = digests;
  auto transport = fabric::tcp::TcpTransport::create(trid.value(), topt);
  EXPECT_TRUE(transport.ok());
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
  if (after_attach) after_attach(net);

  // The read contexts live until the queue pair is freed (it fails a read never completed).
  VerifiedIo io;
  std::vector<uint8_t> buffers(VerifiedIo::kBufferBytes);
  run_verified_io(io, *qp.value(), ns, buffers.data(), seed, clock, [&] {
    qp.value()->process_completions();
    c.process_admin_completions();
    ls.step();
  });
  ls.unwatch(qp.value().get());
  EXPECT_EQ(c.free_io_qpair(std::move(qp).value()), 0);
  // (after the free, which fails what never completed)
  out.verified = io.verified;
  out.failed = io.failed;
  out.wrong = io.wrong;
  out.outstanding = io.writes_outstanding;
  ctrl.value().reset();  // the shutdown goes over the wire too
  EXPECT_TRUE(tgt->shutdown(turn));
  out.trace_hash = net.trace_hash();
  out.records = net.trace_records();
  out.end_ns = clock.now();
  out.segments = net.stats().segments;
  out.corrupted = net.stats().corrupted;
  host_fw->stop(0);
  for (int i = 0; i < 1000 && !host_fw->finished(); ++i) host_fw->step();
  (void)host;
  return out;
}

fabric::net::LinkConfig lossy_link() {
  fabric::net::LinkConfig l;
  l.latency_ns = 5'000;
  l.bandwidth_bps = 10'000'000'000;
  l.jitter_ns = 2'000;
  l.loss = 0.002;
  l.rto_ns = 200'000;
  return l;
}

// POLLUX_TEST_SEED replays a seed a run printed.
uint64_t test_seed() {
  const char* env = std::getenv("POLLUX_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 0) : (std::random_device{}() | 1);
  std::printf("seed %lu\n", static_cast<unsigned long>(seed));
  return seed;
}

TEST(FabricLockstep, VerifiedIoOverTheSimulatedWire) {
  const uint64_t seed = test_seed();
  const Outcome o = run_world(seed, lossy_link(), false);
  EXPECT_EQ(o.failed, 0u) << "seed " << seed;
  EXPECT_EQ(o.outstanding, 0) << "seed " << seed;
  EXPECT_GE(o.verified, 30u) << "seed " << seed;  // nearly all 32 chunks were written
  EXPECT_GT(o.segments, 1000u);
  std::printf("virtual time %.3f ms, %lu segments, trace %016lx\n", o.end_ns / 1e6,
              static_cast<unsigned long>(o.segments), static_cast<unsigned long>(o.trace_hash));
}

TEST(FabricLockstep, SameSeedSameTraceAnotherSeedAnother) {
  const uint64_t seed = test_seed();
  const Outcome a = run_world(seed, lossy_link(), true);
  const Outcome b = run_world(seed, lossy_link(), true);
  const Outcome c = run_world(seed + 1, lossy_link(), true);
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "seed " << seed;
  EXPECT_EQ(a.records, b.records);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_NE(a.trace_hash, c.trace_hash) << "seed " << seed;
  EXPECT_EQ(a.failed, 0u);
}

// Corruption past TCP's checksum, digests on: a flipped byte is caught — a data digest
// error fails the command with a transport error, a header digest error ends the connection
// with a TermReq (at this layer nobody reconnects: bdev_nvme does, in the scenario runner) —
// and no read ever succeeds with the wrong data. (0.2% of segments left a run in ~150 with
// none corrupted; at 0.5% ~2,500 segments make that e^-12.)
TEST(FabricLockstep, DigestsCatchCorruptionThatEscapesTcp) {
  const uint64_t seed = test_seed();
  fabric::net::LinkConfig l = lossy_link();
  l.loss = 0;
  const Outcome o = run_world(
      seed, l, true, [](fabric::net::SimNetwork& net) { net.corrupt("", 0.005, 1'000'000'000); });
  EXPECT_GT(o.corrupted, 0u) << "seed " << seed;
  EXPECT_EQ(o.wrong, 0u) << "seed " << seed;
  EXPECT_GT(o.failed, 0u) << "seed " << seed;
  std::printf("corrupted segments %lu, failed I/Os %lu, verified chunks %lu\n",
              static_cast<unsigned long>(o.corrupted), static_cast<unsigned long>(o.failed),
              static_cast<unsigned long>(o.verified));
}

// Two step-mode frameworks on one OS thread: a host poller that waits in a set-up path (the
// lockstep's wait turn steps the target) finds itself on its own thread afterwards, and the
// target's pollers ran on theirs.
TEST(FabricLockstep, SteppingTheTargetInsideAHostPollerKeepsEachThreadCurrent) {
  env::VirtualClock clock(1'000'000'000);
  emu::timing::Simulation devices(1);
  event::FrameworkOptions fo;
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &clock;
  auto host_fw = event::Framework::create(fo).value();
  event::Thread* host = host_fw->create_thread("sim-host", 0);
  Lockstep ls(devices, *host_fw, clock);
  fabric::net::SimNetwork net(clock, 1);
  std::string err;
  auto tgt = FabricTarget::create(clock, net, {}, &err);
  ASSERT_NE(tgt, nullptr) << err;
  ls.add_world([&] { return tgt->step(); });
  struct Seen {
    Lockstep* ls;
    event::Thread* expected;
    int runs = 0, wrong = 0;
  };
  Seen on_host{&ls, host}, on_target{nullptr, &tgt->thread()};
  auto check = [](void* arg) {
    auto& s = *static_cast<Seen*>(arg);
    ++s.runs;
    s.wrong += event::Thread::current() != s.expected;
    if (s.ls) {
      s.ls->wait_turn();  // steps the target
      s.wrong += event::Thread::current() != s.expected;
    }
    return event::PollStatus::kIdle;
  };
  event::Poller* hp = host->register_poller(check, &on_host, 0, "host_check");
  event::Poller* tp = tgt->thread().register_poller(check, &on_target, 0, "target_check");
  for (int i = 0; i < 10; ++i) ls.step();
  EXPECT_EQ(on_host.runs, 10);
  EXPECT_EQ(on_target.runs, 20);  // once per wait turn and once per step
  EXPECT_EQ(on_host.wrong, 0);
  EXPECT_EQ(on_target.wrong, 0);
  EXPECT_EQ(event::Thread::current(), nullptr);
  host->unregister_poller(hp);
  tgt->thread().unregister_poller(tp);
  EXPECT_TRUE(tgt->shutdown([&] { ls.wait_turn(); }));
  host_fw->stop(0);
  for (int i = 0; i < 1000 && !host_fw->finished(); ++i) host_fw->step();
}

}  // namespace
}  // namespace pollux::sim

// SystemC's library brings a main(): the test brings its own (no gtest_main).
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
