// Smoke test for //third_party:benchmark: registers a benchmark, runs it through
// benchmark::RunSpecifiedBenchmarks with a reporter that captures the results, checks them.
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "gtest/gtest.h"

namespace {

constexpr benchmark::IterationCount kIterations = 1000;

class CapturingReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context& /*context*/) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    runs_.insert(runs_.end(), runs.begin(), runs.end());
  }
  const std::vector<Run>& runs() const { return runs_; }

 private:
  std::vector<Run> runs_;
};

int64_t body_iterations = 0;

void BM_SmokeSum(benchmark::State& state) {
  uint64_t sum = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < state.range(0); ++i) sum += static_cast<uint64_t>(i);
    benchmark::DoNotOptimize(sum);
    ++body_iterations;
  }
  state.counters["bytes_seen"] = static_cast<double>(state.range(0));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

TEST(BenchmarkSmokeTest, RunsRegisteredBenchmark) {
  benchmark::RegisterBenchmark("BM_SmokeSum", BM_SmokeSum)->Arg(64)->Iterations(kIterations);

  CapturingReporter reporter;
  const size_t matched = benchmark::RunSpecifiedBenchmarks(&reporter, "BM_SmokeSum");
  EXPECT_EQ(matched, 1u);

  ASSERT_EQ(reporter.runs().size(), 1u);
  const auto& run = reporter.runs()[0];
  EXPECT_EQ(run.benchmark_name(), "BM_SmokeSum/64/iterations:1000");
  EXPECT_FALSE(run.error_occurred);
  EXPECT_EQ(run.iterations, kIterations);
  EXPECT_GT(run.real_accumulated_time, 0.0);
  ASSERT_EQ(run.counters.count("bytes_seen"), 1u);
  EXPECT_EQ(static_cast<double>(run.counters.at("bytes_seen")), 64.0);
  EXPECT_EQ(body_iterations, kIterations);

  benchmark::Shutdown();
}

}  // namespace
