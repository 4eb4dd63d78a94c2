// Surprise removal at the controller level against the functional emulator (in-process
// vfio-user): a PciDevice wrapper lets the test pull the device. The admin poll ends every
// admin request (the AERs, a pending command) once with a DNR status; the I/O queue pair ends
// its outstanding and waiting requests once; nothing completes twice or late.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/status.h"
#include "emulator/device/nvme_device.h"
#include "emulator/nvme/faults.h"

namespace pollux {
namespace {
namespace sn = spec::nvme;

// Forwards to the real device until unplug() (then the driver sees removed()) or ask_back()
// (the platform wants it back: the driver stops it first).
class Removable final : public env::PciDevice {
 public:
  explicit Removable(std::unique_ptr<env::PciDevice> inner) : inner_(std::move(inner)) {}
  int config_read(uint32_t o, void* b, std::size_t l) override { return inner_->config_read(o, b, l); }
  int config_write(uint32_t o, const void* b, std::size_t l) override {
    return inner_->config_write(o, b, l);
  }
  int bar_read(int bar, uint64_t o, void* b, std::size_t l) override {
    if (removed()) {
      std::memset(b, 0xff, l);
      return -ENODEV;
    }
    return inner_->bar_read(bar, o, b, l);
  }
  int bar_write(int bar, uint64_t o, const void* b, std::size_t l) override {
    return removed() ? -ENODEV : inner_->bar_write(bar, o, b, l);
  }
  volatile void* bar_map(int bar, uint64_t o, std::size_t l) override { return inner_->bar_map(bar, o, l); }
  int reset() override { return inner_->reset(); }
  std::string address() const override { return "removable:" + inner_->address(); }
  void unplug() { mark_removed(); }
  // Wanted back while it still works (vfio-pci's request eventfd).
  void ask_back() { request_removal(); }

 private:
  std::unique_ptr<env::PciDevice> inner_;
};

struct Cb {
  int calls = 0;
  uint16_t status = 0;
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* x = static_cast<Cb*>(ctx);
    ++x->calls;
    x->status = c.status & 0xfffe;
  }
};

TEST(ControllerRemoval, AdminAndIoRequestsEndOnceWithDnr) {
  env::MemoryRegistry registry;
  emu::nvme::ControllerConfig cfg;
  cfg.max_queue_entries = 64;
  cfg.max_io_queue_pairs = 2;
  cfg.namespaces = {{16ull << 20, 512, "memory"}};
  auto created = emu::device::InProcessNvmeDevice::create(cfg);
  ASSERT_TRUE(created.ok()) << created.error();
  auto dev = std::move(created).value();
  auto pci = env::VfioUserDevice::attach(dev.get(), registry);
  ASSERT_TRUE(pci.ok()) << pci.error().message;
  auto wrapper = std::make_unique<Removable>(std::move(pci).value());
  Removable* removable = wrapper.get();
  nvme::ControllerOptions o;
  o.registry = &registry;
  o.async_events = 2;
  auto attached = nvme::Controller::attach(std::move(wrapper), o);
  ASSERT_TRUE(attached.ok()) << attached.error().message;
  auto ctrl = std::move(attached).value();
  nvme::QpairOptions qo;
  qo.queue_size = 4;
  qo.num_requests = 16;
  auto qp = ctrl->alloc_io_qpair(qo);
  ASSERT_TRUE(qp.ok());
  auto mem = env::DmaRegion::create(registry, 16 * 4096);
  ASSERT_TRUE(mem.ok());
  auto* base = static_cast<uint8_t*>((*mem)->data());
  std::vector<Cb> io(8);
  Cb admin;
  const uint64_t admin_before = ctrl->stats().admin_failed_on_removal.load();
  // Hold the device so nothing completes, submit, and pull it.
  dev->with_device([&](auto&) {
    for (uint32_t i = 0; i < io.size(); ++i)
      EXPECT_EQ((*qp)->read(*ctrl->ns(1), base + i * 4096, i * 8, 8, Cb::cb, &io[i]), 0);
    (*qp)->flush_doorbell();
    sn::SubmissionEntry gf{};
    gf.opcode = sn::admin::kGetFeatures;
    gf.cdw10 = sn::feature::kNumberOfQueues;
    EXPECT_EQ(ctrl->admin_submit(gf, nullptr, 0, Cb::cb, &admin), 0);
    removable->unplug();
    return 0;
  });
  EXPECT_EQ(admin_before, 0u);
  EXPECT_EQ((*qp)->process_completions(), -ENODEV);
  EXPECT_EQ((*qp)->stats().failed_on_removal, io.size());
  for (Cb& c : io) {
    EXPECT_EQ(c.calls, 1);
    EXPECT_EQ(sn::status::sct(c.status), sn::sct::kPath);
    EXPECT_TRUE(sn::status::dnr(c.status));
  }
  EXPECT_EQ(ctrl->process_admin_completions(), -ENODEV);
  EXPECT_EQ(admin.calls, 1);
  EXPECT_TRUE(sn::status::dnr(admin.status));
  // The pending Get Features and the two AERs.
  EXPECT_EQ(ctrl->stats().admin_failed_on_removal.load(), 3u);
  EXPECT_EQ(ctrl->stats().async_events.load(), 0u);
  // Again: nothing twice; new work refused.
  EXPECT_EQ(ctrl->process_admin_completions(), -ENODEV);
  EXPECT_EQ((*qp)->process_completions(), -ENODEV);
  EXPECT_EQ(admin.calls, 1);
  for (Cb& c : io) EXPECT_EQ(c.calls, 1);
  Cb late;
  EXPECT_EQ((*qp)->read(*ctrl->ns(1), base, 0, 8, Cb::cb, &late), -ENODEV);
  sn::SubmissionEntry gf{};
  gf.opcode = sn::admin::kGetFeatures;
  EXPECT_LT(ctrl->admin_submit(gf, nullptr, 0, Cb::cb, &late), 0);
  // A reset cannot bring a removed device back: the controller fails at once.
  EXPECT_EQ(ctrl->reset(), -ENODEV);
  EXPECT_TRUE(ctrl->failed());
  EXPECT_EQ(late.calls, 0);
  EXPECT_EQ(ctrl->free_io_qpair(std::move(qp).value()), 0);
  for (Cb& c : io) EXPECT_EQ(c.calls, 1);
  ctrl.reset();
  dev.reset();
}

// Asked for the device back while a command is inside it: the driver disables the controller
// (the device stops every command: it can no longer touch their buffers) before the removal
// ends the command with an error.
TEST(ControllerRemoval, OnRequestTheControllerIsDisabledBeforeItsCommandsEnd) {
  env::MemoryRegistry registry;
  emu::nvme::ControllerConfig cfg;
  cfg.namespaces = {{16ull << 20, 512, "memory"}};
  auto dev = emu::device::InProcessNvmeDevice::create(cfg);
  ASSERT_TRUE(dev.ok()) << dev.error();
  auto device = std::move(dev).value();
  auto pci = env::VfioUserDevice::attach(device.get(), registry);
  ASSERT_TRUE(pci.ok()) << pci.error().message;
  auto owned = std::make_unique<Removable>(std::move(pci).value());
  Removable* req = owned.get();
  nvme::ControllerOptions o;
  o.registry = &registry;
  auto ctrl = nvme::Controller::attach(std::move(owned), o);
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  auto qp = (*ctrl)->alloc_io_qpair({});
  ASSERT_TRUE(qp.ok());
  auto mem = env::DmaRegion::create(registry, 1 << 20);
  ASSERT_TRUE(mem.ok());
  emu::nvme::FaultRule hold;
  hold.action = emu::nvme::FaultAction::kNeverComplete;
  hold.opcode = sn::nvm::kRead;
  hold.count = 1;
  ASSERT_TRUE(device->with_device([&](auto& d) { return d.controller().faults().add(hold).ok(); }));
  Cb w;
  ASSERT_EQ((*qp)->read(*(*ctrl)->ns(1), (*mem)->data(), 0, 8, Cb::cb, &w), 0);
  for (int i = 0; i < 1000; ++i) ASSERT_GE((*qp)->process_completions(), 0);
  ASSERT_TRUE(device->with_device([](auto& d) { return d.controller().ready(); }));
  ASSERT_EQ(w.calls, 0) << "the device holds the read";

  req->ask_back();
  EXPECT_FALSE(req->removed()) << "asked, not yet gone: the driver decides when";
  EXPECT_EQ((*ctrl)->process_admin_completions(), -ENODEV);
  EXPECT_TRUE(req->removed());
  EXPECT_FALSE(device->with_device([](auto& d) { return d.controller().ready(); }))
      << "disabled before the removal went on";
  EXPECT_EQ((*qp)->process_completions(), -ENODEV);
  EXPECT_EQ(w.calls, 1) << "the held read ends, with an error";
  EXPECT_NE(w.status, 0);
  (*ctrl)->free_io_qpair(std::move(qp).value());
  ctrl->reset();
}

// Pulled and put back between two looks of the driver (a re-insertion within microseconds):
// the driver must still learn that its function is gone — the one back is a fresh function
// with none of its queues or DMA mappings — rather than talk to it as if nothing had happened.
// Then a new client attaches to it as usual.
TEST(ControllerRemoval, ReinsertedBeforeTheDriverLookedIsStillARemoval) {
  env::MemoryRegistry registry;
  emu::nvme::ControllerConfig cfg;
  cfg.namespaces = {{16ull << 20, 512, "memory"}};
  auto dev = emu::device::InProcessNvmeDevice::create(cfg);
  ASSERT_TRUE(dev.ok()) << dev.error();
  auto device = std::move(dev).value();
  auto mem = env::DmaRegion::create(registry, 1 << 20);
  ASSERT_TRUE(mem.ok());
  auto attach = [&]() -> std::unique_ptr<nvme::Controller> {
    auto pci = env::VfioUserDevice::attach(device->connect(), registry);
    if (!pci.ok()) ADD_FAILURE() << pci.error().message;
    if (!pci.ok()) return nullptr;
    nvme::ControllerOptions o;
    o.registry = &registry;
    auto c = nvme::Controller::attach(std::move(pci).value(), o);
    if (!c.ok()) ADD_FAILURE() << c.error().message;
    return c.ok() ? std::move(c).value() : nullptr;
  };
  auto read_one = [&](nvme::Controller& c, nvme::Qpair& qp) {
    Cb r;
    EXPECT_EQ(qp.read(*c.ns(1), (*mem)->data(), 0, 8, Cb::cb, &r), 0);
    // The device thread shares two cores with everything else: wait by time, not turns.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (r.calls == 0 && std::chrono::steady_clock::now() < until) {
      EXPECT_GE(qp.process_completions(), 0);
    }
    EXPECT_EQ(r.calls, 1);
    EXPECT_EQ(r.status, 0);
    return r.calls == 1 && r.status == 0;
  };
  auto ctrl = attach();
  ASSERT_NE(ctrl, nullptr);
  EXPECT_EQ(device->connect(), nullptr) << "one client at a time";
  auto qp = ctrl->alloc_io_qpair({});
  ASSERT_TRUE(qp.ok());
  ASSERT_TRUE(read_one(*ctrl, **qp));

  device->with_device([](auto& d) {
    d.surprise_remove();
    d.insert();
    return 0;
  });
  EXPECT_EQ(ctrl->process_admin_completions(), -ENODEV);
  EXPECT_TRUE(ctrl->transport().gone());
  EXPECT_EQ((*qp)->process_completions(), -ENODEV);
  // A DMA region allocated now is not refused because of the dead client.
  EXPECT_TRUE(env::DmaRegion::create(registry, 4096).ok());
  EXPECT_EQ(ctrl->free_io_qpair(std::move(qp).value()), 0);
  ctrl.reset();

  auto fresh = attach();
  ASSERT_NE(fresh, nullptr);
  auto qp2 = fresh->alloc_io_qpair({});
  ASSERT_TRUE(qp2.ok());
  EXPECT_TRUE(read_one(*fresh, **qp2));
  EXPECT_EQ(fresh->free_io_qpair(std::move(qp2).value()), 0);
}

}  // namespace
}  // namespace pollux
