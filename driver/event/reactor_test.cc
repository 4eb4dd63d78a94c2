// Busy and idle time: a reactor's busy + idle is exactly the span its own clock readings
// cover, free-running on the TSC or stepped by a simulator; with a CPU clock that models
// costs (set_cpu_clock) every tick goes where the model put it.
#include <gtest/gtest.h>

#include <chrono>

#include "driver/event/test_util.h"

namespace pollux::event {
namespace {

using testing::StepFramework;

// The system clock (the TSC), remembering the first and the last reading taken through it.
// Read on one OS thread only here: the framework runs reactor 0 on the caller.
class RecordingClock final : public env::Clock {
 public:
  uint64_t ticks_per_second() const override { return sys_.ticks_per_second(); }
  uint64_t first() const { return first_; }
  uint64_t last() const { return last_; }

 private:
  uint64_t read() const override {
    const uint64_t t = sys_.now();
    if (first_ == 0) first_ = t;
    last_ = t;
    return t;
  }
  const env::Clock& sys_ = env::system_clock();
  mutable uint64_t first_ = 0, last_ = 0;
};

// Spins for a while without reading any clock: work the reactor's readings must account for.
uint64_t spin(int rounds) {
  volatile uint64_t x = 0;
  for (int i = 0; i < rounds; ++i) x = x + static_cast<uint64_t>(i);
  return x;
}

struct FreeRun {
  Framework* fw = nullptr;
  Poller* work = nullptr;
  int runs = 0;
};

PollStatus work_poll(void* arg) {
  auto* f = static_cast<FreeRun*>(arg);
  ++f->runs;
  if (f->runs == 400) f->fw->stop(0);
  if (f->runs % 4 != 0) return PollStatus::kIdle;  // a quarter of the runs do work
  spin(2000);
  return PollStatus::kBusy;
}

// Free-running in real time: every tick between the reactor's first and last reading is
// busy or idle, once, whatever the machine's load (no timed assert: the reference is the
// reactor's own readings); the busy poller's time is inside its thread's.
TEST(Reactor, FreeRunningBusyPlusIdleIsTheSpanOfItsReadings) {
  RecordingClock clock;
  FrameworkOptions o;
  o.pin_reactors = false;
  o.clock = &clock;
  auto r = Framework::create(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::unique_ptr<Framework> fw = std::move(r).value();
  FreeRun f;
  f.fw = fw.get();
  const auto wall0 = std::chrono::steady_clock::now();
  ASSERT_EQ(fw->run(
                [](void* arg) {
                  auto* f = static_cast<FreeRun*>(arg);
                  f->work = Thread::current()->register_poller(work_poll, f, 0, "work");
                },
                &f),
            0);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  const ReactorStats& rs = fw->reactor(0).stats();
  const uint64_t busy = rs.busy_ticks.load(), idle = rs.idle_ticks.load();
  EXPECT_GT(busy, 0u);
  EXPECT_GT(idle, 0u);
  EXPECT_EQ(busy + idle, clock.last() - clock.first());
  EXPECT_EQ(rs.last_tick.load(), clock.last());
  // Within the wall time around run() (same source of time, so no tolerance is needed beyond
  // the TSC's calibration: 1%).
  EXPECT_LE(clock.ticks_to_seconds(busy + idle), wall_s * 1.01);

  Thread* t = fw->thread_at(0);
  ASSERT_NE(t, nullptr);
  const uint64_t t_busy = t->stats().busy_ticks.load(), t_idle = t->stats().idle_ticks.load();
  EXPECT_LE(t_busy + t_idle, busy + idle);  // the reactor's last reading comes after its exit
  EXPECT_LE(t_busy, busy);
  EXPECT_EQ(f.runs, 400);
}

// Step mode: what happens between iterations (the simulator's own work, its clock moving) is
// idle time of the reactor and, split evenly, of the threads that sat through it.
TEST(Reactor, StepModeBooksTheTimeBetweenIterationsAsIdle) {
  StepFramework s("0x1");
  Thread* a = s.fw->create_thread("a", 0);
  Thread* b = s.fw->create_thread("b", 0);
  struct Spend {
    env::VirtualClock* clock;
    uint64_t ticks;
  } spend{&s.clock, 5};
  a->register_poller(
      [](void* arg) {
        auto* sp = static_cast<Spend*>(arg);
        sp->clock->advance(sp->ticks);
        return PollStatus::kBusy;
      },
      &spend, 0, "spend");
  s.fw->step();  // the threads arrive
  const ReactorStats& rs = s.fw->reactor(0).stats();
  const uint64_t busy0 = rs.busy_ticks.load(), idle0 = rs.idle_ticks.load();
  const uint64_t a0 = a->stats().idle_ticks.load(), b0 = b->stats().idle_ticks.load();
  const uint64_t last0 = rs.last_tick.load();
  constexpr int kSteps = 10;
  for (int i = 0; i < kSteps; ++i) {
    s.clock.advance(7);  // the simulator runs its devices
    s.fw->step();
  }
  EXPECT_EQ(rs.busy_ticks.load() - busy0, 5u * kSteps);
  EXPECT_EQ(rs.idle_ticks.load() - idle0, 7u * kSteps);
  EXPECT_EQ(a->stats().idle_ticks.load() - a0, 4u * kSteps);  // 7 split: 4 + 3
  EXPECT_EQ(b->stats().idle_ticks.load() - b0, 3u * kSteps);
  EXPECT_EQ(rs.busy_ticks.load() + rs.idle_ticks.load() - busy0 - idle0,
            rs.last_tick.load() - last0);
  EXPECT_EQ(rs.last_tick.load(), s.clock.now());
}

// A modelled CPU clock: pollers take what the model charged during their run, the iteration's
// own cost goes to the reactor alone, timed pollers keep to the framework's clock.
TEST(Reactor, ACpuClockThatModelsCostsIsWhatBusyAndIdleAreMeasuredWith) {
  StepFramework s("0x1");
  env::VirtualClock cpu{1'000'000'000};
  ASSERT_TRUE(s.fw->set_cpu_clock(&cpu));
  EXPECT_EQ(&s.fw->cpu_clock(), &cpu);
  Thread* t = s.fw->create_thread("host", 0);
  struct Charge {
    env::VirtualClock* cpu;
    uint64_t ticks;
    PollStatus status;
    int runs = 0;
  };
  auto charge = [](void* arg) {
    auto* c = static_cast<Charge*>(arg);
    ++c->runs;
    c->cpu->advance(c->ticks);
    return c->status;
  };
  Charge io{&cpu, 30, PollStatus::kBusy}, idle{&cpu, 4, PollStatus::kIdle},
      timer{&cpu, 0, PollStatus::kBusy};
  Poller* pollers[] = {
      t->register_poller(charge, &io, 0, "io"),
      t->register_poller(charge, &idle, 0, "idle"),
      // Period 1 us: 1000 ticks of the framework clock.
      t->register_poller(charge, &timer, /*period_us=*/1, "timer"),
  };
  s.fw->step(22);  // the thread arrives
  cpu.advance(22 + 100);
  const ReactorStats& rs = s.fw->reactor(0).stats();
  const uint64_t busy0 = rs.busy_ticks.load(), idle0 = rs.idle_ticks.load();
  const uint64_t last0 = rs.last_tick.load();
  const uint64_t t_busy0 = t->stats().busy_ticks.load(), t_idle0 = t->stats().idle_ticks.load();
  constexpr int kSteps = 10;
  for (int i = 0; i < kSteps; ++i) {
    s.fw->step(22);
    cpu.advance(22 + 100);  // the simulator charges the iteration, then jumps while idle
  }
  for (const PollerSample& p : t->poller_samples()) {
    const uint64_t want = p.name == "io" ? 30u * (kSteps + 1) : 0u;
    EXPECT_EQ(p.busy_ticks, want) << p.name;
  }
  EXPECT_EQ(timer.runs, 0) << "the CPU clock moved past 1 us; the framework clock stood still";
  EXPECT_EQ(t->stats().busy_ticks.load() - t_busy0, 34u * kSteps);
  EXPECT_EQ(t->stats().idle_ticks.load() - t_idle0, 100u * kSteps);  // the gaps
  EXPECT_EQ(rs.busy_ticks.load() - busy0, (34u + 22u) * kSteps);
  EXPECT_EQ(rs.idle_ticks.load() - idle0, 100u * kSteps);
  EXPECT_EQ(rs.busy_ticks.load() + rs.idle_ticks.load() - busy0 - idle0,
            rs.last_tick.load() - last0);
  EXPECT_EQ(rs.last_tick.load(), cpu.now() - 100);  // the last jump is booked by the next step

  s.clock.advance(1000);
  s.fw->step(22);
  EXPECT_EQ(timer.runs, 1);

  // Back to the framework clock, which is far ahead: no gap is counted across the switch.
  ASSERT_TRUE(s.fw->set_cpu_clock(nullptr));
  s.clock.advance(1'000'000);
  const uint64_t busy1 = rs.busy_ticks.load(), idle1 = rs.idle_ticks.load();
  s.fw->step();
  EXPECT_EQ(rs.busy_ticks.load() + rs.idle_ticks.load(), busy1 + idle1);
  EXPECT_EQ(rs.last_tick.load(), s.clock.now());
  // They use the clock and counters above: gone before those are (the framework's shutdown
  // would run them once more).
  for (Poller* p : pollers) t->unregister_poller(p);
}

TEST(Reactor, ACpuClockIsRefusedOutsideStepModeOrInOtherTicks) {
  StepFramework s("0x1");
  env::VirtualClock micro{1'000'000};
  EXPECT_FALSE(s.fw->set_cpu_clock(&micro));
  EXPECT_EQ(&s.fw->cpu_clock(), &s.clock);
  FrameworkOptions o;
  o.pin_reactors = false;
  auto r = Framework::create(o);
  ASSERT_TRUE(r.ok());
  env::VirtualClock cpu{r.value()->clock().ticks_per_second()};
  EXPECT_FALSE(r.value()->set_cpu_clock(&cpu));
}

}  // namespace
}  // namespace pollux::event
