// CPU cost of the FTL per host operation (simulated time is not what is measured here).
//   bazel run //emulator/timing:ftl_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>

#include "emulator/timing/nand.h"

namespace pollux::emu::timing {
namespace {

// 4 GiB raw: 4 channels x 2 dies x 2 planes x 512 blocks x 32 pages x 16 KiB (256-unit
// superblocks), small enough that the kSteady precondition takes about a second.
NandGeometry Geometry() {
  NandGeometry g;
  g.channels = 4;
  g.dies_per_channel = 2;
  g.planes_per_die = 2;
  g.blocks_per_plane = 512;
  g.pages_per_block = 32;
  g.page_bytes = 16384;
  return g;
}

struct Drive {
  Drive(int op_percent, Precondition p) : nand(Geometry(), NandTiming{}) {
    const uint64_t physical = uint64_t(4 * 2 * 2 * 512 * 32) * 4;
    FtlConfig c;
    c.logical_bytes = uint64_t(double(physical) / (1.0 + op_percent / 100.0)) * 4096;
    c.precondition = p;
    c.seed = 1;
    ftl = std::make_unique<Ftl>(c, nand);
  }
  NandArray nand;
  std::unique_ptr<Ftl> ftl;
};

// Google Benchmark calls each function several times; precondition each drive once.
Drive& SteadyDrive(int op_percent) {
  static std::map<int, std::unique_ptr<Drive>> drives;
  std::unique_ptr<Drive>& d = drives[op_percent];
  if (!d) d = std::make_unique<Drive>(op_percent, Precondition::kSteady);
  return *d;
}

uint64_t Below(std::mt19937_64& rng, uint64_t n) {
  return uint64_t((unsigned __int128)rng() * n >> 64);
}

// Random 4 KiB overwrites at steady state, GC included (arg: OP percent).
void BM_FtlRandomWriteSteady(benchmark::State& state) {
  Drive& d = SteadyDrive(int(state.range(0)));
  Ftl& ftl = *d.ftl;
  const uint64_t units = ftl.logical_units();
  std::mt19937_64 rng(7);
  const FtlStats before = ftl.stats();
  SimTime t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ftl.write(t, Below(rng, units)));
    t += 1000;
  }
  const FtlStats& s = ftl.stats();
  const double host = double(s.host_units_written - before.host_units_written);
  state.counters["WA"] = double(s.nand_units_written - before.nand_units_written) / host;
  state.counters["reloc/write"] = double(s.gc_relocations - before.gc_relocations) / host;
}
BENCHMARK(BM_FtlRandomWriteSteady)->Arg(7)->Arg(28);

// Random 4 KiB reads of a steady-state drive (map lookup + one NAND reservation).
void BM_FtlRandomReadSteady(benchmark::State& state) {
  Ftl& ftl = *SteadyDrive(28).ftl;
  const uint64_t units = ftl.logical_units();
  std::mt19937_64 rng(9);
  SimTime t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ftl.read(t, Below(rng, units)));
    t += 1000;
  }
}
BENCHMARK(BM_FtlRandomReadSteady);

// Sequential overwrites after a sequential fill: no relocation, one erase per superblock.
void BM_FtlSequentialWrite(benchmark::State& state) {
  static Drive d(7, Precondition::kSequential);
  Ftl& ftl = *d.ftl;
  const uint64_t units = ftl.logical_units();
  static uint64_t lpn = 0;
  SimTime t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ftl.write(t, lpn));
    if (++lpn == units) lpn = 0;
    t += 1000;
  }
  state.counters["WA"] = ftl.stats().write_amplification();
}
BENCHMARK(BM_FtlSequentialWrite);

// The array alone: one read reservation.
void BM_NandArrayRead(benchmark::State& state) {
  const NandGeometry g = Geometry();
  NandArray nand(g, NandTiming{});
  uint32_t i = 0;
  SimTime t = 0;
  for (auto _ : state) {
    const PhysPage p{i % g.channels, (i / g.channels) % g.dies_per_channel, 0, i % 512, 0};
    benchmark::DoNotOptimize(nand.read(t, p, 4096));
    ++i;
    t += 1000;
  }
}
BENCHMARK(BM_NandArrayRead);

// Building an 800 GB drive (the P3700 layout) with a sequential precondition.
void BM_Construct800GbSequential(benchmark::State& state) {
  NandGeometry g;
  g.channels = 18;
  g.dies_per_channel = 4;
  g.planes_per_die = 2;
  g.blocks_per_plane = 1512;
  g.pages_per_block = 256;
  g.page_bytes = 16384;
  FtlConfig c;
  c.logical_bytes = 1'562'824'368ull * 512;
  c.precondition = Precondition::kSequential;
  for (auto _ : state) {
    NandArray nand(g, NandTiming{});
    Ftl ftl(c, nand);
    benchmark::DoNotOptimize(ftl.free_blocks());
  }
}
BENCHMARK(BM_Construct800GbSequential)->Unit(benchmark::kMillisecond);

// The kSteady precondition of the benchmark drive (O(capacity), untimed).
void BM_PreconditionSteady(benchmark::State& state) {
  for (auto _ : state) {
    Drive d(int(state.range(0)), Precondition::kSteady);
    state.counters["capacities"] =
        double(d.ftl->precondition_host_units()) / double(d.ftl->logical_units());
    state.counters["WA"] = d.ftl->precondition_write_amplification();
  }
}
BENCHMARK(BM_PreconditionSteady)->Arg(7)->Arg(28)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace pollux::emu::timing
