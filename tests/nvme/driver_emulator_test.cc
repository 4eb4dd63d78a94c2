// The polled NVMe driver against Pollux's emulator, in-process: the same vfio-user messages
// as over the socket, delivered by direct calls; the device runs on its own thread.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/status.h"
#include "emulator/device/nvme_device.h"

namespace pollux {
namespace {
namespace sn = spec::nvme;

emu::nvme::ControllerConfig two_namespaces() {
  emu::nvme::ControllerConfig c;
  c.max_queue_entries = 256;
  c.max_io_queue_pairs = 8;
  c.mdts = 5;  // 128 KiB
  c.namespaces = {{64ull << 20, 512, "memory"}, {64ull << 20, 4096, "memory"}};
  return c;
}

struct Waiter {
  int done = 0;
  sn::CompletionEntry cpl{};
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* w = static_cast<Waiter*>(ctx);
    ++w->done;
    w->cpl = c;
  }
};

class DriverOnEmulator : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = emu::device::InProcessNvmeDevice::create(two_namespaces());
    ASSERT_TRUE(dev.ok()) << dev.error();
    device_ = std::move(dev).value();
    auto pci = env::VfioUserDevice::attach(device_.get(), registry_);
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    nvme::ControllerOptions o;
    o.registry = &registry_;
    o.io_queues_requested = 4;
    auto ctrl = nvme::Controller::attach(std::move(pci).value(), o);
    ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
    ctrl_ = std::move(ctrl).value();
    auto mem = env::DmaRegion::create(registry_, 4 << 20);
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(mem).value();
  }
  void TearDown() override {
    ctrl_.reset();  // shutdown before the device goes
    device_.reset();
  }
  uint8_t* buf(std::size_t off = 0) { return static_cast<uint8_t*>(mem_->data()) + off; }
  // Polls until w completes (bounded: a lost completion fails instead of hanging).
  void wait(nvme::Qpair& qp, Waiter& w, int want = 1) {
    for (long i = 0; i < 50'000'000 && w.done < want; ++i) ASSERT_GE(qp.process_completions(), 0);
    ASSERT_EQ(w.done, want) << "completion never arrived";
  }

  env::MemoryRegistry registry_;
  std::unique_ptr<emu::device::InProcessNvmeDevice> device_;
  std::unique_ptr<nvme::Controller> ctrl_;
  std::unique_ptr<env::DmaRegion> mem_;
};

TEST_F(DriverOnEmulator, AttachIdentifiesControllerAndNamespaces) {
  const auto& id = ctrl_->identify();
  EXPECT_EQ(std::string(id.mn, 20), std::string("Pollux NVMe emulator"));
  EXPECT_EQ(ctrl_->version(), sn::make_version(1, 4));
  EXPECT_EQ(ctrl_->max_transfer_bytes(), 128u * 1024);
  EXPECT_EQ(ctrl_->io_queues_granted(), 4u);
  ASSERT_EQ(ctrl_->namespace_ids(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(ctrl_->ns(1)->block_size, 512u);
  EXPECT_EQ(ctrl_->ns(1)->num_blocks, (64ull << 20) / 512);
  EXPECT_EQ(ctrl_->ns(2)->block_size, 4096u);
  // The driver turned bus mastering on; without it the device would refuse every DMA.
  EXPECT_TRUE(device_->with_device([](auto& d) { return d.config_space().bus_master(); }));
}

// A polled driver sets Interrupt Disable: it has no INTx eventfd, and a device that tries to
// signal INTx anyway may fail (SPDK's vfio-user target sets CSTS.CFS).
TEST_F(DriverOnEmulator, PolledDriverSetsInterruptDisable) {
  EXPECT_TRUE(device_->with_device([](auto& d) { return d.config_space().intx_disabled(); }));
  EXPECT_TRUE(ctrl_->healthy());
}

// Writes then reads back every size from one block to MDTS, at odd buffer offsets (PRP1 with
// an offset, PRP lists) on both namespaces and several queue pairs.
TEST_F(DriverOnEmulator, WriteReadRoundTripsAcrossSizesQueuesAndNamespaces) {
  std::vector<std::unique_ptr<nvme::Qpair>> qps;
  for (int i = 0; i < 3; ++i) {
    auto qp = ctrl_->alloc_io_qpair({});
    ASSERT_TRUE(qp.ok()) << qp.error().message;
    qps.push_back(std::move(qp).value());
  }
  const uint64_t seed = 7;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int round = 0;
  for (uint32_t nsid : {1u, 2u}) {
    const nvme::Namespace& ns = *ctrl_->ns(nsid);
    for (uint32_t bytes : {ns.block_size, 4096u, 8192u, 12288u, 65536u, 131072u}) {
      if (bytes % ns.block_size) continue;
      const uint32_t nlb = bytes / ns.block_size;
      for (std::size_t offset : {std::size_t{0}, std::size_t{512}, std::size_t{4096 + 1024}}) {
        nvme::Qpair& qp = *qps[round++ % qps.size()];
        const uint64_t lba = rng() % (ns.num_blocks - nlb);
        uint8_t* out = buf(offset);
        uint8_t* in = buf(2 << 20);
        for (uint32_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(rng());
        Waiter w;
        ASSERT_EQ(qp.write(ns, out, lba, nlb, Waiter::cb, &w), 0);
        wait(qp, w);
        ASSERT_FALSE(nvme::cpl_is_error(w.cpl)) << nvme::describe(nvme::Status::from_cqe(w.cpl.status));
        std::memset(in, 0, bytes);
        Waiter r;
        ASSERT_EQ(qp.read(ns, in, lba, nlb, Waiter::cb, &r), 0);
        wait(qp, r);
        ASSERT_FALSE(nvme::cpl_is_error(r.cpl));
        ASSERT_EQ(std::memcmp(in, out, bytes), 0)
            << "ns " << nsid << " bytes " << bytes << " offset " << offset;
      }
    }
  }
  for (auto& qp : qps) EXPECT_EQ(ctrl_->free_io_qpair(std::move(qp)), 0);
}

TEST_F(DriverOnEmulator, VectoredIoThroughSgl) {
  auto qp = ctrl_->alloc_io_qpair({.prefer_sgl = true});
  ASSERT_TRUE(qp.ok());
  ASSERT_TRUE(ctrl_->identify().sgls & 3) << "emulator advertises SGLs";
  const nvme::Namespace& ns = *ctrl_->ns(1);
  // Three pieces that PRPs could not describe (middle one neither starts nor ends on a page).
  iovec wr[3] = {{buf(100), 1000}, {buf(9000), 1048}, {buf(20000), 2048}};
  for (auto& v : wr) std::memset(v.iov_base, static_cast<int>(v.iov_len & 0xff), v.iov_len);
  Waiter w;
  ASSERT_EQ((*qp)->writev(ns, wr, 3, 40, 8, Waiter::cb, &w), 0);
  wait(**qp, w);
  ASSERT_FALSE(nvme::cpl_is_error(w.cpl)) << nvme::describe(nvme::Status::from_cqe(w.cpl.status));
  Waiter r;
  ASSERT_EQ((*qp)->read(ns, buf(1 << 20), 40, 8, Waiter::cb, &r), 0);
  wait(**qp, r);
  std::size_t off = 0;
  for (auto& v : wr) {
    ASSERT_EQ(std::memcmp(buf(1 << 20) + off, v.iov_base, v.iov_len), 0) << off;
    off += v.iov_len;
  }
  ctrl_->free_io_qpair(std::move(qp).value());
}

TEST_F(DriverOnEmulator, FlushWriteZeroesDeallocateAndCompare) {
  auto qp = ctrl_->alloc_io_qpair({});
  ASSERT_TRUE(qp.ok());
  const nvme::Namespace& ns = *ctrl_->ns(2);
  std::memset(buf(), 0xab, 4096 * 4);
  Waiter w;
  ASSERT_EQ((*qp)->write(ns, buf(), 10, 4, Waiter::cb, &w, sn::nvm::kCdw12Fua), 0);
  wait(**qp, w);
  Waiter c;
  ASSERT_EQ((*qp)->compare(ns, buf(), 10, 4, Waiter::cb, &c), 0);
  wait(**qp, c);
  EXPECT_FALSE(nvme::cpl_is_error(c.cpl));
  Waiter f;
  ASSERT_EQ((*qp)->flush(ns, Waiter::cb, &f), 0);
  wait(**qp, f);
  EXPECT_FALSE(nvme::cpl_is_error(f.cpl));
  Waiter z;
  ASSERT_EQ((*qp)->write_zeroes(ns, 11, 1, Waiter::cb, &z), 0);
  wait(**qp, z);
  Waiter c2;
  ASSERT_EQ((*qp)->compare(ns, buf(), 10, 4, Waiter::cb, &c2), 0);
  wait(**qp, c2);
  EXPECT_EQ(nvme::Status::from_cqe(c2.cpl.status).sc, sn::sc_media::kCompareFailure);
  auto* range = reinterpret_cast<sn::nvm::DsmRange*>(buf(3 << 20));
  *range = {0, 2, 12};
  Waiter d;
  ASSERT_EQ((*qp)->deallocate(ns, range, 1, Waiter::cb, &d), 0);
  wait(**qp, d);
  EXPECT_FALSE(nvme::cpl_is_error(d.cpl));
  Waiter r;
  ASSERT_EQ((*qp)->read(ns, buf(1 << 20), 10, 4, Waiter::cb, &r), 0);
  wait(**qp, r);
  for (int blk = 0; blk < 4; ++blk) {
    const uint8_t want = blk == 0 ? 0xab : 0;  // 11 zeroed, 12-13 deallocated (read as zero)
    EXPECT_EQ(buf(1 << 20)[blk * 4096 + 7], want) << blk;
  }
  ctrl_->free_io_qpair(std::move(qp).value());
}

TEST_F(DriverOnEmulator, DeviceRefusesErrorsWithTheSpecStatus) {
  auto qp = ctrl_->alloc_io_qpair({});
  ASSERT_TRUE(qp.ok());
  const nvme::Namespace& ns = *ctrl_->ns(1);
  Waiter oob;
  ASSERT_EQ((*qp)->read(ns, buf(), ns.num_blocks - 1, 2, Waiter::cb, &oob), 0);
  wait(**qp, oob);
  EXPECT_EQ(nvme::Status::from_cqe(oob.cpl.status).sc, sn::sc::kLbaOutOfRange);
  // A raw command pointing at memory the host never mapped: the device fails it and counts an
  // IOMMU fault; nothing crashes.
  const uint64_t faults_before =
      device_->with_device([](auto& d) { return d.controller().counters().iommu_faults; });
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::nvm::kRead;
  cmd.nsid = 1;
  cmd.dptr.prp.prp1 = 0x7f0000000000ull;  // nobody's memory
  Waiter bad;
  ASSERT_EQ((*qp)->submit_raw(cmd, nullptr, 0, Waiter::cb, &bad), 0);
  wait(**qp, bad);
  EXPECT_EQ(nvme::Status::from_cqe(bad.cpl.status).sc, sn::sc::kDataTransferError);
  EXPECT_GT(device_->with_device([](auto& d) { return d.controller().counters().iommu_faults; }),
            faults_before);
  // Unknown namespace, and an opcode the device does not implement.
  cmd = {};
  cmd.opcode = sn::nvm::kFlush;
  cmd.nsid = 9;
  Waiter badns;
  ASSERT_EQ((*qp)->submit_raw(cmd, nullptr, 0, Waiter::cb, &badns), 0);
  wait(**qp, badns);
  EXPECT_EQ(nvme::Status::from_cqe(badns.cpl.status).sc, sn::sc::kInvalidNamespaceOrFormat);
  cmd.opcode = 0x7e;
  cmd.nsid = 1;
  Waiter badop;
  ASSERT_EQ((*qp)->submit_raw(cmd, nullptr, 0, Waiter::cb, &badop), 0);
  wait(**qp, badop);
  EXPECT_EQ(nvme::Status::from_cqe(badop.cpl.status).sc, sn::sc::kInvalidOpcode);
  ctrl_->free_io_qpair(std::move(qp).value());
}

TEST_F(DriverOnEmulator, DeepQueueWithMoreRequestsThanSlotsCompletesEverything) {
  nvme::QpairOptions o;
  o.queue_size = 16;
  o.num_requests = 200;  // most wait in software for an SQ slot
  auto qp = ctrl_->alloc_io_qpair(o);
  ASSERT_TRUE(qp.ok());
  const nvme::Namespace& ns = *ctrl_->ns(1);
  Waiter w;
  for (int i = 0; i < 200; ++i) ASSERT_EQ((*qp)->read(ns, buf(), i * 8, 8, Waiter::cb, &w), 0);
  wait(**qp, w, 200);
  EXPECT_GT((*qp)->stats().queued, 0u);
  EXPECT_EQ((*qp)->stats().errors, 0u);
  ctrl_->free_io_qpair(std::move(qp).value());
}

// A command the device sits on times out; the driver reports it to the owner and asks the
// device to abort it (without taking the admin lock on the I/O path); the device aborts it.
TEST(DriverTimeouts, TimedOutCommandIsReportedAndAborted) {
  env::MemoryRegistry registry;
  env::VirtualClock clock(1'000'000'000);
  auto created = emu::device::InProcessNvmeDevice::create(two_namespaces());
  ASSERT_TRUE(created.ok()) << created.error();
  auto dev = std::move(created).value();
  auto pci = env::VfioUserDevice::attach(dev.get(), registry);
  ASSERT_TRUE(pci.ok());
  nvme::ControllerOptions o;
  o.registry = &registry;
  o.clock = &clock;
  auto ctrl = nvme::Controller::attach(std::move(pci).value(), o);
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  static std::vector<uint16_t> timed_out;
  timed_out.clear();
  nvme::QpairOptions qo;
  qo.timeout_us = 100;
  qo.timeout_cb = [](void*, nvme::Qpair&, uint16_t cid) { timed_out.push_back(cid); };
  auto qp = (*ctrl)->alloc_io_qpair(qo);
  ASSERT_TRUE(qp.ok());
  auto mem = env::DmaRegion::create(registry, 4096);
  ASSERT_TRUE(mem.ok());
  Waiter w;
  // Hold the device: the command stays in its SQ while time passes.
  dev->with_device([&](auto&) {
    EXPECT_EQ((*qp)->read(*(*ctrl)->ns(1), (*mem)->data(), 0, 8, Waiter::cb, &w), 0);
    (*qp)->flush_doorbell();
    clock.advance_us(500);
    EXPECT_EQ((*qp)->process_completions(), 0);
    EXPECT_EQ(timed_out.size(), 1u);
    (*ctrl)->process_admin_completions();  // sends the queued Abort (device still held)
    return 0;
  });
  EXPECT_EQ((*ctrl)->stats().io_timeouts.load(), 1u);
  EXPECT_EQ((*ctrl)->stats().aborts_sent.load(), 1u);
  for (long i = 0; i < 50'000'000 && w.done == 0; ++i) {
    (*qp)->process_completions();
    (*ctrl)->process_admin_completions();
  }
  ASSERT_EQ(w.done, 1);
  EXPECT_EQ(nvme::Status::from_cqe(w.cpl.status).sc, sn::sc::kAbortedByRequest);
  (*ctrl)->free_io_qpair(std::move(qp).value());
  ctrl->reset();  // shut the controller down before the device goes
}

TEST_F(DriverOnEmulator, AsyncEventOnNamespaceChange) {
  static int events;
  static uint32_t dw0;
  events = 0;
  ctrl_->set_async_event_callback(
      [](void*, const sn::CompletionEntry& c) {
        ++events;
        dw0 = c.dw0;
      },
      nullptr);
  device_->with_device([](auto& d) {
    d.controller().notify_namespace_changed(1);
    return 0;
  });
  for (int i = 0; i < 10'000'000 && events == 0; ++i) ctrl_->process_admin_completions();
  ASSERT_EQ(events, 1);
  EXPECT_EQ(dw0 & 7, sn::aer::kTypeNotice);
  EXPECT_EQ((dw0 >> 16) & 0xff, sn::log::kChangedNamespaceList);
}

}  // namespace
}  // namespace pollux
