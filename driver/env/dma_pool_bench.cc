// DMA buffer get/put through a per-thread cache, and straight from the shared pool.
//   bazel run //driver/env:dma_pool_bench
#include <benchmark/benchmark.h>

#include "driver/env/dma_pool.h"

namespace pollux::env {
namespace {

std::unique_ptr<DmaBufferPool> make_pool() {
  static MemoryRegistry registry;
  return std::move(DmaBufferPool::create(registry, 4096, 4096)).value();
}

void BM_CacheGetPut(benchmark::State& state) {
  auto pool = make_pool();
  DmaBufferCache cache(*pool, 64);
  for (auto _ : state) {
    void* b = cache.get();
    benchmark::DoNotOptimize(b);
    cache.put(b);
  }
}
BENCHMARK(BM_CacheGetPut);

// 128 gets then 128 puts: forces refills and flushes through the shared pool.
void BM_CacheGetPutBurst128(benchmark::State& state) {
  auto pool = make_pool();
  DmaBufferCache cache(*pool, 64);
  void* held[128];
  for (auto _ : state) {
    for (auto& b : held) b = cache.get();
    benchmark::DoNotOptimize(held);
    for (void* b : held) cache.put(b);
  }
  state.SetItemsProcessed(state.iterations() * 128);
}
BENCHMARK(BM_CacheGetPutBurst128);

void BM_SharedPoolGetPut(benchmark::State& state) {
  auto pool = make_pool();
  for (auto _ : state) {
    void* b;
    pool->get_bulk(&b, 1);
    benchmark::DoNotOptimize(b);
    pool->put_bulk(&b, 1);
  }
}
BENCHMARK(BM_SharedPoolGetPut);

}  // namespace
}  // namespace pollux::env

BENCHMARK_MAIN();
