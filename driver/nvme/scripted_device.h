// Test support: a scripted device (the test plays the controller, reading the SQEs the
// driver wrote to DMA memory and posting any CQEs it likes, wrong ones included) and a
// harness around one queue pair. Used by the driver's and the recovery tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/pcie.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/status.h"

namespace pollux::nvme::testing {

// A PciDevice whose doorbells are plain memory the test reads, with a switch for removal.
class ScriptedDevice : public env::PciDevice {
 public:
  int config_read(uint32_t, void*, std::size_t) override { return -ENOTSUP; }
  int config_write(uint32_t, const void*, std::size_t) override { return -ENOTSUP; }
  int bar_read(int, uint64_t off, void* buf, std::size_t len) override {
    if (removed()) return -ENODEV;
    std::memcpy(buf, regs_ + off, len);
    return 0;
  }
  int bar_write(int, uint64_t off, const void* buf, std::size_t len) override {
    if (removed()) return -ENODEV;
    std::memcpy(regs_ + off, buf, len);
    ++slow_writes;
    return 0;
  }
  volatile void* bar_map(int, uint64_t off, std::size_t) override {
    return mapped_doorbells ? regs_ + off : nullptr;
  }
  int reset() override { return 0; }
  void unplug() { mark_removed(); }
  std::string address() const override { return "scripted"; }

  uint32_t doorbell(uint32_t off) const {
    uint32_t v;
    std::memcpy(&v, regs_ + off, 4);
    return v;
  }
  bool mapped_doorbells = true;
  int slow_writes = 0;

 private:
  alignas(8) uint8_t regs_[0x2000] = {};
};

struct Harness : ::testing::Test {
  void SetUp() override {
    ctx.device = &dev;
    ctx.registry = &registry;
    ctx.clock = &clock;
    ns.id = 1;
    ns.block_size = 512;
    ns.num_blocks = 1 << 20;
    auto mem = env::DmaRegion::create(registry, 1 << 20);
    ASSERT_TRUE(mem.ok());
    data = std::move(mem).value();
  }
  std::unique_ptr<Qpair> make(QpairOptions o = {}) {
    auto qp = make_pcie_qpair(ctx, 1, o);
    EXPECT_TRUE(qp.ok()) << qp.error().message;
    sq = reinterpret_cast<spec::nvme::SubmissionEntry*>(registry.find(
        reinterpret_cast<void*>(pcie_queue(**qp).sq_iova())).vaddr);
    cq = reinterpret_cast<spec::nvme::CompletionEntry*>(pcie_queue(**qp).cq_iova());
    size = o.queue_size;
    return std::move(qp).value();
  }
  uint32_t sq_doorbell() const { return dev.doorbell(spec::nvme::reg::sq_tail_doorbell(1, 0)); }
  uint32_t cq_doorbell() const { return dev.doorbell(spec::nvme::reg::cq_head_doorbell(1, 0)); }

  // The device's side: take the next SQE, post a completion for it.
  spec::nvme::SubmissionEntry fetch() {
    spec::nvme::SubmissionEntry e = sq[dev_sq_head];
    dev_sq_head = (dev_sq_head + 1) % size;
    return e;
  }
  void post(uint16_t cid, uint16_t status = 0) {
    spec::nvme::CompletionEntry c{};
    c.cid = cid;
    c.sqid = 1;
    c.sqhd = static_cast<uint16_t>(dev_sq_head);
    c.status = static_cast<uint16_t>(status | dev_phase);
    cq[dev_cq_tail] = c;
    if (++dev_cq_tail == size) {
      dev_cq_tail = 0;
      dev_phase ^= 1;
    }
  }
  uint8_t* buf(std::size_t off = 0) { return static_cast<uint8_t*>(data->data()) + off; }

  env::MemoryRegistry registry;
  env::VirtualClock clock{1'000'000'000};
  ScriptedDevice dev;
  PcieQueueContext ctx;
  Namespace ns;
  std::unique_ptr<env::DmaRegion> data;
  spec::nvme::SubmissionEntry* sq = nullptr;
  spec::nvme::CompletionEntry* cq = nullptr;
  uint32_t size = 0, dev_sq_head = 0, dev_cq_tail = 0;
  uint16_t dev_phase = 1;
};

struct Done {
  int calls = 0;
  spec::nvme::CompletionEntry last{};
  static void cb(void* ctx, const spec::nvme::CompletionEntry& c) {
    auto* d = static_cast<Done*>(ctx);
    ++d->calls;
    d->last = c;
  }
};

}  // namespace pollux::nvme::testing
