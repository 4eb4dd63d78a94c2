// Functional-emulator throughput on one core: a full I/O SQ of 4 KiB commands is queued,
// polled, reaped and recycled (the host side is a minimal loop, no driver).
//
//   bazel run //emulator/nvme:controller_bench --
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

// args: queue depth, distinct host buffers (1) or one shared buffer (0), LBA span.
void run(benchmark::State& state, uint8_t opcode) {
  const uint32_t qd = static_cast<uint32_t>(state.range(0));
  const bool distinct = state.range(1) != 0;
  const uint32_t span = static_cast<uint32_t>(state.range(2));  // LBAs touched (4 KiB each)
  ControllerConfig cfg = small_config();
  cfg.max_queue_entries = 4096;
  cfg.namespaces = {NamespaceConfig{1ull << 30, 4096, "memory"}};
  TestHost h(cfg);
  if (!h.enable() || !h.create_io_queue_pair(1, 2 * qd)) {
    state.SkipWithError("setup failed");
    return;
  }
  HostQueue& q = h.queue(1);
  const uint32_t entries = 2 * qd;
  uint8_t* bufs = h.alloc(size_t{distinct ? qd : 1} * 4096);
  std::memset(bufs, 0x5a, size_t{distinct ? qd : 1} * 4096);
  // Allocate the LBAs the reads touch (written data, not the zero path).
  for (uint32_t l = 0; l < span; ++l) {
    auto w = h.io(1, TestHost::rw(sp::nvm::kWrite, 1, l, 1, TestHost::iova(bufs)));
    if (!ok(w)) {
      state.SkipWithError("prefill failed");
      return;
    }
  }
  // Fill the whole ring once; entries are reused as the tail wraps.
  const uint32_t base = q.sq_tail;
  for (uint32_t i = 0; i < entries; ++i) {
    const uint32_t slot = (base + i) % entries;
    sp::SubmissionEntry c = opcode == sp::nvm::kFlush
                                ? TestHost::rw(sp::nvm::kFlush, 1, 0, 1, 0)
                                : TestHost::rw(opcode, 1, (i * 7) % span, 1,
                                               TestHost::iova(bufs + (distinct ? (i % qd) * 4096 : 0)));
    c.cid = static_cast<uint16_t>(i);
    q.sq[slot] = c;
  }
  Controller& ctrl = h.ctrl();
  uint32_t tail = base;
  uint64_t done = 0, errors = 0;
  for (auto _ : state) {
    tail = (tail + qd) % entries;
    h.write_sq_doorbell(1, tail);
    size_t n = 0;
    while (n < qd) n += ctrl.poll(qd - n);
    for (uint32_t i = 0; i < qd; ++i) {
      const sp::CompletionEntry& e = q.cq[q.cq_head];
      errors += (e.status >> 1) != 0;
      if (++q.cq_head == q.cq_size) {
        q.cq_head = 0;
        q.phase = !q.phase;
      }
    }
    h.write_cq_doorbell(1, q.cq_head);
    done += qd;
  }
  if (errors) state.SkipWithError("commands failed");
  state.SetItemsProcessed(static_cast<int64_t>(done));
  state.counters["IOPS"] = benchmark::Counter(static_cast<double>(done), benchmark::Counter::kIsRate);
  state.counters["bytes_per_s"] = benchmark::Counter(
      opcode == sp::nvm::kFlush ? 0.0 : static_cast<double>(done) * 4096, benchmark::Counter::kIsRate);
}

void BM_Read4K(benchmark::State& s) { run(s, sp::nvm::kRead); }
void BM_Write4K(benchmark::State& s) { run(s, sp::nvm::kWrite); }
void BM_Flush(benchmark::State& s) { run(s, sp::nvm::kFlush); }  // no data: command overhead

// {QD, distinct buffers, LBA span}
BENCHMARK(BM_Read4K)->Args({128, 0, 1})->Args({128, 1, 128})->Args({128, 1, 4096})->Args({1024, 1, 4096});
BENCHMARK(BM_Write4K)->Args({128, 0, 1})->Args({128, 1, 128})->Args({128, 1, 4096});
BENCHMARK(BM_Flush)->Args({128, 0, 1});

}  // namespace
}  // namespace pollux::emu::nvme::testing

BENCHMARK_MAIN();
