// The NVMe driver's queue pair (driver/nvme: Qpair over the PCIe transport) against a hostile
// device: the input plays the controller, with the SQEs the driver wrote in front of it and
// any completion it likes — unknown, stale or duplicate command ids, another SQ's id, SQ heads
// anywhere, a wrong phase, any status — interleaved with the driver's submissions, polls,
// timeouts and the device's removal. What a buggy SSD (or a fuzzed emulator) can do to the
// host.
//
// Input: one configuration byte, then records, each starting with an opcode byte (low 3 bits):
//   0 N(1) LBA(2)             the driver submits a read (opcode bit 3: a write) of N % 16 + 1
//                             blocks at LBA
//   1 CID(2) ST(2) HD(2) Q(2) DW0(4)  the device posts this CQE at its CQ tail (opcode bit 3:
//                             with the wrong phase)
//   2 ST(2)                   the device takes the next SQE and completes it as asked, with
//                             status ST (its CID, SQ head and the queue's SQID)
//   3 K(1)                    the device completes the K-th command it took again
//   4 N(1)                    the driver polls (at most N % 64 completions; 0: all)
//   5 E(1)                    virtual time moves on 2^(E % 34) ns (the queue's timeouts)
//   6                         the driver fails everything outstanding (fail_all, as a reset does)
//   7                         the device is removed
// Configuration byte: bits 0-1 queue size 4, 8, 32 or 128; bit 2 a 1 ms command timeout;
// bit 3 a doorbell per submission (else once per poll, the default).
//
// What must hold: no crash, hang or sanitizer report; no request completes twice; once the
// device is gone and the driver has polled, every request submitted has completed exactly once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/pci_device.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/pcie.h"
#include "driver/nvme/qpair.h"
#include "spec/nvme.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

namespace env = pollux::env;
namespace nvme = pollux::nvme;
namespace sn = pollux::spec::nvme;
using pollux::fuzz::check;
using pollux::fuzz::Reader;

const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

// Registers and doorbells as plain memory; removal on the input's word.
class Device final : public env::PciDevice {
 public:
  int config_read(uint32_t, void*, std::size_t) override { return -ENOTSUP; }
  int config_write(uint32_t, const void*, std::size_t) override { return -ENOTSUP; }
  int bar_read(int, uint64_t off, void* buf, std::size_t len) override {
    if (removed() || off > sizeof regs_ || len > sizeof regs_ - off) return -ENODEV;
    std::memcpy(buf, regs_ + off, len);
    return 0;
  }
  int bar_write(int, uint64_t off, const void* buf, std::size_t len) override {
    if (removed() || off > sizeof regs_ || len > sizeof regs_ - off) return -ENODEV;
    std::memcpy(regs_ + off, buf, len);
    return 0;
  }
  volatile void* bar_map(int, uint64_t off, std::size_t len) override {
    return off <= sizeof regs_ && len <= sizeof regs_ - off ? regs_ + off : nullptr;
  }
  int reset() override { return 0; }
  std::string address() const override { return "fuzz"; }
  void unplug() { finish_removal(); }

 private:
  alignas(8) uint8_t regs_[0x2000] = {};
};

struct Done {
  int calls = 0;
  bool submitted = false;
};
void on_done(void* ctx, const sn::CompletionEntry& e) {
  auto* d = static_cast<Done*>(ctx);
  check(d->submitted, "a completion for a request never submitted");
  ++d->calls;
  check(d->calls == 1, "a request completed twice");
  if (g_debug) std::fprintf(stderr, "done: cid %u status %#x\n", e.cid, e.status >> 1);
}

struct Rig {
  env::MemoryRegistry registry;
  env::VirtualClock clock{1'000'000'000};
  Device dev;
  nvme::PcieQueueContext ctx;
  nvme::Namespace ns;
  std::unique_ptr<env::DmaRegion> data;
  std::unique_ptr<nvme::Qpair> qp;
  sn::SubmissionEntry* sq = nullptr;
  sn::CompletionEntry* cq = nullptr;
  uint32_t size = 0, dev_sq_head = 0, dev_cq_tail = 0;
  uint16_t dev_phase = 1;
  std::vector<sn::SubmissionEntry> taken;  // the commands the device fetched
  std::vector<std::unique_ptr<Done>> dones;

  explicit Rig(uint8_t config) {
    ctx.device = &dev;
    ctx.registry = &registry;
    ctx.clock = &clock;
    ns.id = 1;
    ns.block_size = 512;
    ns.num_blocks = 1 << 16;
    auto mem = env::DmaRegion::create(registry, 256 * 1024, env::DmaOptions{false});
    check(mem.ok(), "data buffers");
    data = std::move(mem).value();
    static constexpr uint32_t kSizes[4] = {4, 8, 32, 128};
    nvme::QpairOptions o;
    o.queue_size = kSizes[config & 3];
    o.timeout_us = (config & 4) ? 1000 : 0;
    o.batch_doorbells = (config & 8) == 0;
    auto q = nvme::make_pcie_qpair(ctx, 1, o);
    check(q.ok(), "the queue pair");
    qp = std::move(q).value();
    sq = reinterpret_cast<sn::SubmissionEntry*>(
        registry.find(reinterpret_cast<void*>(nvme::pcie_queue(*qp).sq_iova())).vaddr);
    cq = reinterpret_cast<sn::CompletionEntry*>(nvme::pcie_queue(*qp).cq_iova());
    size = o.queue_size;
  }
  uint32_t sq_tail() const {
    uint32_t v = 0;
    const_cast<Device&>(dev).bar_read(0, sn::reg::sq_tail_doorbell(1, 0), &v, 4);
    return v;
  }
  void post(sn::CompletionEntry c, bool wrong_phase) {
    c.status = static_cast<uint16_t>((c.status & ~1u) | (wrong_phase ? dev_phase ^ 1 : dev_phase));
    cq[dev_cq_tail] = c;
    if (++dev_cq_tail == size) {
      dev_cq_tail = 0;
      dev_phase ^= 1;
    }
  }
  void submit(bool write, uint32_t nlb, uint64_t lba) {
    auto d = std::make_unique<Done>();
    d->submitted = true;
    auto* buf = static_cast<uint8_t*>(data->data()) + (lba % 256) * 512;
    const int rc = write ? qp->write(ns, buf, lba, nlb, on_done, d.get())
                         : qp->read(ns, buf, lba, nlb, on_done, d.get());
    if (rc != 0) {
      check(d->calls == 0, "a refused request completed");
      return;
    }
    dones.push_back(std::move(d));
  }
  // The device takes the next SQE the driver rang for, if any.
  bool take(sn::SubmissionEntry* e) {
    if (dev.removed() || dev_sq_head == sq_tail() % size) return false;
    *e = sq[dev_sq_head];
    dev_sq_head = (dev_sq_head + 1) % size;
    taken.push_back(*e);
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader in{data, size};
  uint8_t config = 0;
  in.get(&config);
  Rig rig(config);
  for (uint8_t code = 0; in.take(&code, 1);) {
    switch (code & 7) {
      case 0: {
        uint8_t n = 0;
        uint16_t lba = 0;
        if (in.get(&n) && in.get(&lba)) rig.submit((code & 8) != 0, n % 16 + 1, lba);
        break;
      }
      case 1: {
        sn::CompletionEntry c{};
        uint16_t sqid = 0;
        if (!in.get(&c.cid) || !in.get(&c.status) || !in.get(&c.sqhd) || !in.get(&sqid) ||
            !in.get(&c.dw0))
          break;
        c.sqid = sqid;
        if (!rig.dev.removed()) rig.post(c, (code & 8) != 0);
        break;
      }
      case 2: {
        uint16_t st = 0;
        sn::SubmissionEntry e;
        if (!in.get(&st) || !rig.take(&e)) break;
        sn::CompletionEntry c{};
        c.cid = e.cid;
        c.sqid = 1;
        c.sqhd = static_cast<uint16_t>(rig.dev_sq_head);
        c.status = static_cast<uint16_t>(st & ~1u);
        rig.post(c, false);
        break;
      }
      case 3: {
        uint8_t k = 0;
        if (!in.get(&k) || rig.taken.empty() || rig.dev.removed()) break;
        sn::CompletionEntry c{};
        c.cid = rig.taken[k % rig.taken.size()].cid;
        c.sqid = 1;
        c.sqhd = static_cast<uint16_t>(rig.dev_sq_head);
        rig.post(c, false);
        break;
      }
      case 4: {
        uint8_t n = 0;
        if (in.get(&n)) rig.qp->process_completions(n % 64);
        break;
      }
      case 5: {
        uint8_t e = 0;
        if (in.get(&e)) rig.clock.advance(uint64_t{1} << (e % 34));
        rig.qp->process_completions();
        break;
      }
      case 6:
        rig.qp->fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedSqDeletion));
        break;
      default:
        rig.dev.unplug();
    }
  }
  // The device goes; what the driver still holds must end, once.
  rig.dev.unplug();
  for (int i = 0; i < 4; ++i) rig.qp->process_completions();
  for (const auto& d : rig.dones)
    check(d->calls == 1, "a request never completed after the device was removed");
  rig.qp.reset();
  return 0;
}
