// Test support for the recovery tests: one timed device (a profile) in the virtual-time rig,
// its driver controller, one I/O queue pair with a timeout, and DMA buffers — driven by a
// single-threaded host: the I/O poll, the admin poll (which runs a requested reset inline:
// this thread owns the queue pair), then the device catches up.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "driver/env/dma_memory.h"
#include "driver/nvme/controller.h"
#include "emulator/timing/profile.h"
#include "scenarios/sim/rig.h"

namespace pollux::sim::testing {

struct RigQueue {
  std::unique_ptr<Rig> rig;
  std::unique_ptr<nvme::Qpair> qp;
  std::unique_ptr<env::DmaRegion> mem;
  nvme::Controller* ctrl = nullptr;
  const nvme::Namespace* ns = nullptr;

  RigQueue(const char* profile, uint64_t seed, uint64_t timeout_us, uint32_t buffers) {
    auto p = emu::timing::load_profile(profile);
    EXPECT_TRUE(p.ok());
    RigOptions o;
    o.profile = p.value();
    o.seed = seed;
    std::string err;
    rig = Rig::create(o, &err);
    EXPECT_NE(rig, nullptr) << err;
    ctrl = &rig->controller(0);
    nvme::QpairOptions qo;
    qo.timeout_us = timeout_us;
    auto q = ctrl->alloc_io_qpair(qo);
    EXPECT_TRUE(q.ok());
    qp = std::move(q).value();
    rig->lockstep().watch(qp.get());
    auto m = env::DmaRegion::create(rig->registry(), std::size_t{buffers} * 4096);
    EXPECT_TRUE(m.ok());
    mem = std::move(m).value();
    ns = ctrl->ns(1);
  }
  ~RigQueue() {
    rig->lockstep().unwatch(qp.get());
    EXPECT_EQ(ctrl->free_io_qpair(std::move(qp)), 0);
  }
  uint8_t* buf(uint32_t i) { return static_cast<uint8_t*>(mem->data()) + std::size_t{i} * 4096; }
  void step() {
    qp->process_completions();
    ctrl->process_admin_completions();
    rig->lockstep().step();
  }
};

}  // namespace pollux::sim::testing
