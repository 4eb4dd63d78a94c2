// Link check for //third_party:benchmark_main (it supplies main()). Run it by hand:
//   bazel run //third_party/smoke:benchmark_main_smoke -- --benchmark_min_time=0.01
#include <string>

#include "benchmark/benchmark.h"

namespace {

void BM_StringCopy(benchmark::State& state) {
  const std::string source(64, 'x');
  for (auto _ : state) {
    std::string copy(source);
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_StringCopy);

}  // namespace
