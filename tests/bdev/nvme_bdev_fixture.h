// What bdev_nvme's tests against Pollux's emulator share (nvme_bdev_test.cc,
// nvme_bdev_reset_test.cc): the emulated device on its own thread, bdev_nvme attached through
// the bdev layer, the framework in step mode on the test's thread (real clock).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/event/framework.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/controller.h"
#include "emulator/device/nvme_device.h"

namespace pollux::nvme_bdev_testing {

namespace sn = spec::nvme;
using bdev::BdevIo;
using bdev::IoStatus;
using event::CurrentThreadScope;

inline emu::nvme::ControllerConfig config() {
  emu::nvme::ControllerConfig c;
  c.max_queue_entries = 256;
  c.max_io_queue_pairs = 8;
  c.mdts = 5;  // 128 KiB
  c.namespaces = {{64ull << 20, 512, "memory"}, {32ull << 20, 4096, "memory"}};
  return c;
}

struct Done {
  int n = 0;
  int ok = 0;
  IoStatus status = IoStatus::kPending;
  uint16_t nvme = 0;
  static void cb(BdevIo& io, bool success, void* arg) {
    auto* d = static_cast<Done*>(arg);
    ++d->n;
    d->ok += success;
    d->status = io.status();
    d->nvme = io.nvme_status();
  }
};

// One I/O's completions (each I/O must complete exactly once).
struct Each {
  int n = 0;
  IoStatus status = IoStatus::kPending;
  static void cb(BdevIo& io, bool, void* arg) {
    auto* e = static_cast<Each*>(arg);
    ++e->n;
    e->status = io.status();
  }
};
inline int completed(const std::vector<Each>& v) {
  int n = 0;
  for (const Each& e : v) n += e.n;
  return n;
}
// Every I/O completed once, successfully.
inline void expect_all_once_ok(const std::vector<Each>& v, const char* what) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].n, 1) << what << " #" << i;
    EXPECT_EQ(v[i].status, IoStatus::kSuccess)
        << what << " #" << i << " " << bdev::to_string(v[i].status);
  }
}

struct Events {
  int removes = 0;
  static void fn(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
    if (e == bdev::DescEvent::kRemove) ++static_cast<Events*>(ctx)->removes;
  }
};

// A device rule: fetch the next `count` commands with `opcode` and never complete them.
inline emu::nvme::FaultRule held(uint8_t opcode, uint64_t count) {
  emu::nvme::FaultRule r;
  r.action = emu::nvme::FaultAction::kNeverComplete;
  r.opcode = opcode;
  r.count = count;
  return r;
}

class NvmeBdevTest : public ::testing::Test {
 protected:
  void SetUp() override {
    event::FrameworkOptions fo;
    fo.core_mask = "0x3";
    fo.step_mode = true;
    fo.pin_reactors = false;
    auto fw = event::Framework::create(fo);
    ASSERT_TRUE(fw.ok()) << fw.error().message;
    fw_ = std::move(fw).value();
    t0_ = fw_->create_thread("t0", 0);
    t1_ = fw_->create_thread("t1", 1);
    auto mgr = bdev::Manager::create(*fw_);
    ASSERT_TRUE(mgr.ok()) << mgr.error().message;
    mgr_ = std::move(mgr).value();
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 8 << 20);
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(mem).value();
  }
  void TearDown() override {
    if (fw_) {
      fw_->stop(0);
      run_until([&] { return fw_->finished(); });
    }
    mgr_.reset();
    fw_.reset();
    mem_.reset();
  }

  // In-process emulator, attached on t0.
  void attach_in_process(bdev::NvmeBdevOptions o = {},
                         nvme::TimeoutAction timeout_action = nvme::TimeoutAction::kAbort,
                         const std::function<void(nvme::ControllerOptions&)>& tweak = nullptr) {
    auto dev = emu::device::InProcessNvmeDevice::create(config());
    ASSERT_TRUE(dev.ok()) << dev.error();
    device_ = std::move(dev).value();
    auto pci = env::VfioUserDevice::attach(device_.get(), env::MemoryRegistry::global());
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    nvme::ControllerOptions co;
    co.io_queues_requested = 4;
    co.timeout_action = timeout_action;
    if (tweak) tweak(co);
    auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
    ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
    if (o.name.empty()) o.name = "Nvme0";
    o.admin_poll_period_us = 1000;
    CurrentThreadScope on(t0_);
    auto names = bdev::nvme_attach_controller(*mgr_, std::move(ctrl).value(), o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    names_ = *names;
  }
  void detach(const std::string& name = "Nvme0") {
    bool freed = false;
    {
      CurrentThreadScope on(t0_);
      ASSERT_EQ(bdev::nvme_detach_controller(
                    *mgr_, name, [](void* p) { *static_cast<bool*>(p) = true; }, &freed),
                0);
    }
    run_until([&] { return freed; });
    ASSERT_TRUE(freed);
    EXPECT_TRUE(bdev::nvme_controller_names(*mgr_).empty());
  }

  // Steps the framework until pred() (bounded in time: a lost completion fails, not hangs).
  void run_until(const std::function<bool()>& pred, double seconds = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "condition not reached in " << seconds << " s";
        return;
      }
      fw_->step();
    }
  }
  // A device-side fault rule (emulator fault injector).
  void add_fault(const emu::nvme::FaultRule& rule) {
    ASSERT_TRUE(
        device_->with_device([&](auto& d) { return d.controller().faults().add(rule).ok(); }));
  }
  void hold_commands(uint8_t opcode, uint64_t count) { add_fault(held(opcode, count)); }

  uint64_t fault_hits() {
    return device_->with_device([](auto& d) { return d.controller().fault_hits(); });
  }
  uint64_t module_resets(const std::string& name = "Nvme0") {
    auto st = bdev::nvme_controller_stats(*mgr_, name);
    EXPECT_TRUE(st.ok());
    return st.ok() ? st->resets : ~0ull;
  }
  uint8_t* buf(std::size_t off = 0) { return static_cast<uint8_t*>(mem_->data()) + off; }
  template <typename Fn>
  uint64_t counter(Fn fn) {
    return device_->with_device([&](auto& d) { return fn(d.controller().counters()); });
  }

  struct Open {
    bdev::Desc* desc = nullptr;
    event::IoChannel* ch = nullptr;
  };
  Open open(event::Thread* t, const std::string& name, Events* ev = nullptr) {
    CurrentThreadScope on(t);
    Open o;
    auto d = mgr_->open(name, true, ev ? Events::fn : nullptr, ev);
    EXPECT_TRUE(d.ok()) << d.error().message;
    if (!d.ok()) return o;
    o.desc = *d;
    o.ch = mgr_->get_io_channel(o.desc);
    EXPECT_NE(o.ch, nullptr);
    return o;
  }
  void close(event::Thread* t, Open& o) {
    CurrentThreadScope on(t);
    if (o.ch) mgr_->put_io_channel(o.ch);
    if (o.desc) mgr_->close(o.desc);
    o = {};
  }
  // Runs fn on t, then steps until `d` has `want` completions.
  void io(event::Thread* t, Done& d, const std::function<int()>& fn, int want = 1) {
    {
      CurrentThreadScope on(t);
      ASSERT_EQ(fn(), 0);
    }
    run_until([&] { return d.n >= want; });
  }

  std::unique_ptr<event::Framework> fw_;
  event::Thread* t0_ = nullptr;
  event::Thread* t1_ = nullptr;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<env::DmaRegion> mem_;
  std::unique_ptr<emu::device::InProcessNvmeDevice> device_;
  std::vector<std::string> names_;
};

}  // namespace pollux::nvme_bdev_testing
