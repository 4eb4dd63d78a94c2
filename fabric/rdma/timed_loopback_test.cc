// NVMe-oF/RDMA over timed NICs, in virtual time: Pollux's host and target (testing/
// rdma_world.h) on two emulated RNICs with a timing profile, a malloc bdev behind the target
// (its "local" part costs no virtual time), 4 KiB reads and writes at queue depth 1. What the
// host sees is the fabric part of the SPDK paper's Figure 9/10 split: both NICs, PCIe on both
// hosts, the link — plus this harness's stand-in for software time (WorldOptions::
// work_step_ns per busy turn).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "emulator/rnic/nic_profile.h"
#include "fabric/rdma/testing/rdma_world.h"

namespace pollux::fabric::rdma::testing {
namespace {

namespace sn = spec::nvme;

struct Qd1 {
  double read_us = 0, write_us = 0;
  uint64_t rdma_reads = 0, in_capsule = 0;
};

// `in_capsule`: the target's in-capsule data size (4 KiB: a 4 KiB write travels in its
// capsule; 0: the target fetches it with RDMA READ, one more trip across the fabric).
Qd1 measure(const char* profile, uint64_t work_step_ns, uint32_t in_capsule = 4096,
            int ios = 200) {
  WorldOptions o;
  o.target.in_capsule_data_size = in_capsule;
  auto p = emu::rnic::load_nic_profile(profile);
  EXPECT_TRUE(p.ok());
  o.nic_profile = p.value();
  o.work_step_ns = work_step_ns;
  World w(o);
  EXPECT_EQ(w.attach(), "");
  nvme::QpairOptions qo;
  qo.queue_size = 32;
  auto q = w.ctrl().alloc_io_qpair(qo);
  EXPECT_TRUE(q.ok());
  nvme::Qpair& qp = *q.value();
  auto mem = w.host_memory(1 << 20);
  const nvme::Namespace& ns = *w.ctrl().ns(1);
  std::mt19937_64 rng(1);
  Qd1 r;
  const uint64_t reads0 = w.group().stats().rdma_reads, icd0 = w.group().stats().in_capsule;
  for (int write = 1; write >= 0; --write) {
    uint64_t total = 0;
    for (int i = 0; i < ios; ++i) {
      const uint64_t lba = (rng() % (ns.num_blocks / 8)) * 8;
      bool done = false;
      uint16_t status = 0xffff;
      auto cb = [](void* ctx, const sn::CompletionEntry& c) {
        auto* d = static_cast<std::pair<bool*, uint16_t*>*>(ctx);
        *d->first = true;
        *d->second = c.status & 0xfffe;
      };
      std::pair<bool*, uint16_t*> ctx{&done, &status};
      const uint64_t t0 = w.clock().now();
      const int rc = write ? qp.write(ns, mem->data(), lba, 8, cb, &ctx)
                           : qp.read(ns, mem->data(), lba, 8, cb, &ctx);
      EXPECT_EQ(rc, 0);
      while (!done) {
        qp.process_completions();
        if (!done) w.pump();
      }
      EXPECT_EQ(status, 0);
      total += w.clock().now() - t0;
    }
    (write ? r.write_us : r.read_us) = static_cast<double>(total) / ios / 1000;
  }
  r.rdma_reads = w.group().stats().rdma_reads - reads0;  // of these I/Os (not the Connects)
  r.in_capsule = w.group().stats().in_capsule - icd0;
  EXPECT_EQ(w.ctrl().free_io_qpair(std::move(q).value()), 0);
  std::printf("[figure] %s, 4 KiB QD1 over NVMe-oF/RDMA, malloc bdev, work step %llu ns, "
              "in-capsule %u B: read %.2f us, write %.2f us\n",
              profile, (unsigned long long)work_step_ns, in_capsule, r.read_us, r.write_us);
  return r;
}

// The SPDK paper (seed 000, Fig. 9/10, 25 GbE Mellanox NICs cabled back to back): 7 us of
// fabric for a 4 KiB read at QD 1. cx4lx-25g is that set-up; its parts come from the
// adapter's brief and the host's PCIe (nic_profile.h), not from this figure.
TEST(TimedNvmfRdma, FourKiBReadFabricPartMatchesTheSpdkPaper) {
  for (uint64_t step : {100u, 10u}) {
    const Qd1 r = measure("cx4lx-25g", step);
    EXPECT_GT(r.read_us, 7.0 * 0.9) << "work step " << step;
    EXPECT_LT(r.read_us, 7.0 * 1.1) << "work step " << step;
    // A 4 KiB write in its capsule crosses the fabric as the read's data do, the other way.
    EXPECT_NEAR(r.write_us, r.read_us, 0.1);
    EXPECT_EQ(r.rdma_reads, 0u);
    EXPECT_EQ(r.in_capsule, 200u);
  }
}

// Without in-capsule data the target fetches a write's data with RDMA READ: one more trip.
TEST(TimedNvmfRdma, KeyedWritesTakeOneMoreTrip) {
  const Qd1 in = measure("cx4lx-25g", 10), keyed = measure("cx4lx-25g", 10, 0);
  EXPECT_GT(keyed.rdma_reads, 0u);
  EXPECT_NEAR(keyed.read_us, in.read_us, 0.01);
  EXPECT_GT(keyed.write_us, in.write_us + 2.0);
}

// A 100 GbE ConnectX-5 class NIC behind a switch: less serialisation and faster PCIe, one
// switch hop more.
TEST(TimedNvmfRdma, Cx5IsFasterThanThePapersNic) {
  const Qd1 cx5 = measure("cx5-100g", 10), paper = measure("cx4lx-25g", 10);
  EXPECT_LT(cx5.read_us, paper.read_us - 1.0);
  measure("cx5-100g", 10, 0);  // printed for docs/FIDELITY.md
}

}  // namespace
}  // namespace pollux::fabric::rdma::testing
