// The driver's hot path alone: submit + process_completions against a loopback "device"
// that completes every SQE at once (no data is moved). What remains is the driver's own
// CPU per I/O, the figure spdk reports as ~50 ns submit + ~100 ns complete.
//   bazel run //driver/nvme:qpair_bench
//   valgrind --tool=callgrind bazel-bin/driver/nvme/qpair_bench --benchmark_filter=Fixed
#include <benchmark/benchmark.h>

#include <cstring>

#include "driver/env/dma_memory.h"
#include "driver/nvme/namespace.h"
#include "driver/nvme/pcie.h"
#include "driver/nvme/qpair.h"

namespace pollux::nvme {
namespace {
namespace sn = spec::nvme;

class LoopbackDevice : public env::PciDevice {
 public:
  int config_read(uint32_t, void*, std::size_t) override { return -ENOTSUP; }
  int config_write(uint32_t, const void*, std::size_t) override { return -ENOTSUP; }
  int bar_read(int, uint64_t, void*, std::size_t) override { return -ENOTSUP; }
  int bar_write(int, uint64_t, const void*, std::size_t) override { return -ENOTSUP; }
  volatile void* bar_map(int, uint64_t off, std::size_t) override { return db_ + off / 4; }
  int reset() override { return 0; }
  std::string address() const override { return "loopback"; }

  // Completes everything the doorbell shows; returns how many.
  uint32_t echo(sn::SubmissionEntry* sq, sn::CompletionEntry* cq, uint32_t size) {
    const uint32_t tail = db_[sn::reg::sq_tail_doorbell(1, 0) / 4];
    uint32_t n = 0;
    while (head_ != tail) {
      sn::CompletionEntry c{};
      c.cid = sq[head_].cid;
      head_ = (head_ + 1) % size;
      c.sqhd = static_cast<uint16_t>(head_);
      c.sqid = 1;
      c.status = phase_;
      cq[ctail_] = c;
      if (++ctail_ == size) {
        ctail_ = 0;
        phase_ ^= 1;
      }
      ++n;
    }
    return n;
  }

 private:
  uint32_t db_[0x2000 / 4] = {};
  uint32_t head_ = 0, ctail_ = 0;
  uint16_t phase_ = 1;
};

struct Bench {
  explicit Bench(bool track_latency = false) {
    ctx.device = &dev;
    ctx.registry = &registry;
    ctx.clock = &env::system_clock();
    ns.id = 1;
    ns.block_size = 512;
    ns.num_blocks = 1 << 30;
    QpairOptions o;
    o.queue_size = 256;
    o.track_latency = track_latency;
    qp = std::move(make_pcie_qpair(ctx, 1, o)).value();
    sq = reinterpret_cast<sn::SubmissionEntry*>(pcie_queue(*qp).sq_iova());
    cq = reinterpret_cast<sn::CompletionEntry*>(pcie_queue(*qp).cq_iova());
    buf = std::move(env::DmaRegion::create(registry, 4096 * 128)).value();
  }
  env::MemoryRegistry registry;
  LoopbackDevice dev;
  PcieQueueContext ctx;
  Namespace ns;
  std::unique_ptr<Qpair> qp;
  std::unique_ptr<env::DmaRegion> buf;
  sn::SubmissionEntry* sq;
  sn::CompletionEntry* cq;
};

void count(void* ctx, const sn::CompletionEntry&) { ++*static_cast<uint64_t*>(ctx); }

// Batches of `depth` 4 KiB reads: submit all, device echoes, reap all. Per-I/O cost reported.
// Argument 2 = 1: with the latency histogram (metrics) on.
void BM_SubmitAndComplete(benchmark::State& state) {
  Bench b(state.range(1) != 0);
  const auto depth = static_cast<uint32_t>(state.range(0));
  uint64_t done = 0;
  auto* base = static_cast<uint8_t*>(b.buf->data());
  for (auto _ : state) {
    for (uint32_t i = 0; i < depth; ++i)
      b.qp->read(b.ns, base + (i % 128) * 4096, i * 8, 8, count, &done);
    b.qp->flush_doorbell();
    b.dev.echo(b.sq, b.cq, 256);
    b.qp->process_completions();
  }
  if (done != static_cast<uint64_t>(state.iterations()) * depth) state.SkipWithError("lost completions");
  state.SetItemsProcessed(state.iterations() * depth);
  state.counters["ns_per_io"] = benchmark::Counter(static_cast<double>(done),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SubmitAndComplete)->ArgsProduct({{1, 32, 128}, {0, 1}})->ArgNames({"depth", "latency"});

// The loopback device's share, to subtract: echo alone over pre-built SQEs.
void BM_LoopbackDeviceOnly(benchmark::State& state) {
  Bench b;
  const auto depth = static_cast<uint32_t>(state.range(0));
  auto* db = static_cast<volatile uint32_t*>(b.dev.bar_map(0, sn::reg::sq_tail_doorbell(1, 0), 4));
  uint32_t tail = 0;
  for (auto _ : state) {
    tail = (tail + depth) % 256;
    *db = tail;
    benchmark::DoNotOptimize(b.dev.echo(b.sq, b.cq, 256));
  }
  state.SetItemsProcessed(state.iterations() * depth);
  state.counters["ns_per_io"] = benchmark::Counter(
      static_cast<double>(state.iterations() * depth),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_LoopbackDeviceOnly)->Arg(32);

// A fixed amount of work for instruction counting under callgrind: 1 M I/Os at depth 32.
void BM_FixedMillionIos(benchmark::State& state) {
  for (auto _ : state) {
    Bench b;
    uint64_t done = 0;
    auto* base = static_cast<uint8_t*>(b.buf->data());
    while (done < 1'000'000) {
      for (uint32_t i = 0; i < 32; ++i) b.qp->read(b.ns, base + i * 4096, i * 8, 8, count, &done);
      b.qp->flush_doorbell();
      b.dev.echo(b.sq, b.cq, 256);
      b.qp->process_completions();
    }
  }
}
BENCHMARK(BM_FixedMillionIos)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pollux::nvme

BENCHMARK_MAIN();
