// pollux-bdevperf: the bdev layer's benchmark, modelled on SPDK's bdevperf.
//   pollux-bdevperf --json bdev.json -q 128 -o 4096 -w randread -t 5 -m 0x1
//   pollux-bdevperf --null Null0:1048576 -q 128 -o 4096 -w randread -t 5
// One job per bdev per core (bdevs claimed by a virtual bdev are skipped: use the top one).
// Workloads: read write randread randwrite rw (with -M) verify reset unmap flush. verify
// writes per-block headers (LBA + generation) and reads them back; reset is verify with a
// bdev reset every --reset-period seconds. Latencies are the bdev layer's (submission to
// completion callback, per channel), as SPDK's bdevperf takes them from the bdev histogram.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/text.h"
#include "driver/bdev/bdev.h"
#include "driver/bdev/config.h"
#include "driver/bdev/modules/config_methods.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/bdev/modules/null.h"
#include "driver/env/dma_pool.h"
#include "driver/env/histogram.h"
#include "driver/env/pattern.h"
#include "driver/env/rng.h"
#include "driver/metrics/bdev_source.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/nvme_source.h"
#include "driver/nvme/emulator_status.h"
#include "driver/lvol/config.h"

using namespace pollux;
using event::PollStatus;
using event::Thread;

namespace {

enum class Workload { kRead, kWrite, kRandRead, kRandWrite, kRw, kRandRw, kVerify, kReset, kUnmap, kFlush };

struct Config {
  Workload kind = Workload::kRandRead;  // parsed once: the hot path never looks at strings
  bool random = true;
  bool verify = false;
  std::string json;
  std::vector<std::string> nulls, mallocs;
  uint32_t qd = 128;
  uint32_t io_size = 4096;
  std::string workload = "randread";
  int read_pct = 100;
  double seconds = 5;
  double reset_period = 1;
  std::string core_mask = "0x1";
  uint64_t seed = 1;
  std::string summary;
  std::string metrics;  // host:port, empty: off
  double interval = 0;  // -S: a line per job every this many seconds (0: none)
};

// One interval of one job (-S).
struct IntervalSample {
  double end_s = 0;  // since the job started
  uint64_t ios = 0, errors = 0, bytes = 0;
  double mean_us = 0, p99_us = 0, max_us = 0;
};

struct Job;
struct Task {
  Job* job;
  uint32_t index;
  uint8_t* buf;
  uint64_t offset = 0;
  uint64_t generation = 0;
  bdev::IoType type = bdev::IoType::kRead;
  bool verify_read = false;
  bool busy = false;
};

struct Job {
  const Config* cfg;
  bdev::Manager* mgr;
  bdev::Desc* desc = nullptr;
  event::IoChannel* ch = nullptr;
  const env::Clock* clock;
  std::string name;
  int core;
  uint32_t blocks_per_io;
  uint64_t slots;
  uint64_t stripe_base = 0, stripe_count = 1;
  env::FastRng rng;
  std::vector<Task> tasks;
  uint64_t seq = 0;
  bool draining = false;
  uint32_t busy = 0;
  uint64_t started = 0, ended = 0, next_reset = 0;
  bool reset_outstanding = false;
  // Submission to completion of the job's I/O, as the bdev layer measured it on the job's
  // channel (taken from it before the channel is given back): like SPDK's bdevperf, which
  // reads its latencies from the bdev layer's histogram, no clock is read here per I/O.
  env::LatencyHistogram latency;
  uint64_t ios = 0, bytes = 0, errors = 0, verify_failures = 0, resets = 0;
  // Hot removal: the bdev went away (kRemove); the job stops submitting, lets go once its
  // I/O has ended, and opens the bdev again when a bdev of that name is back (hot-plug).
  bool removed = false;
  uint64_t reopens = 0, ios_at_reopen = 0;
  std::string first_error;
  Thread* thread = nullptr;
  // -S: the counters at the last interval's end, and the series.
  uint64_t next_interval = 0, last_ios = 0, last_bytes = 0, last_errors = 0;
  env::LatencyHistogram last_latency;
  std::vector<IntervalSample> intervals;
};

struct Run {
  Config cfg;
  event::Framework* fw;
  bdev::Manager* mgr;
  bdev::StandardModules* modules;
  std::unique_ptr<env::DmaBufferPool> pool;
  std::vector<std::unique_ptr<Job>> jobs;
  std::atomic<int> jobs_left{0};
  std::atomic<int> detaching{0};
  int rc = 0;
  // With --metrics: bdev statistics gathered on the app thread, queue pairs as they come.
  metrics::Exporter* exporter = nullptr;
  std::unique_ptr<metrics::BdevCollector> bdev_stats;
  std::unique_ptr<metrics::QpairRegistry> qpairs;
  // Pollux emulators behind NVMe controllers: their realtime status at the end of the run.
  std::vector<bdev::NvmeEmulatorStatus> emulators;
};
Run* g_run;
constexpr uint64_t kBdevStatsPeriodUs = 500'000;
constexpr double kMaxSeconds = 1e6;  // times become clock ticks: far below 2^64 of them
double us(const env::Clock& c, double ticks);

void on_done(bdev::BdevIo& io, bool ok, void* arg);

void submit(Task& t) {
  Job& j = *t.job;
  const Config& c = *j.cfg;
  const bool verify = c.verify;
  if (!t.verify_read) {
    uint64_t slot = c.random ? j.rng.below(j.slots) : j.seq++ % j.slots;
    if (verify) {
      slot = slot / j.stripe_count * j.stripe_count + j.stripe_base + t.index;
      if (slot >= j.slots) slot = j.stripe_base + t.index;
    }
    t.offset = slot * j.blocks_per_io;
    if (verify) {
      t.type = bdev::IoType::kWrite;
      t.generation = j.rng() | 1;
      env::fill_pattern(t.buf, t.offset, j.blocks_per_io, j.desc->bdev().block_size(),
                        t.generation);
    } else if (c.kind == Workload::kUnmap) {
      t.type = bdev::IoType::kUnmap;
    } else if (c.kind == Workload::kFlush) {
      t.type = bdev::IoType::kFlush;
    } else {
      const bool read = c.read_pct == 100 ||
                        (c.read_pct > 0 && static_cast<int>(j.rng.below(100)) < c.read_pct);
      t.type = read ? bdev::IoType::kRead : bdev::IoType::kWrite;
    }
  } else {
    t.type = bdev::IoType::kRead;
    // It must not pass on what the buffer already holds (this task's write).
    env::poison(t.buf, std::size_t{j.blocks_per_io} * j.desc->bdev().block_size());
  }
  int rc;
  switch (t.type) {
    case bdev::IoType::kRead:
      rc = j.mgr->read(j.desc, j.ch, t.buf, t.offset, j.blocks_per_io, on_done, &t);
      break;
    case bdev::IoType::kWrite:
      rc = j.mgr->write(j.desc, j.ch, t.buf, t.offset, j.blocks_per_io, on_done, &t);
      break;
    case bdev::IoType::kUnmap:
      rc = j.mgr->unmap(j.desc, j.ch, t.offset, j.blocks_per_io, on_done, &t);
      break;
    default:
      rc = j.mgr->flush(j.desc, j.ch, t.offset, j.blocks_per_io, on_done, &t);
      break;
  }
  if (rc != 0) {
    ++j.errors;
    if (j.first_error.empty()) j.first_error = fmt::format("submit: {}", std::strerror(-rc));
    if (!j.removed) j.draining = true;  // a bdev being removed: wait for it to come back
    if (t.busy) {  // resubmitted from its completion: the task idles now
      t.busy = false;
      --j.busy;
    }
    return;
  }
  if (!t.busy) {
    t.busy = true;
    ++j.busy;
  }
}

void on_done(bdev::BdevIo& io, bool ok, void* arg) {
  Task& t = *static_cast<Task*>(arg);
  Job& j = *t.job;
  if (!ok) {
    ++j.errors;
    if (j.first_error.empty()) j.first_error = fmt::format("I/O: {}", bdev::to_string(io.status()));
  } else {
    ++j.ios;
    j.bytes += uint64_t{j.blocks_per_io} * j.desc->bdev().block_size();
    if (t.verify_read) {
      std::string why;
      if (!env::check_pattern(t.buf, t.offset, j.blocks_per_io, j.desc->bdev().block_size(),
                              t.generation, &why)) {
        ++j.verify_failures;
        if (j.first_error.empty()) j.first_error = "verify: " + why;
      }
    }
  }
  if (j.draining || j.removed) {
    t.busy = false;
    --j.busy;
    return;
  }
  t.verify_read = t.type == bdev::IoType::kWrite && ok && j.cfg->verify;
  submit(t);
}

void on_bdev_event(bdev::DescEvent e, bdev::Bdev&, void* arg) {
  if (e == bdev::DescEvent::kRemove) static_cast<Job*>(arg)->removed = true;
}

// The channel's latencies of the job's own I/O: reads, writes and (unmap, flush) the others
// — a reset workload's resets are not task I/O.
void collect_latency(Job& j) {
  const bdev::IoStats& s = j.mgr->channel_stats(j.ch);
  j.latency.merge(s.read_latency);
  j.latency.merge(s.write_latency);
  if (j.cfg->kind != Workload::kReset) j.latency.merge(s.other_latency);
}

// The job's bdev left: once its I/O has ended, give back the channel and the descriptor (the
// removal waits for them); later, open a bdev of the same name again and carry on.
void follow_removal(Job& j) {
  if (j.desc != nullptr && j.busy == 0) {
    collect_latency(j);
    j.mgr->put_io_channel(j.ch);
    j.mgr->close(j.desc);
    j.desc = nullptr;
    j.ch = nullptr;
  }
  if (j.desc != nullptr || j.draining) return;
  const bool writes = j.cfg->kind != Workload::kRead && j.cfg->kind != Workload::kRandRead;
  auto d = j.mgr->open(j.name, writes, on_bdev_event, &j);
  if (!d) return;  // not back yet
  j.desc = *d;
  j.ch = j.mgr->get_io_channel(j.desc);
  j.removed = false;
  j.last_latency.reset();  // a new channel counts from zero
  ++j.reopens;
  j.ios_at_reopen = j.ios;
  for (Task& t : j.tasks) {
    t.verify_read = false;  // what it wrote before may not have reached the media
    submit(t);
  }
}

// After the last job: detach NVMe controllers (their bdevs, qpairs, admin pollers), then stop.
void detach_all(void*);

void teardown(void*) {
  // The collector's descriptors go first: they would hold the bdevs.
  if (g_run->bdev_stats) {
    g_run->bdev_stats->stop(detach_all, nullptr);
    return;
  }
  detach_all(nullptr);
}

void detach_all(void*) {
  bdev::nvme_hotplug_stop(*g_run->mgr);  // else it would attach what we detach
  auto names = bdev::nvme_controller_names(*g_run->mgr);
  // Before they go: did an emulator's realtime model keep up? (This is their admin thread.)
  for (const auto& n : names)
    if (auto st = bdev::nvme_emulator_status(*g_run->mgr, n); st && st.value())
      g_run->emulators.push_back(*st.value());
  g_run->detaching = static_cast<int>(names.size()) + 1;
  auto one_done = [](void*) {
    if (g_run->detaching.fetch_sub(1) == 1) g_run->fw->stop(g_run->rc);
  };
  for (const auto& n : names)
    if (bdev::nvme_detach_controller(*g_run->mgr, n, one_done, nullptr) != 0) one_done(nullptr);
  one_done(nullptr);
}

void finish_job(Job& j) {
  j.ended = j.clock->now();
  if (j.desc != nullptr) {
    collect_latency(j);
    j.mgr->put_io_channel(j.ch);
    j.mgr->close(j.desc);
  }
  if (g_run->jobs_left.fetch_sub(1) == 1) {
    event::Thread* app = g_run->fw->thread_at(0);  // the app thread: where controllers attached
    if (app->send_msg(teardown, nullptr) != 0) g_run->fw->stop(g_run->rc);
  }
}

// -S: the job's interval that just ended, from its counters and its channel's latencies.
void sample_interval(Job& j, uint64_t now) {
  const double secs = j.cfg->interval;
  env::LatencyHistogram lat;
  if (j.ch != nullptr) {
    const bdev::IoStats& st = j.mgr->channel_stats(j.ch);
    lat.merge(st.read_latency);
    lat.merge(st.write_latency);
    if (j.cfg->kind != Workload::kReset) lat.merge(st.other_latency);
  }
  const env::LatencyHistogram d = lat.since(j.last_latency);
  j.last_latency = lat;
  IntervalSample x;
  x.end_s = j.clock->ticks_to_seconds(now - j.started);
  x.ios = j.ios - j.last_ios;
  x.errors = j.errors - j.last_errors;
  x.bytes = j.bytes - j.last_bytes;
  j.last_ios = j.ios, j.last_errors = j.errors, j.last_bytes = j.bytes;
  x.mean_us = us(*j.clock, d.mean());
  x.p99_us = us(*j.clock, d.quantile(0.99));
  x.max_us = us(*j.clock, d.max());
  fmt::print("[{:7.2f} s] {} (core {}): {:>10.0f} IOPS {:>9.2f} MiB/s  mean {:>9.2f} us  p99 "
             "{:>9.2f} us  max {:>9.2f} us{}\n",
             x.end_s, j.name, j.core, double(x.ios) / secs, double(x.bytes) / secs / (1 << 20),
             x.mean_us, x.p99_us, x.max_us, x.errors ? fmt::format("  {} errors", x.errors) : "");
  std::fflush(stdout);
  j.intervals.push_back(x);
}

PollStatus watch(void* arg) {
  Job& j = *static_cast<Job*>(arg);
  if (j.ended) return PollStatus::kIdle;
  const uint64_t now = j.clock->now();
  if (j.next_interval != 0 && now >= j.next_interval && !j.draining) {
    sample_interval(j, now);
    j.next_interval += static_cast<uint64_t>(j.cfg->interval * j.clock->ticks_per_second());
  }
  if (now >= j.started + static_cast<uint64_t>(j.cfg->seconds * j.clock->ticks_per_second()))
    j.draining = true;
  if (j.removed) follow_removal(j);
  if (j.cfg->kind == Workload::kReset && j.desc != nullptr && !j.removed && !j.draining &&
      !j.reset_outstanding && now >= j.next_reset) {
    j.reset_outstanding = true;
    j.mgr->reset(j.desc, j.ch,
                 [](bdev::BdevIo&, bool ok, void* a) {
                   auto& job = *static_cast<Job*>(a);
                   job.reset_outstanding = false;
                   ++job.resets;
                   if (!ok && job.first_error.empty()) job.first_error = "reset failed";
                   job.next_reset = job.clock->now() + static_cast<uint64_t>(
                       job.cfg->reset_period * job.clock->ticks_per_second());
                 },
                 &j);
  }
  if (j.draining && j.busy == 0 && !j.reset_outstanding) {
    finish_job(j);
    return PollStatus::kBusy;
  }
  return PollStatus::kIdle;
}

void start_job(void* arg) {
  Job& j = *static_cast<Job*>(arg);
  Thread* self = Thread::current();
  j.core = g_run->fw->reactor(static_cast<std::size_t>(self->reactor_index())).core();
  const bool writes = j.cfg->kind != Workload::kRead && j.cfg->kind != Workload::kRandRead;
  auto d = j.mgr->open(j.name, writes, on_bdev_event, &j);
  if (!d) {
    fmt::print(stderr, "pollux-bdevperf: {}\n", d.error().message);
    j.first_error = d.error().message;
    j.started = j.ended = j.clock->now();
    g_run->rc = 1;
    if (g_run->jobs_left.fetch_sub(1) == 1) g_run->fw->thread_at(0)->send_msg(teardown, nullptr);
    return;
  }
  j.desc = *d;
  j.ch = j.mgr->get_io_channel(j.desc);
  j.blocks_per_io = j.cfg->io_size / j.desc->bdev().block_size();  // fits: check_fit()
  j.slots = j.desc->bdev().num_blocks() / j.blocks_per_io;
  j.started = j.clock->now();
  j.next_reset = j.started;
  if (j.cfg->interval > 0)
    j.next_interval = j.started + static_cast<uint64_t>(j.cfg->interval * j.clock->ticks_per_second());
  for (Task& t : j.tasks) submit(t);
  self->register_poller(watch, &j, 1000, "bdevperf_watch");
}

// "Name:blocks[:block_size]"
bool parse_quick(const std::string& spec, std::string* name, uint64_t* blocks, uint32_t* bs) {
  const auto a = spec.find(':');
  if (a == std::string::npos || a == 0) return false;
  *name = spec.substr(0, a);
  const auto b = spec.find(':', a + 1);
  try {
    *blocks = std::stoull(spec.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
    *bs = b == std::string::npos ? 512 : static_cast<uint32_t>(std::stoul(spec.substr(b + 1)));
  } catch (...) {
    return false;
  }
  return *blocks > 0 && *bs >= 512 && *bs % 512 == 0;
}


// Every job's I/O must fit its bdev: whole blocks (the task buffers hold io_size bytes), at
// least one I/O (the slot choice divides by the count), and with verify one slot per task
// (tasks stripe the bdev so that no two write a block at once).
std::string check_fit(const Config& c, const bdev::Bdev& b, uint64_t tasks) {
  const uint32_t bs = b.block_size();
  if (c.io_size % bs != 0) {
    return fmt::format("-o {}: not a multiple of bdev {}'s block size ({} bytes)", c.io_size,
                       b.name(), bs);
  }
  const uint64_t slots = b.num_blocks() / (c.io_size / bs);
  if (slots == 0) {
    return fmt::format("-o {}: larger than bdev {} ({} blocks of {} bytes)", c.io_size, b.name(),
                       b.num_blocks(), bs);
  }
  if (c.verify && slots < tasks) {
    return fmt::format("-w {}: bdev {} holds {} I/Os of {} bytes, fewer than the {} tasks that "
                       "write it (-q x cores)",
                       c.workload, b.name(), slots, c.io_size, tasks);
  }
  return "";
}

void set_up(void* arg) {
  Run& run = *static_cast<Run*>(arg);
  const Config& c = run.cfg;
  auto fail = [&run](int rc) {
    run.rc = rc;
    teardown(nullptr);
  };
  if (run.qpairs) {
    bdev::NvmeBdevOptions o;
    o.qpair.track_latency = true;
    metrics::QpairRegistry* reg = run.qpairs.get();
    o.qpair_observer = [reg](const nvme::Qpair* qp, bool created, const std::string& ctrlr) {
      if (created) reg->add(qp, ctrlr); else reg->remove(qp);
    };
    bdev::nvme_set_default_options(*run.mgr, o);
  }
  if (!c.json.empty()) {
    auto ctx = run.modules->context();
    // SPDK's "keyring" section first: bdev_nvme_attach_controller's dhchap_key may name its keys.
    bdev::ConfigMethods keyring;
    bdev::register_keyring_config_methods(keyring);
    if (auto st = bdev::apply_config_file(c.json, ctx, keyring, "keyring"); !st) {
      fmt::print(stderr, "pollux-bdevperf: {}\n", st.error().message);
      return fail(2);
    }
    if (auto st = bdev::apply_config_file(c.json, ctx); !st) {
      fmt::print(stderr, "pollux-bdevperf: {}\n", st.error().message);
      return fail(2);
    }
  }
  for (const auto& spec : c.nulls) {
    std::string name;
    uint64_t blocks;
    uint32_t bs;
    if (!parse_quick(spec, &name, &blocks, &bs) ||
        !bdev::create_null_bdev(*run.mgr, {name, blocks, bs}).ok()) {
      fmt::print(stderr, "pollux-bdevperf: bad --null '{}'\n", spec);
      return fail(2);
    }
  }
  for (const auto& spec : c.mallocs) {
    std::string name;
    uint64_t blocks;
    uint32_t bs;
    if (!parse_quick(spec, &name, &blocks, &bs)) {
      fmt::print(stderr, "pollux-bdevperf: bad --malloc '{}'\n", spec);
      return fail(2);
    }
    if (auto r = bdev::create_malloc_bdev(*run.mgr, {name, blocks, bs}); !r) {
      fmt::print(stderr, "pollux-bdevperf: --malloc {}: {}\n", spec, r.error().message);
      return fail(2);
    }
  }
  // A virtual bdev whose base is missing is a configuration error, named here (else the run
  // left it out, or said only that there was no bdev to test).
  if (const auto unbuilt = run.modules->unbuilt(); !unbuilt.empty()) {
    fmt::print(stderr, "pollux-bdevperf: {}{}\n", unbuilt.front(),
               unbuilt.size() > 1 ? fmt::format(" (and {} more)", unbuilt.size() - 1) : "");
    return fail(2);
  }
  std::vector<bdev::Bdev*> targets;
  for (bdev::Bdev* b : run.mgr->bdevs()) {
    auto probe = run.mgr->open(b->name(), true);  // refused when a virtual bdev claims it
    if (!probe) continue;
    run.mgr->close(*probe);
    targets.push_back(b);
  }
  if (targets.empty()) {
    fmt::print(stderr, "pollux-bdevperf: no bdev to test (give --json, --null or --malloc)\n");
    return fail(2);
  }
  const uint64_t tasks = uint64_t{c.qd} * run.fw->reactor_count();
  for (const bdev::Bdev* b : targets) {
    if (std::string e = check_fit(c, *b, tasks); !e.empty()) {
      fmt::print(stderr, "pollux-bdevperf: {}\n", e);
      return fail(2);
    }
    if (c.verify && !b->props().stores_data) {
      fmt::print(stderr,
                 "pollux-bdevperf: -w {}: bdev {} ({}) stores no data, so nothing read back "
                 "can be checked\n",
                 c.kind == Workload::kReset ? "reset" : "verify", b->name(), b->props().product);
      return fail(2);
    }
  }
  if (run.exporter) {
    run.bdev_stats = metrics::BdevCollector::start(*run.mgr, kBdevStatsPeriodUs);
    run.exporter->add_source(run.bdev_stats->source());
    run.exporter->add_source(metrics::bdev_nvme_source(*run.mgr));
  }
  const std::size_t ncores = run.fw->reactor_count();
  auto pool = env::DmaBufferPool::create(env::MemoryRegistry::global(), c.io_size,
                                         ncores * targets.size() * c.qd + 64);
  if (!pool) {
    fmt::print(stderr, "pollux-bdevperf: {}\n", pool.error().message);
    return fail(1);
  }
  run.pool = std::move(pool).value();
  for (std::size_t core = 0; core < ncores; ++core) {
    Thread* t = run.fw->create_thread(fmt::format("bdevperf{}", core), static_cast<int>(core),
                                           {run.fw->reactor(core).core()});
    for (std::size_t bi = 0; bi < targets.size(); ++bi) {
      auto j = std::make_unique<Job>();
      j->cfg = &run.cfg;
      j->mgr = run.mgr;
      j->clock = &run.fw->clock();
      j->name = targets[bi]->name();
      j->rng.seed(c.seed * 1000003 + core * 131 + bi);
      j->stripe_count = uint64_t{c.qd} * ncores;
      j->stripe_base = uint64_t{c.qd} * core;
      j->tasks.resize(c.qd);
      for (uint32_t i = 0; i < c.qd; ++i) {
        j->tasks[i].job = j.get();
        j->tasks[i].index = i;
        void* b = nullptr;
        run.pool->get_bulk(&b, 1);
        j->tasks[i].buf = static_cast<uint8_t*>(b);
      }
      j->thread = t;
      run.jobs.push_back(std::move(j));
    }
  }
  run.jobs_left = static_cast<int>(run.jobs.size());
  for (auto& j : run.jobs) j->thread->send_msg(start_job, j.get());
  fmt::print("pollux-bdevperf: running {} job(s)\n", run.jobs.size());
  std::fflush(stdout);  // a script waiting for the I/O to start reads this
}

double us(const env::Clock& c, double ticks) { return ticks * 1e6 / c.ticks_per_second(); }

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"pollux-bdevperf: block-device benchmark (like SPDK's bdevperf)"};
  app.add_option("--json", c.json, "bdev configuration (SPDK JSON shape)");
  app.add_option("--null", c.nulls, "quick null bdev: NAME:BLOCKS[:BLOCK_SIZE]");
  app.add_option("--malloc", c.mallocs, "quick malloc bdev: NAME:BLOCKS[:BLOCK_SIZE]");
  app.add_option("-q,--queue-depth", c.qd, "I/Os outstanding per job")->check(CLI::Range(1, 65536));
  app.add_option("-o,--io-size", c.io_size, "I/O size in bytes")->check(CLI::Range(512, 1 << 24));
  app.add_option("-w,--workload", c.workload)
      ->check(CLI::IsMember({"read", "write", "randread", "randwrite", "rw", "randrw", "verify",
                             "reset", "unmap", "flush"}));
  app.add_option("-M,--read-percent", c.read_pct)->check(CLI::Range(0, 100));
  app.add_option("-t,--time", c.seconds, "seconds")
      ->check(pollux::cli::kPositive)
      ->check(CLI::Range(0.0, kMaxSeconds));
  app.add_option("--reset-period", c.reset_period, "seconds between resets (-w reset)")
      ->check(pollux::cli::kPositive)
      ->check(CLI::Range(0.0, kMaxSeconds));
  app.add_option("-m,--core-mask", c.core_mask);
  app.add_option("--seed", c.seed);
  app.add_option("--summary", c.summary, "write the JSON summary to this file");
  app.add_option("-S,--interval", c.interval,
                 "print each job's IOPS, bandwidth and latency every this many seconds (and "
                 "keep them in the JSON summary as the job's 'intervals')")
      ->check(pollux::cli::kPositive);
  app.add_option("--metrics", c.metrics,
                 "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9464; port 0: any)");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;
  static const std::pair<const char*, Workload> kinds[] = {
      {"read", Workload::kRead},     {"write", Workload::kWrite}, {"randread", Workload::kRandRead},
      {"randwrite", Workload::kRandWrite}, {"rw", Workload::kRw}, {"randrw", Workload::kRandRw},
      {"verify", Workload::kVerify}, {"reset", Workload::kReset}, {"unmap", Workload::kUnmap},
      {"flush", Workload::kFlush}};
  for (const auto& [name, kind] : kinds)
    if (c.workload == name) c.kind = kind;
  c.verify = c.kind == Workload::kVerify || c.kind == Workload::kReset;
  c.random = c.verify || c.kind == Workload::kRandRead || c.kind == Workload::kRandWrite ||
             c.kind == Workload::kRandRw;
  if (c.kind == Workload::kRead || c.kind == Workload::kRandRead) c.read_pct = 100;
  if (c.kind == Workload::kWrite || c.kind == Workload::kRandWrite) c.read_pct = 0;
  // Opened before the run: a path that cannot be written is bad input, found now.
  std::ofstream summary;
  if (!c.summary.empty()) {
    summary.open(c.summary);
    if (!summary) {
      fmt::print(stderr, "pollux-bdevperf: --summary {}: {}\n", c.summary, std::strerror(errno));
      return 2;
    }
  }
  fmt::print("pollux-bdevperf: seed {}\n", c.seed);

  event::FrameworkOptions fo;
  fo.core_mask = c.core_mask;
  auto fw = event::Framework::create(fo);
  if (!fw) {
    fmt::print(stderr, "pollux-bdevperf: {}\n", fw.error().message);
    return 2;
  }
  auto mgr = bdev::Manager::create(**fw);
  if (!mgr) {
    fmt::print(stderr, "pollux-bdevperf: {}\n", mgr.error().message);
    return 1;
  }
  bdev::StandardModules modules(**mgr);
  Run run;
  std::unique_ptr<metrics::Exporter> exporter;
  if (!c.metrics.empty()) {
    auto e = metrics::Exporter::start(c.metrics);
    if (!e) {
      fmt::print(stderr, "pollux-bdevperf: {}\n", e.error().message);
      return 2;
    }
    exporter = std::move(e).value();
    exporter->add_source(metrics::event_source(**fw));
    run.qpairs = std::make_unique<metrics::QpairRegistry>();
    exporter->add_source(run.qpairs->source());
    run.exporter = exporter.get();
    fmt::print("pollux-bdevperf: metrics on {}\n", exporter->url());
    std::fflush(stdout);  // a script waits for this line
  }
  run.cfg = c;
  run.fw = fw->get();
  run.mgr = mgr->get();
  run.modules = &modules;
  g_run = &run;
  bdev::register_nvme_config_methods(bdev::global_config_methods());
  bdev::register_uring_config_methods(bdev::global_config_methods());
  lvol::register_lvol_config_methods(bdev::global_config_methods());
  // Bdevs are created on the app thread: NVMe controllers attach there and keep their admin
  // poller on it.
  const int rc = (*fw)->run(set_up, &run);
  // The defaults' observer points at run.qpairs, which goes before the manager's module state.
  if (run.qpairs) bdev::nvme_set_default_options(**mgr, {});
  if (run.jobs.empty()) return rc ? rc : 1;

  const env::Clock& clock = (*fw)->clock();
  fmt::print("\n{:<28} {:>5} {:>12} {:>10} {:>10} {:>10} {:>10}\n", "Job", "core", "IOPS",
             "MiB/s", "avg(us)", "min(us)", "max(us)");
  nlohmann::json js;
  js["workload"] = c.workload;
  js["queue_depth"] = c.qd;
  js["io_size"] = c.io_size;
  env::LatencyHistogram total;
  double tiops = 0, tmib = 0;
  uint64_t terr = 0, tver = 0;
  for (auto& j : run.jobs) {
    const double secs = std::max(1e-9, clock.ticks_to_seconds(j->ended - j->started));
    const double iops = j->ios / secs, mib = j->bytes / secs / (1 << 20);
    fmt::print("{:<28} {:>5} {:>12.0f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", j->name,
               j->core, iops, mib, us(clock, j->latency.mean()), us(clock, j->latency.min()),
               us(clock, j->latency.max()));
    if (!j->first_error.empty())
      fmt::print("  {} errors, {} verify failures, {} resets, {} reopens; first: {}\n", j->errors,
                 j->verify_failures, j->resets, j->reopens, j->first_error);
    js["jobs"].push_back({{"bdev", j->name}, {"core", j->core}, {"iops", iops}, {"mib_per_s", mib},
                          {"ios", j->ios}, {"errors", j->errors},
                          {"verify_failures", j->verify_failures}, {"resets", j->resets},
                          {"reopens", j->reopens},
                          {"ios_since_reopen", j->reopens ? j->ios - j->ios_at_reopen : 0},
                          {"latency_us", {{"avg", us(clock, j->latency.mean())},
                                          {"min", us(clock, j->latency.min())},
                                          {"max", us(clock, j->latency.max())}}}});
    if (c.interval > 0) {
      nlohmann::json series = nlohmann::json::array();
      for (const IntervalSample& x : j->intervals) {
        series.push_back({{"end_s", x.end_s},
                          {"iops", double(x.ios) / c.interval},
                          {"mib_per_s", double(x.bytes) / c.interval / (1 << 20)},
                          {"errors", x.errors},
                          {"latency_us", {{"avg", x.mean_us}, {"p99", x.p99_us}, {"max", x.max_us}}}});
      }
      js["jobs"].back()["intervals"] = series;
    }
    total.merge(j->latency);
    tiops += iops;
    tmib += mib;
    terr += j->errors;
    tver += j->verify_failures;
  }
  fmt::print("{:<28} {:>5} {:>12.0f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", "Total", "",
             tiops, tmib, us(clock, total.mean()), us(clock, total.min()), us(clock, total.max()));
  js["total"] = {{"iops", tiops}, {"mib_per_s", tmib}, {"errors", terr},
                 {"verify_failures", tver}, {"latency_us", {{"avg", us(clock, total.mean())}}}};
  // A realtime emulator that fell behind its model: these figures are this machine's.
  for (const bdev::NvmeEmulatorStatus& e : run.emulators) {
    if (!e.status.realtime) continue;
    js["emulator_lag"][e.address] = {{"max_lag_us", e.status.max_lag_ns / 1e3},
                                     {"warn_lag_us", e.status.warn_lag_ns / 1e3},
                                     {"fell_behind", e.status.fell_behind != 0}};
    if (const std::string w = nvme::emulator_lag_warning("pollux-bdevperf", e.address, e.status);
        !w.empty())
      fmt::print(stderr, "{}\n", w);
  }
  fmt::print("{}\n", json_text(js));
  bool written = true;
  if (summary.is_open()) {
    summary << json_text(js, 2) << "\n";
    summary.close();
    written = !summary.fail();
    if (!written) fmt::print(stderr, "pollux-bdevperf: --summary {}: write failed\n", c.summary);
  }
  for (auto& j : run.jobs)
    for (Task& t : j->tasks)
      if (t.buf) {
        void* b = t.buf;
        run.pool->put_bulk(&b, 1);
      }
  run.jobs.clear();
  return rc != 0 || terr != 0 || tver != 0 || !written ? 1 : 0;
}
