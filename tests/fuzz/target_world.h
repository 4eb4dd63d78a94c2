// A small NVMe-oF target in virtual time for fuzz targets: a step-mode framework (one reactor,
// so one poll group, and a virtual clock), a bdev manager with small malloc bdevs, and a
// Target on the first thread. Each input gets a fresh world (a few hundred microseconds), so
// an input replays alone: nothing carries over from the inputs before it.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/env/clock.h"
#include "driver/event/framework.h"
#include "fabric/target/target.h"
#include "tests/fuzz/fuzz_input.h"

namespace pollux::fuzz {

struct TargetWorld {
  static constexpr uint64_t kMaxSteps = 200000;  // a livelock fails instead of hanging

  template <typename F>
  auto on_app(F f) {
    event::CurrentThreadScope scope(app);
    return f();
  }
  template <typename F>
  auto on_group(F f) {
    event::CurrentThreadScope scope(tgt->groups()[0]->thread());
    return f();
  }

  TargetWorld() {
    event::FrameworkOptions fo;
    fo.core_mask = "0x1";
    fo.step_mode = true;
    fo.clock = &clock;
    fo.msg_ring_size = 256;
    auto f = event::Framework::create(fo);
    check(f.ok(), "framework");
    fw = std::move(f).value();
    app = fw->create_thread("app", 0);
    on_app([&] {
      bdev::ManagerOptions mo;
      // Enough for every queue the harnesses open at their depth (3 x 32); a pool of 512 was
      // a tenth of an input (zeroed and faulted in for each); fewer makes the target wait for
      // bdev_ios, a path worth fuzzing too.
      mo.io_pool_size = 128;
      mo.io_cache_size = 16;
      mo.bounce_buffers = 0;
      auto m = bdev::Manager::create(*fw, mo);
      check(m.ok(), "bdev manager");
      mgr = std::move(m).value();
      auto t = fabric::target::Target::create(*fw, *mgr);
      check(t.ok(), "target");
      tgt = std::move(t).value();
    });
    settle();
  }
  ~TargetWorld() {
    stop_target([this] { step_or_tick(); });
    fw->stop(0);
    for (uint64_t i = 0; i < 10000 && !fw->finished(); ++i) fw->step();
    on_app([&] { mgr.reset(); });  // as the target's own test rig ends
  }
  TargetWorld(const TargetWorld&) = delete;
  TargetWorld& operator=(const TargetWorld&) = delete;

  // Stops the target, turning the world with `turn` until it has, and lets it go. A rig whose
  // transports need more than the framework stepped (a network, NICs it owns) calls it with
  // its own turn before those go; the destructor then finds no target.
  void stop_target(const std::function<void()>& turn) {
    if (!tgt) return;
    bool stopped = false;
    on_app([&] { tgt->stop([&] { stopped = true; }); });
    for (uint64_t i = 0; i < kMaxSteps && !stopped; ++i) turn();
    check(stopped, "the target stops");
    on_app([&] { tgt.reset(); });
    settle();
  }
  // On the app thread: a subsystem any host may connect to, `bdev` its namespace 1, listening
  // at `at` (its transport added before).
  void add_open_subsystem(const std::string& nqn, const std::string& bdev,
                          const fabric::target::ListenAddress& at) {
    fabric::target::SubsystemOptions so;
    so.nqn = nqn;
    so.allow_any_host = true;
    check(tgt->create_subsystem(so).ok(), "the subsystem");
    fabric::target::NamespaceOptions no;
    no.bdev_name = bdev;
    check(tgt->add_namespace(nqn, no).ok(), "the namespace");
    check(tgt->add_listener(nqn, at).ok(), "the listener");
  }

  void add_malloc(const std::string& name, uint64_t blocks, uint32_t block_size) {
    on_app([&] {
      check(bdev::create_malloc_bdev(*mgr, {name, blocks, block_size, nullptr, nullptr}).ok(),
            "malloc bdev");
    });
  }
  // Steps until nothing is busy. Timed pollers whose time has not come do not count.
  void settle() {
    for (uint64_t i = 0; i < kMaxSteps; ++i)
      if (!fw->step()) return;
    for (const event::Thread* t : fw->threads())  // who keeps it busy
      for (const event::PollerSample& p : t->poller_samples())
        if (p.busy_runs > 0)
          std::fprintf(stderr, "  %s: poller %s busy %llu of %llu runs\n", t->name().c_str(),
                       p.name.c_str(), static_cast<unsigned long long>(p.busy_runs),
                       static_cast<unsigned long long>(p.runs));
    fail("the framework is still busy after 200,000 steps (a livelock)");
  }
  // One step; when idle, time moves on 100 us (what waits on a timer gets its turn).
  void step_or_tick() {
    if (!fw->step()) clock.advance(100'000);
  }
  // Virtual time moves on `ns`, in steps of at most 1 ms, settling after each.
  void advance(uint64_t ns) {
    while (ns > 0) {
      const uint64_t d = ns < 1'000'000 ? ns : 1'000'000;
      clock.advance(d);
      ns -= d;
      settle();
    }
  }

  env::VirtualClock clock{1'000'000'000};  // 1 tick = 1 ns
  std::unique_ptr<event::Framework> fw;
  event::Thread* app = nullptr;
  std::unique_ptr<bdev::Manager> mgr;
  std::unique_ptr<fabric::target::Target> tgt;
};

}  // namespace pollux::fuzz
