// Cycles per second of the two queue engine models. Both replay one recorded stream of
// host-like stimulus (stimulus.h; it starts with a reset, so every pass is the same), plus an
// idle stream (no inputs at all) for the floor cost of an edge.
#include <vector>

#include "benchmark/benchmark.h"
#include "emulator/rtl/queue_engine.h"
#include "emulator/rtl/queue_engine_ref.h"
#include "emulator/rtl/rtl_queue_engine.h"
#include "emulator/rtl/stimulus.h"

namespace pollux::emu::rtl {
namespace {

const std::vector<QueueEngineInputs>& Recorded() {
  static const std::vector<QueueEngineInputs> stream = [] {
    std::vector<QueueEngineInputs> s(1 << 18);
    RefQueueEngine ref;
    Stimulus stimulus(1);
    for (auto& in : s) {
      in = stimulus.next(ref);
      ref.tick(in);
    }
    s.front() = QueueEngineInputs{.reset = true};
    return s;
  }();
  return stream;
}

template <typename Model>
void BM_Random(benchmark::State& state) {
  const auto& stream = Recorded();
  Model model;
  size_t i = 0;
  uint64_t grants = 0;
  for (auto _ : state) {
    grants += model.tick(stream[i]).fetch_valid;
    if (++i == stream.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());  // items = cycles
  state.counters["grants/cycle"] = double(grants) / double(state.iterations());
}

template <typename Model>
void BM_Idle(benchmark::State& state) {
  Model model;
  const QueueEngineInputs idle;
  for (auto _ : state) benchmark::DoNotOptimize(model.tick(idle).busy);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_TEMPLATE(BM_Random, RefQueueEngine);
BENCHMARK_TEMPLATE(BM_Random, RtlQueueEngine);
BENCHMARK_TEMPLATE(BM_Idle, RefQueueEngine);
BENCHMARK_TEMPLATE(BM_Idle, RtlQueueEngine);

}  // namespace
}  // namespace pollux::emu::rtl
