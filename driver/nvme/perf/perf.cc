// pollux-perf: the NVMe driver's own benchmark, modelled on spdk_nvme_perf.
//   pollux-perf -r 'trtype:vfio-user traddr:/tmp/emu.sock' -q 128 -o 4096 -w randread -t 5 -c 0x1
// One lightweight thread per core of the mask; on each, one queue pair per controller and
// one job per namespace. Prints IOPS, MiB/s, latency (avg/min/max, p50..p99.99) per device
// and in total, and the driver's CPU cost per I/O.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/cli.h"
#include "common/text.h"
#include "driver/env/dma_pool.h"
#include "driver/env/histogram.h"
#include "driver/env/pattern.h"
#include "driver/event/framework.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/nvme_source.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/dhchap.h"
#include "driver/nvme/emulator_status.h"
#include "driver/nvme/keyring.h"
#include "driver/nvme/status.h"

using namespace pollux;
using event::PollStatus;
using event::Thread;
namespace sn = spec::nvme;

namespace {

struct Config {
  std::vector<std::string> trids;
  uint32_t qd = 128;
  uint32_t io_size = 4096;
  std::string workload = "randread";
  int read_pct = 100;
  double seconds = 5;
  uint64_t io_limit = 0;  // stop each job after this many I/Os (for instruction counts)
  std::string core_mask = "0x1";
  bool verify = false;
  uint64_t pattern = 0;  // --pattern G: writes carry generation G, reads must find it
  bool sgl = false;
  uint32_t nsid = 0;  // 0: every namespace
  uint64_t seed = 1;
  std::string json_path;
  bool random = true;
  int latency_detail = 0;  // -L: percentile summary; -LL: the histogram too (spdk_nvme_perf's)
  double interval = 0;     // -S: a line per core every this many seconds (0: none)
  // Fabrics: the host NQN and in-band authentication (DH-HMAC-CHAP).
  std::string hostnqn;
  std::string dhchap_key, dhchap_ctrlr_key;  // a secret "DHHC-1:...", or a file holding one
  std::vector<std::string> dhchap_digests, dhchap_dhgroups;
};

struct Job;

struct Task {
  Job* job;
  uint32_t index;
  uint8_t* buf;
  uint64_t lba = 0;
  uint64_t start = 0;
  uint64_t generation = 0;
  bool is_read = false;
  bool verify_read = false;  // second half of a write-then-read-back pair
  bool busy = false;
};

struct Job {
  const Config* cfg;
  nvme::Controller* ctrl;
  const nvme::Namespace* ns;
  nvme::Qpair* qp;
  const env::Clock* clock;
  std::string name;
  int core;
  uint32_t nlb;
  uint64_t slots;  // I/O-sized slots in the namespace
  // --verify: a task owns the slots ≡ (stripe_base + task) mod stripe_count, so no two
  // writers anywhere (other tasks, other cores) ever touch the same LBAs.
  uint64_t stripe_base = 0, stripe_count = 1;
  std::mt19937_64 rng;
  std::vector<Task> tasks;
  uint64_t next_seq = 0;
  bool draining = false;
  uint32_t busy_tasks = 0;
  // results
  env::LatencyHistogram latency;
  env::LatencyHistogram read_latency, write_latency;  // the split of a mixed workload
  uint64_t ios = 0, bytes = 0, errors = 0, verify_failures = 0, submit_failures = 0;
  uint64_t reads = 0, writes = 0;
  uint64_t verified = 0;  // reads whose data was checked
  uint64_t submit_ticks = 0, callback_ticks = 0;
  std::string first_error;
  env::LatencyHistogram interval_latency;  // -S: since the last interval's end
};

// One interval of one core (-S): what its jobs completed in it.
struct IntervalSample {
  double end_s = 0;  // since the core started
  uint64_t ios = 0, errors = 0, bytes = 0;
  double mean_us = 0, p99_us = 0, max_us = 0;
};

struct Core {
  std::vector<std::unique_ptr<nvme::Qpair>> qpairs;  // one per controller
  std::vector<std::unique_ptr<Job>> jobs;
  std::unique_ptr<env::DmaBufferCache> cache;
  uint64_t poll_ticks = 0;                     // inside process_completions, callbacks included
  uint64_t split_ios = 0, split_children = 0;  // the driver's splits beyond MDTS
  uint64_t deadline = 0;
  uint64_t started = 0, ended = 0;  // ticks: the run's real length (an --io-count run ends early)
  bool finished = false;
  int id = 0;
  uint64_t next_interval = 0, last_ios = 0, last_errors = 0, last_bytes = 0;
  std::vector<IntervalSample> intervals;
};

struct Run {
  Config cfg;
  event::Framework* fw = nullptr;
  std::vector<std::unique_ptr<nvme::Controller>> ctrls;
  env::DmaBufferPool* pool = nullptr;
  std::vector<Core> cores;
  std::atomic<int> cores_left{0};
  std::atomic<int> failed{0};
  metrics::QpairRegistry* qpair_metrics = nullptr;  // --metrics
  FILE* out = stdout;                               // human lines (stderr with --json -)
};
Run* g_run = nullptr;

void on_complete(void* ctx, const sn::CompletionEntry& cpl);

void submit_task(Task& t) {
  Job& j = *t.job;
  const Config& c = *j.cfg;
  if (!t.verify_read) {
    uint64_t slot;
    if (c.random) {
      slot = j.rng() % j.slots;
    } else {
      slot = j.next_seq++ % j.slots;
    }
    if (c.verify) {
      const uint64_t stripe = j.stripe_base + t.index;
      slot = slot / j.stripe_count * j.stripe_count + stripe;
      if (slot >= j.slots) slot = stripe;
    }
    t.lba = slot * j.nlb;
    t.is_read = c.verify ? false
                         : (c.read_pct == 100 ||
                            (c.read_pct > 0 && static_cast<int>(j.rng() % 100) < c.read_pct));
    if (c.verify || c.pattern) {
      t.generation = c.pattern ? c.pattern : j.rng() | 1;
      if (!t.is_read) env::fill_pattern(t.buf, t.lba, j.nlb, j.ns->block_size, t.generation);
    }
  } else {
    t.is_read = true;
  }
  // A checked read must not pass on what the buffer already held (the write of the same task).
  if (t.is_read && (t.verify_read || c.pattern))
    env::poison(t.buf, std::size_t{j.nlb} * j.ns->block_size);
  t.start = j.clock->now();
  const int rc = t.is_read ? j.qp->read(*j.ns, t.buf, t.lba, j.nlb, on_complete, &t)
                           : j.qp->write(*j.ns, t.buf, t.lba, j.nlb, on_complete, &t);
  j.submit_ticks += j.clock->now() - t.start;
  if (rc != 0) {
    ++j.submit_failures;
    if (j.first_error.empty()) j.first_error = fmt::format("submit: {}", std::strerror(-rc));
    return;  // the task idles; -ENOMEM cannot happen (tasks ≤ requests)
  }
  if (!t.busy) {
    t.busy = true;
    ++j.busy_tasks;
  }
}

void on_complete(void* ctx, const sn::CompletionEntry& cpl) {
  auto& t = *static_cast<Task*>(ctx);
  Job& j = *t.job;
  const uint64_t enter = j.clock->now();
  j.latency.record(enter - t.start);
  (t.is_read ? j.read_latency : j.write_latency).record(enter - t.start);
  if (j.cfg->interval > 0) j.interval_latency.record(enter - t.start);
  if (nvme::cpl_is_error(cpl)) {
    ++j.errors;
    if (j.first_error.empty()) j.first_error = nvme::describe(nvme::Status::from_cqe(cpl.status));
  } else {
    ++j.ios;
    ++(t.is_read ? j.reads : j.writes);
    j.bytes += std::size_t{j.nlb} * j.ns->block_size;
    if (t.verify_read || (j.cfg->pattern && t.is_read)) {
      ++j.verified;
      std::string why;
      if (!env::check_pattern(t.buf, t.lba, j.nlb, j.ns->block_size, t.generation, &why)) {
        ++j.verify_failures;
        if (j.first_error.empty()) j.first_error = "verify: " + why;
      }
    }
  }
  const bool limit = j.cfg->io_limit && j.ios + j.errors >= j.cfg->io_limit;
  if (j.draining || limit) {
    j.draining = true;
    t.busy = false;
    --j.busy_tasks;
  } else {
    t.verify_read = j.cfg->verify && !t.is_read && !nvme::cpl_is_error(cpl);
    submit_task(t);
  }
  j.callback_ticks += j.clock->now() - enter;
}

PollStatus poll_core(void* arg) {
  auto& core = *static_cast<Core*>(arg);
  const env::Clock& clock = g_run->fw->clock();
  const uint64_t t0 = clock.now();
  int n = 0;
  for (auto& qp : core.qpairs) {
    const int rc = qp->process_completions();
    if (rc < 0) {
      for (auto& j : core.jobs) {
        if (j->qp == qp.get() && j->first_error.empty()) j->first_error = "device gone";
        if (j->qp == qp.get()) j->draining = true, j->busy_tasks = 0;
      }
      continue;
    }
    n += rc;
  }
  // Only polls that reaped something count as completion-path cost: an empty poll is the
  // driver waiting for the device, not work per I/O.
  if (n) core.poll_ticks += clock.now() - t0;
  return n ? PollStatus::kBusy : PollStatus::kIdle;
}

void finish_core(Core& core) {
  core.finished = true;
  core.ended = g_run->fw->clock().now();
  if (g_run->cores_left.fetch_sub(1) == 1) g_run->fw->stop(g_run->failed.load() ? 1 : 0);
}

// -S: the interval that just ended on this core, printed as it ends and kept for the JSON.
void sample_interval(Core& core, uint64_t now) {
  const env::Clock& clock = g_run->fw->clock();
  IntervalSample x;
  env::LatencyHistogram h;
  uint64_t ios = 0, errors = 0, bytes = 0;
  for (auto& j : core.jobs) {
    ios += j->ios;
    errors += j->errors;
    bytes += j->bytes;
    h.merge(j->interval_latency);
    j->interval_latency.reset();
  }
  const double secs = g_run->cfg.interval;
  x.end_s = clock.ticks_to_seconds(now - core.started);
  x.ios = ios - core.last_ios;
  x.errors = errors - core.last_errors;
  x.bytes = bytes - core.last_bytes;
  core.last_ios = ios, core.last_errors = errors, core.last_bytes = bytes;
  x.mean_us = clock.ticks_to_seconds(static_cast<uint64_t>(h.mean())) * 1e6;
  x.p99_us = clock.ticks_to_seconds(h.quantile(0.99)) * 1e6;
  x.max_us = clock.ticks_to_seconds(h.max()) * 1e6;
  fmt::print(g_run->out,
             "[{:7.2f} s] core {:>2}: {:>10.0f} IOPS {:>9.2f} MiB/s  mean {:>9.2f} us  "
             "p99 {:>9.2f} us  max {:>9.2f} us{}\n",
             x.end_s, core.id, double(x.ios) / secs, double(x.bytes) / secs / (1 << 20), x.mean_us,
             x.p99_us, x.max_us, x.errors ? fmt::format("  {} errors", x.errors) : "");
  std::fflush(g_run->out);
  core.intervals.push_back(x);
}

PollStatus watch_core(void* arg) {
  auto& core = *static_cast<Core*>(arg);
  if (core.finished) return PollStatus::kIdle;
  const uint64_t now = g_run->fw->clock().now();
  if (core.next_interval != 0 && now >= core.next_interval && now < core.deadline) {
    sample_interval(core, now);
    core.next_interval +=
        static_cast<uint64_t>(g_run->cfg.interval * g_run->fw->clock().ticks_per_second());
  }
  const bool timeup = now >= core.deadline;
  uint32_t busy = 0;
  for (auto& j : core.jobs) {
    if (timeup) j->draining = true;
    busy += j->busy_tasks;
  }
  if (busy != 0) return PollStatus::kIdle;
  bool all_draining = true;
  for (auto& j : core.jobs) all_draining &= j->draining;
  if (!all_draining) return PollStatus::kIdle;
  // Everything completed: give the queues back and report.
  for (std::size_t i = 0; i < core.qpairs.size(); ++i) {
    core.split_ios += core.qpairs[i]->stats().split_ios;
    core.split_children += core.qpairs[i]->stats().split_children;
    if (g_run->qpair_metrics) g_run->qpair_metrics->remove(core.qpairs[i].get());  // before free
    g_run->ctrls[i]->free_io_qpair(std::move(core.qpairs[i]));
  }
  core.qpairs.clear();
  finish_core(core);
  return PollStatus::kBusy;
}

void start_core(void* arg) {
  auto& core = *static_cast<Core*>(arg);
  const Config& c = g_run->cfg;
  Thread* self = Thread::current();
  const int core_id = g_run->fw->reactor(static_cast<std::size_t>(self->reactor_index())).core();
  core.cache = std::make_unique<env::DmaBufferCache>(*g_run->pool, 64);
  for (auto& ctrl : g_run->ctrls) {
    nvme::QpairOptions o;
    o.queue_size = std::min<uint32_t>(ctrl->max_queue_entries(), 1024);
    o.prefer_sgl = c.sgl;
    o.num_requests = 0;
    o.track_latency = g_run->qpair_metrics != nullptr;
    auto qp = ctrl->alloc_io_qpair(o);
    if (!qp) {
      fmt::print(stderr, "pollux-perf: {}\n", qp.error().message);
      g_run->failed = 1;
      finish_core(core);
      return;
    }
    if (g_run->qpair_metrics) g_run->qpair_metrics->add(qp->get(), ctrl->transport().address());
    core.qpairs.push_back(std::move(qp).value());
  }
  uint64_t seed = c.seed * 1000003 + static_cast<uint64_t>(core_id);
  for (std::size_t ci = 0; ci < g_run->ctrls.size(); ++ci) {
    auto& ctrl = g_run->ctrls[ci];
    for (uint32_t nsid : ctrl->namespace_ids()) {
      if (c.nsid && nsid != c.nsid) continue;
      const nvme::Namespace* ns = ctrl->ns(nsid);
      if (c.io_size % ns->block_size != 0) continue;
      auto job = std::make_unique<Job>();
      job->cfg = &c;
      job->ctrl = ctrl.get();
      job->ns = ns;
      job->qp = core.qpairs[ci].get();
      job->clock = &g_run->fw->clock();
      job->name =
          fmt::format("{} NSID {} from core {}", ctrl->transport().address(), nsid, core_id);
      job->core = core_id;
      job->nlb = c.io_size / ns->block_size;
      job->slots = ns->num_blocks / job->nlb;
      job->stripe_count = uint64_t{c.qd} * g_run->cores.size();
      job->stripe_base = uint64_t{c.qd} * static_cast<uint64_t>(&core - g_run->cores.data());
      job->rng.seed(seed++);
      job->tasks.resize(c.qd);
      core.jobs.push_back(std::move(job));
    }
  }
  // The queue pair's request pool (2 × queue size) must cover every job's tasks.
  for (auto& job : core.jobs) {
    for (uint32_t i = 0; i < c.qd; ++i) {
      Task& t = job->tasks[i];
      t.job = job.get();
      t.index = i;
      t.buf = static_cast<uint8_t*>(core.cache->get());
      if (t.buf == nullptr) {
        fmt::print(stderr, "pollux-perf: out of DMA buffers\n");
        g_run->failed = 1;
        job->draining = true;
        break;
      }
    }
  }
  core.started = g_run->fw->clock().now();
  core.deadline =
      core.started + static_cast<uint64_t>(c.seconds * g_run->fw->clock().ticks_per_second());
  core.id = core_id;
  if (c.interval > 0)
    core.next_interval =
        core.started + static_cast<uint64_t>(c.interval * g_run->fw->clock().ticks_per_second());
  for (auto& job : core.jobs)
    for (Task& t : job->tasks)
      if (t.buf && !job->draining) submit_task(t);
  for (auto& qp : core.qpairs) qp->flush_doorbell();
  self->register_poller(poll_core, &core, 0, "nvme_completions");
  self->register_poller(watch_core, &core, 1000, "perf_watch");
}

PollStatus poll_admin(void*) {
  int n = 0;
  for (auto& c : g_run->ctrls) n += std::max(0, c->process_admin_completions());
  return n ? PollStatus::kBusy : PollStatus::kIdle;
}

double us(const env::Clock& c, double ticks) {
  return ticks * 1e6 / c.ticks_per_second();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"pollux-perf: NVMe driver benchmark (like spdk_nvme_perf)"};
  app.add_option("-r,--transport", c.trids,
                 "transport id, e.g. 'trtype:vfio-user traddr:/tmp/emu.sock'")
      ->required();
  app.add_option("-q,--queue-depth", c.qd, "outstanding I/Os per namespace per core")
      ->check(CLI::Range(1, 4096));
  app.add_option("-o,--io-size", c.io_size, "I/O size in bytes")->check(CLI::Range(512, 1 << 24));
  app.add_option("-w,--workload", c.workload, "read|write|randread|randwrite|rw|randrw")
      ->check(CLI::IsMember({"read", "write", "randread", "randwrite", "rw", "randrw"}));
  app.add_option("-M,--read-percent", c.read_pct, "reads in rw/randrw")->check(CLI::Range(0, 100));
  app.add_option("-t,--time", c.seconds, "seconds")->check(pollux::cli::kPositive);
  app.add_option("--io-count", c.io_limit, "stop each job after this many I/Os");
  app.add_option("-c,--core-mask", c.core_mask, "cores, hex mask or [list]");
  app.add_option("-n,--nsid", c.nsid, "only this namespace (default: all)");
  app.add_option("--seed", c.seed, "random seed");
  app.add_flag("--verify", c.verify, "write patterns, read them back and check them");
  app.add_option("--pattern", c.pattern,
                 "writes carry this generation in every block, reads check for it (data written "
                 "by an earlier run: e.g. -w write then, later, -w read)")
      ->excludes("--verify");
  app.add_flag("--sgl", c.sgl, "describe data with SGLs when the controller supports them");
  app.add_flag("-L,--latency", c.latency_detail,
               "latency percentile summary; twice (-LL): the latency histogram too");
  app.add_option("-S,--interval", c.interval,
                 "print each core's IOPS, bandwidth and latency every this many seconds (and "
                 "keep them in the JSON summary as 'intervals')")
      ->check(pollux::cli::kPositive);
  app.add_option("--json", c.json_path, "write a JSON summary to this file ('-' for stdout)");
  app.add_option("--hostnqn", c.hostnqn,
                 "fabrics: this host's NQN (default: nqn.2014-08.org.nvmexpress:uuid:<random>)");
  app.add_option("--dhchap-key", c.dhchap_key,
                 "fabrics: authenticate with this DH-HMAC-CHAP secret (DHHC-1:hh:<base64>:), or "
                 "the file holding it (mode 0600)");
  app.add_option("--dhchap-ctrlr-key", c.dhchap_ctrlr_key,
                 "fabrics: and have the controller prove it holds this one (bidirectional)")
      ->needs("--dhchap-key");
  app.add_option("--dhchap-digests", c.dhchap_digests, "hash functions to offer (sha256,sha384,sha512)")
      ->delimiter(',');
  app.add_option("--dhchap-dhgroups", c.dhchap_dhgroups,
                 "DH groups to offer (null,ffdhe2048,...,ffdhe8192)")
      ->delimiter(',');
  std::string metrics_addr;
  app.add_option("--metrics", metrics_addr,
                 "serve Prometheus metrics on host:port (e.g. 127.0.0.1:9464; port 0: any)");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;
  c.random = c.workload.rfind("rand", 0) == 0;
  if (c.workload == "read" || c.workload == "randread") c.read_pct = 100;
  if (c.workload == "write" || c.workload == "randwrite") c.read_pct = 0;
  // With the JSON summary on stdout, every human line goes to stderr: stdout is JSON alone.
  FILE* out = c.json_path == "-" ? stderr : stdout;
  fmt::print(out, "pollux-perf: seed {}\n", c.seed);

  // The summary file is opened before the run: a path that cannot be written is bad input,
  // found now rather than silently after the run.
  std::ofstream json_out;
  if (!c.json_path.empty() && c.json_path != "-") {
    json_out.open(c.json_path);
    if (!json_out) {
      fmt::print(stderr, "pollux-perf: --json {}: {}\n", c.json_path, std::strerror(errno));
      return 2;
    }
  }
  Run run;
  run.cfg = c;
  run.out = out;
  g_run = &run;
  std::vector<nvme::TransportId> trids;
  for (const auto& text : c.trids) {
    auto trid = nvme::parse_transport_id(text);
    if (!trid) {
      fmt::print(stderr, "pollux-perf: {}\n", trid.error().message);
      return 2;
    }
    // One controller, one owner: a second connection to it would wait for the first.
    for (const nvme::TransportId& t : trids) {
      if (t.trtype == trid->trtype && t.traddr == trid->traddr) {
        fmt::print(stderr, "pollux-perf: -r '{}': the same controller as an earlier -r\n", text);
        return 2;
      }
    }
    trids.push_back(*trid);
  }
  nvme::ControllerOptions ctrl_options;
  ctrl_options.hostnqn = c.hostnqn;
  for (auto [flag, value, out] :
       {std::tuple{"--dhchap-key", &c.dhchap_key, &ctrl_options.dhchap_key},
        std::tuple{"--dhchap-ctrlr-key", &c.dhchap_ctrlr_key, &ctrl_options.dhchap_ctrlr_key}}) {
    if (value->empty()) continue;
    if (nvme::keyring::is_inline_secret(*value)) {
      *out = *value;
    } else {
      // A file: the keyring reads it (and refuses one others may read).
      const std::string path = std::filesystem::absolute(*value).string();
      auto added = nvme::keyring::add_file_key(flag, path);
      auto text = added ? nvme::keyring::resolve(flag) : Result<std::string>(added.error());
      if (!text) {
        fmt::print(stderr, "pollux-perf: {}: {}\n", flag, text.error().message);
        return 2;
      }
      *out = std::move(text).value();
    }
    if (auto k = nvme::dhchap::parse_key(*out); !k) {
      fmt::print(stderr, "pollux-perf: {}: {}\n", flag, k.error().message);
      return 2;
    }
  }
  for (auto [flag, names, out, parse] :
       {std::tuple{"--dhchap-digests", &c.dhchap_digests, &ctrl_options.dhchap_digests,
                   &nvme::dhchap::hash_from_name},
        std::tuple{"--dhchap-dhgroups", &c.dhchap_dhgroups, &ctrl_options.dhchap_dhgroups,
                   &nvme::dhchap::dhgroup_from_name}}) {
    for (const std::string& n : *names) {
      auto id = parse(n);
      if (!id) {
        fmt::print(stderr, "pollux-perf: {}: unknown name '{}'\n", flag, n);
        return 2;
      }
      out->push_back(*id);
    }
  }
  for (std::size_t i = 0; i < trids.size(); ++i) {
    const std::string& text = c.trids[i];
    auto ctrl = nvme::connect(trids[i], ctrl_options);
    if (!ctrl) {
      fmt::print(stderr, "pollux-perf: {}: {}\n", text, ctrl.error().message);
      return 1;
    }
    const auto& id = (*ctrl)->identify();
    fmt::print(out, "Attached {}: {:.40s} serial {:.20s}, {} namespace(s), MDTS {} KiB, SGLs {}\n",
               (*ctrl)->transport().address(), id.mn, id.sn, (*ctrl)->namespace_ids().size(),
               (*ctrl)->max_transfer_bytes() / 1024, (id.sgls & 3) ? "yes" : "no");
    std::fflush(out);  // a script watching the output learns the device is attached
    run.ctrls.push_back(std::move(ctrl).value());
  }
  // What the namespaces can take: a run that would do nothing is an error, not 0 I/Os.
  {
    std::size_t usable = 0;
    std::string skipped, listed;
    for (auto& ctrl : run.ctrls) {
      for (uint32_t nsid : ctrl->namespace_ids()) {
        listed += (listed.empty() ? "" : ", ") + std::to_string(nsid);
        if (c.nsid && nsid != c.nsid) continue;
        const nvme::Namespace* ns = ctrl->ns(nsid);
        if (c.io_size % ns->block_size != 0) {
          skipped += fmt::format("{}NSID {} ({}-byte blocks)", skipped.empty() ? "" : ", ", nsid,
                                 ns->block_size);
          continue;
        }
        ++usable;
      }
    }
    bool found = c.nsid == 0;
    for (auto& ctrl : run.ctrls) found |= ctrl->ns(c.nsid) != nullptr;
    if (!found) {
      fmt::print(stderr, "pollux-perf: -n {}: no such namespace (there are: {})\n", c.nsid,
                 listed.empty() ? "none" : listed);
      return 2;
    }
    if (usable == 0) {
      fmt::print(stderr, "pollux-perf: -o {}: not a multiple of the block size of {}\n", c.io_size,
                 skipped.empty() ? "any namespace" : skipped);
      return 2;
    }
    if (!skipped.empty())
      fmt::print(out, "pollux-perf: -o {} skips {}: not a multiple of the block size\n", c.io_size,
                 skipped);
  }

  event::FrameworkOptions fo;
  fo.core_mask = c.core_mask;
  auto fw = event::Framework::create(fo);
  if (!fw) {
    fmt::print(stderr, "pollux-perf: {}\n", fw.error().message);
    return 2;
  }
  run.fw = fw->get();
  // Queue pairs register on their threads; the scrape reads their owner-written counters.
  metrics::QpairRegistry qpair_metrics;
  std::unique_ptr<metrics::Exporter> exporter;
  if (!metrics_addr.empty()) {
    auto e = metrics::Exporter::start(metrics_addr);
    if (!e) {
      fmt::print(stderr, "pollux-perf: {}\n", e.error().message);
      return 2;
    }
    exporter = std::move(e).value();
    exporter->add_source(metrics::event_source(**fw));
    exporter->add_source(qpair_metrics.source());
    run.qpair_metrics = &qpair_metrics;
    fmt::print(out, "pollux-perf: metrics on {}\n", exporter->url());
    std::fflush(out);
  }
  const std::size_t ncores = (*fw)->reactor_count();
  std::size_t jobs_per_core = 0;
  for (auto& ctrl : run.ctrls) jobs_per_core += c.nsid ? 1 : ctrl->namespace_ids().size();
  auto pool = env::DmaBufferPool::create(env::MemoryRegistry::global(), c.io_size,
                                         ncores * (jobs_per_core * c.qd + 128));
  if (!pool) {
    fmt::print(stderr, "pollux-perf: {}\n", pool.error().message);
    return 1;
  }
  run.pool = pool->get();
  run.cores.resize(ncores);
  run.cores_left = static_cast<int>(ncores);
  for (std::size_t i = 0; i < ncores; ++i) {
    Thread* t = (*fw)->create_thread(fmt::format("perf{}", i), static_cast<int>(i),
                                     {(*fw)->reactor(i).core()});
    t->send_msg(start_core, &run.cores[i]);
  }
  int rc = (*fw)->run(
      [](void*) { Thread::current()->register_poller(poll_admin, nullptr, 10000, "admin"); },
      nullptr);

  // Report.
  const env::Clock& clock = (*fw)->clock();
  fmt::print(out, "\n{:<56} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "Device", "IOPS",
             "MiB/s", "avg(us)", "min(us)", "p99(us)", "p99.99", "max(us)");
  env::LatencyHistogram total;
  uint64_t tios = 0, tbytes = 0, terr = 0, tverify = 0, tchecked = 0, driver_ticks = 0;
  double elapsed = 0;
  nlohmann::json js;
  js["seed"] = c.seed;
  js["workload"] = c.workload;
  js["queue_depth"] = c.qd;
  js["io_size"] = c.io_size;
  js["seconds"] = c.seconds;
  for (auto& core : run.cores) {
    uint64_t cb = 0;
    for (auto& j : core.jobs) cb += j->callback_ticks;
    // Driver cost: submit calls + completion processing outside the callbacks.
    uint64_t sub = 0;
    for (auto& j : core.jobs) sub += j->submit_ticks;
    driver_ticks += sub + (core.poll_ticks > cb ? core.poll_ticks - cb : 0);
    const double secs = std::max(1e-9, clock.ticks_to_seconds(core.ended - core.started));
    elapsed = std::max(elapsed, secs);
    for (auto& j : core.jobs) {
      const double iops = j->ios / secs;
      const auto& h = j->latency;
      fmt::print(out, "{:<56} {:>10.0f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n",
                 j->name, iops, j->bytes / secs / (1 << 20), us(clock, h.mean()),
                 us(clock, h.min()), us(clock, h.quantile(0.99)), us(clock, h.quantile(0.9999)),
                 us(clock, h.max()));
      if (c.read_pct > 0 && c.read_pct < 100 && !c.verify)
        fmt::print(out,
                   "  reads {:.0f} IOPS (avg {:.2f} us, p99 {:.2f} us), writes {:.0f} IOPS (avg "
                   "{:.2f} us, p99 {:.2f} us)\n",
                   j->reads / secs, us(clock, j->read_latency.mean()),
                   us(clock, j->read_latency.quantile(0.99)), j->writes / secs,
                   us(clock, j->write_latency.mean()), us(clock, j->write_latency.quantile(0.99)));
      if (!j->first_error.empty())
        fmt::print(out, "  {} errors, {} verify failures; first: {}\n", j->errors,
                   j->verify_failures, j->first_error);
      js["devices"].push_back({{"name", j->name},
                               {"iops", iops},
                               {"mib_per_s", j->bytes / secs / (1 << 20)},
                               {"ios", j->ios},
                               {"reads", j->reads},
                               {"writes", j->writes},
                               {"read_iops", j->reads / secs},
                               {"write_iops", j->writes / secs},
                               {"errors", j->errors},
                               {"verify_failures", j->verify_failures},
                               {"latency_us",
                                {{"avg", us(clock, h.mean())},
                                 {"min", us(clock, h.min())},
                                 {"p50", us(clock, h.quantile(0.5))},
                                 {"p99", us(clock, h.quantile(0.99))},
                                 {"p99_9", us(clock, h.quantile(0.999))},
                                 {"p99_99", us(clock, h.quantile(0.9999))},
                                 {"max", us(clock, h.max())}}}});
      total.merge(h);
      tios += j->ios;
      tbytes += j->bytes;
      terr += j->errors + j->submit_failures;
      tverify += j->verify_failures;
      tchecked += j->verified;
    }
  }
  const double secs = std::max(elapsed, 1e-9);
  fmt::print(out, "{:<56} {:>10.0f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n",
             "Total", tios / secs, tbytes / secs / (1 << 20), us(clock, total.mean()),
             us(clock, total.min()), us(clock, total.quantile(0.99)),
             us(clock, total.quantile(0.9999)), us(clock, total.max()));
  fmt::print(out, "latency percentiles (us): p50 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  p99.99 {:.2f}\n",
             us(clock, total.quantile(0.5)), us(clock, total.quantile(0.99)),
             us(clock, total.quantile(0.999)), us(clock, total.quantile(0.9999)));
  const double ns_per_io = tios ? clock.ticks_to_ns(driver_ticks) / static_cast<double>(tios) : 0;
  fmt::print(out, "driver CPU per I/O: {:.1f} ns (submit + completion paths, callbacks excluded)\n",
             ns_per_io);
  uint64_t splits = 0, children = 0;
  for (auto& core : run.cores) splits += core.split_ios, children += core.split_children;
  if (splits != 0)
    fmt::print(out, "driver: {} I/Os beyond MDTS split into {} commands\n", splits, children);
  if (c.verify || c.pattern)
    fmt::print(out, "verify: {} reads checked, {} failures\n", tchecked, tverify);
  // A realtime emulator that fell behind its model: these figures are this machine's.
  for (auto& ctrl : run.ctrls) {
    const auto st = nvme::emulator_status(*ctrl);
    if (!st || !st->realtime) continue;
    const std::string addr = ctrl->transport().address();
    js["emulator_lag"][addr] = {{"max_lag_us", st->max_lag_ns / 1e3},
                                {"warn_lag_us", st->warn_lag_ns / 1e3},
                                {"fell_behind", st->fell_behind != 0}};
    if (const std::string w = nvme::emulator_lag_warning("pollux-perf", addr, *st); !w.empty())
      fmt::print(stderr, "{}\n", w);
  }
  js["total"] = {{"iops", tios / secs},
                 {"mib_per_s", tbytes / secs / (1 << 20)},
                 {"errors", terr},
                 {"verify_failures", tverify},
                 {"driver_ns_per_io", ns_per_io},
                 {"latency_us",
                  {{"avg", us(clock, total.mean())},
                   {"p50", us(clock, total.quantile(0.5))},
                   {"p99", us(clock, total.quantile(0.99))},
                   {"p99_9", us(clock, total.quantile(0.999))},
                   {"p99_99", us(clock, total.quantile(0.9999))}}}};
  if (c.latency_detail >= 1 && total.count() != 0) {
    // spdk_nvme_perf -L: the summary; -LL: every non-empty bucket, cumulative.
    fmt::print(out, "\nSummary latency data (us), all devices:\n");
    for (double q :
         {0.01, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999, 0.99999})
      fmt::print(out, "  {:>9.5f}% : {:>12.3f}\n", q * 100, us(clock, total.quantile(q)));
  }
  if (c.latency_detail >= 2 && total.count() != 0) {
    fmt::print(out, "\nLatency histogram (us), all devices:\n{:>23}  {:>11}  {:>12}\n", "range",
               "cumulative", "I/Os");
    uint64_t seen = 0;
    nlohmann::json buckets = nlohmann::json::array();
    for (int b = 0; b < env::LatencyHistogram::kBuckets; ++b) {
      const uint64_t n = total.bucket_count(b);
      if (n == 0) continue;
      seen += n;
      const double lo = us(clock, env::LatencyHistogram::bucket_floor(b));
      const double hi = b + 1 < env::LatencyHistogram::kBuckets
                            ? us(clock, env::LatencyHistogram::bucket_floor(b + 1))
                            : lo;
      fmt::print(out, "{:>10.3f} - {:>10.3f}: {:>10.4f}%  ({:>10})\n", lo, hi,
                 100.0 * static_cast<double>(seen) / static_cast<double>(total.count()), n);
      buckets.push_back({{"lo_us", lo}, {"hi_us", hi}, {"ios", n}});
    }
    js["total"]["latency_histogram"] = buckets;
  }
  if (c.interval > 0) {  // -S: the series, per core
    js["interval_s"] = c.interval;
    js["intervals"] = nlohmann::json::array();
    for (const Core& core : run.cores) {
      nlohmann::json series = nlohmann::json::array();
      for (const IntervalSample& x : core.intervals) {
        series.push_back(
            {{"end_s", x.end_s},
             {"iops", double(x.ios) / c.interval},
             {"mib_per_s", double(x.bytes) / c.interval / (1 << 20)},
             {"errors", x.errors},
             {"latency_us", {{"avg", x.mean_us}, {"p99", x.p99_us}, {"max", x.max_us}}}});
      }
      js["intervals"].push_back({{"core", core.id}, {"series", series}});
    }
  }
  if (c.json_path == "-") {
    fmt::print("{}\n", json_text(js, 2));
  } else if (json_out.is_open()) {
    json_out << json_text(js, 2) << "\n";
    json_out.close();
    if (!json_out) {
      fmt::print(stderr, "pollux-perf: --json {}: write failed\n", c.json_path);
      rc = 1;
    }
  }
  run.cores.clear();  // per-core buffer caches flush into the pool: before the pool goes
  run.ctrls.clear();
  if (rc != 0 || terr != 0 || tverify != 0) return 1;
  return 0;
}
