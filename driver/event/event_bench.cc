// Costs of the event framework's basic operations. Run pinned, machine otherwise idle:
//   bazel run //driver/event:event_bench -- --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>

#include "driver/event/framework.h"

namespace pollux::event {
namespace {

std::unique_ptr<Framework> step_framework(const char* mask = "0x1") {
  FrameworkOptions o;
  o.core_mask = mask;
  o.step_mode = true;
  return std::move(Framework::create(o)).value();
}

// One read of the framework's clock (the invariant TSC here): the bdev layer takes two per
// I/O, the loop one per poller run. In this VM a TSC read costs ~10 ns, as much as a
// null-bdev I/O's whole share of an iteration at depth 128.
void BM_ClockRead(benchmark::State& state) {
  const env::Clock& clock = env::system_clock();
  for (auto _ : state) benchmark::DoNotOptimize(clock.now());
}
BENCHMARK(BM_ClockRead);

// One reactor iteration over one thread that has nothing to do.
void BM_EmptyReactorIteration(benchmark::State& state) {
  auto fw = step_framework();
  fw->create_thread("idle");
  Reactor& r = fw->reactor(0);
  for (auto _ : state) benchmark::DoNotOptimize(r.run_once());
}
BENCHMARK(BM_EmptyReactorIteration);

PollStatus idle_poller(void* arg) {
  benchmark::DoNotOptimize(arg);
  return PollStatus::kIdle;
}

// Reactor iteration with N idle active pollers; the per-poller cost is reported too.
void BM_PollerDispatch(benchmark::State& state) {
  auto fw = step_framework();
  Thread* t = fw->create_thread("pollers");
  const auto n = static_cast<int>(state.range(0));
  for (int i = 0; i < n; ++i) t->register_poller(idle_poller, nullptr, 0, "idle");
  Reactor& r = fw->reactor(0);
  for (auto _ : state) benchmark::DoNotOptimize(r.run_once());
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["ns_per_poller"] = benchmark::Counter(
      static_cast<double>(state.iterations() * n),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PollerDispatch)->Arg(1)->Arg(8)->Arg(64);

// send_msg to a thread on the same reactor, then one iteration to run it.
void BM_LocalMessage(benchmark::State& state) {
  auto fw = step_framework();
  Thread* t = fw->create_thread("self");
  Reactor& r = fw->reactor(0);
  uint64_t ran = 0;
  for (auto _ : state) {
    t->send_msg([](void* a) { ++*static_cast<uint64_t*>(a); }, &ran);
    r.run_once();
  }
  if (ran != static_cast<uint64_t>(state.iterations())) state.SkipWithError("messages lost");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LocalMessage);

// Throughput of messages from a thread on reactor 0 to a thread on reactor 1, free-running
// and pinned (cores 0 and 1). One benchmark iteration = kBatch messages.
constexpr int kBatch = 1'000'000;

struct CrossCore {
  Framework* fw;
  Thread* receiver;
  int sent = 0;
  std::atomic<int> received{0};
};

void BM_CrossCoreMessages(benchmark::State& state) {
  for (auto _ : state) {
    FrameworkOptions o;
    o.core_mask = "0x3";
    auto created = Framework::create(o);
    if (!created) {
      state.SkipWithError(created.error().message.c_str());
      return;
    }
    auto fw = std::move(created).value();
    CrossCore cc{fw.get(), fw->create_thread("receiver", 1)};
    state.PauseTiming();  // framework set-up is not what we measure...
    state.ResumeTiming();  // ...but run() includes thread start (µs, amortised over 1 M)
    fw->run(
        [](void* arg) {
          Thread::current()->register_poller(
              [](void* a) {
                auto* c = static_cast<CrossCore*>(a);
                while (c->sent < kBatch &&
                       c->receiver->send_msg(
                           [](void* m) {
                             auto* c = static_cast<CrossCore*>(m);
                             const int n = c->received.load(std::memory_order_relaxed) + 1;
                             c->received.store(n, std::memory_order_relaxed);
                             if (n == kBatch) c->fw->stop();
                           },
                           c) == 0) {
                  ++c->sent;
                }
                return PollStatus::kBusy;
              },
              arg, 0, "sender");
        },
        &cc);
    if (cc.received.load() != kBatch) state.SkipWithError("messages lost");
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns_per_msg"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kBatch),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CrossCoreMessages)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// Round trip: a message to reactor 1 that sends one back, repeated; measures latency.
struct PingPong {
  Framework* fw;
  Thread* a;
  Thread* b;
  int rounds = 0;
  int target = 0;
};

void pong(void* arg);
void ping(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  p->a->send_msg(pong, p);
}
void pong(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  if (++p->rounds == p->target) {
    p->fw->stop();
    return;
  }
  p->b->send_msg(ping, p);
}

void BM_CrossCoreRoundTrip(benchmark::State& state) {
  constexpr int kRounds = 200'000;
  for (auto _ : state) {
    FrameworkOptions o;
    o.core_mask = "0x3";
    auto fw = std::move(Framework::create(o)).value();
    PingPong p{fw.get(), nullptr, fw->create_thread("b", 1), 0, kRounds};
    fw->run(
        [](void* arg) {
          auto* p = static_cast<PingPong*>(arg);
          p->a = Thread::current();
          p->b->send_msg(ping, p);
        },
        &p);
  }
  state.SetItemsProcessed(state.iterations() * kRounds);
  state.counters["ns_per_round_trip"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kRounds),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CrossCoreRoundTrip)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// The machine's floor for the two benchmarks above: two pinned OS threads bouncing one
// atomic (no framework at all). A cross-core message can't be cheaper than half of this.
void BM_RawCacheLineRoundTrip(benchmark::State& state) {
  constexpr int kRounds = 200'000;
  for (auto _ : state) {
    alignas(64) std::atomic<int> ball{0};
    std::thread other([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(1, &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      for (int i = 0; i < kRounds; ++i) {
        while (ball.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        ball.store(2 * i + 2, std::memory_order_release);
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      ball.store(2 * i + 1, std::memory_order_release);
      while (ball.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    other.join();
  }
  state.counters["ns_per_round_trip"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kRounds),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_RawCacheLineRoundTrip)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace
}  // namespace pollux::event

BENCHMARK_MAIN();
