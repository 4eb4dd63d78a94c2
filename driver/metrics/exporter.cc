#include "driver/metrics/exporter.h"

#include <netdb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "common/listen_probe.h"

namespace pollux::metrics {

prometheus::ClientMetric& Builder::sample(std::string_view name, std::string_view help,
                                          prometheus::MetricType type, const Labels& labels) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    prometheus::MetricFamily f;
    f.name = std::string(name);
    f.help = std::string(help);
    f.type = type;
    it = index_.emplace(std::string(name), families_.size()).first;
    families_.push_back(std::move(f));
  }
  prometheus::ClientMetric& m = families_[it->second].metric.emplace_back();
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  return m;
}

void Builder::counter(std::string_view name, std::string_view help, const Labels& labels,
                      double v) {
  sample(name, help, prometheus::MetricType::Counter, labels).counter.value = v;
}

void Builder::gauge(std::string_view name, std::string_view help, const Labels& labels, double v) {
  sample(name, help, prometheus::MetricType::Gauge, labels).gauge.value = v;
}

void Builder::histogram(std::string_view name, std::string_view help, const Labels& labels,
                        const env::LatencyHistogram& h, double unit_seconds,
                        const std::vector<double>& bounds_seconds) {
  auto& m = sample(name, help, prometheus::MetricType::Histogram, labels);
  m.histogram.sample_count = h.count();
  m.histogram.sample_sum = h.mean() * static_cast<double>(h.count()) * unit_seconds;
  // Cumulative counts at each bound: a log-linear bucket counts below a bound when its floor
  // is below it (bucket widths are <= 3.1% of their value: the boundary error is that small).
  std::vector<uint64_t> cumulative(bounds_seconds.size(), 0);
  for (int b = 0; b < env::LatencyHistogram::kBuckets; ++b) {
    const uint64_t n = h.bucket_count(b);
    if (n == 0) continue;
    const double v = static_cast<double>(env::LatencyHistogram::bucket_floor(b)) * unit_seconds;
    for (std::size_t i = 0; i < bounds_seconds.size(); ++i) {
      if (v <= bounds_seconds[i]) cumulative[i] += n;
    }
  }
  for (std::size_t i = 0; i < bounds_seconds.size(); ++i) {
    m.histogram.bucket.push_back({cumulative[i], bounds_seconds[i]});
  }
  m.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
}

void Builder::histogram(std::string_view name, std::string_view help, const Labels& labels,
                        const env::OwnerHistogram& h, double unit_seconds) {
  auto& m = sample(name, help, prometheus::MetricType::Histogram, labels);
  // The owner may record while we read: count what the buckets say, so the cumulative
  // counts never exceed the total.
  uint64_t cumulative = 0;
  for (int i = 0; i < env::OwnerHistogram::kBuckets - 1; ++i) {
    cumulative += h.bucket(i);
    const double bound = static_cast<double>(env::OwnerHistogram::bucket_limit(i)) * unit_seconds;
    if (bound >= 1e-7 && bound <= 100) m.histogram.bucket.push_back({cumulative, bound});
  }
  cumulative += h.bucket(env::OwnerHistogram::kBuckets - 1);
  m.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = static_cast<double>(h.sum()) * unit_seconds;
}

void Builder::family(const prometheus::MetricFamily& f) {
  auto it = index_.find(f.name);
  if (it == index_.end()) {
    index_.emplace(f.name, families_.size());
    families_.push_back(f);
    return;
  }
  auto& to = families_[it->second].metric;
  to.insert(to.end(), f.metric.begin(), f.metric.end());
}

std::vector<prometheus::MetricFamily> Builder::take() {
  index_.clear();
  return std::move(families_);
}

const std::vector<double>& latency_bounds() {
  static const std::vector<double> b = {1e-6,   2.5e-6, 5e-6,   10e-6,  25e-6, 50e-6, 100e-6,
                                        250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,  10e-3, 25e-3,
                                        50e-3,  100e-3, 250e-3, 1.0,    10.0};
  return b;
}

namespace {

// The process's start in seconds since the epoch: boot time (/proc/stat btime) plus the
// process's start in clock ticks since boot (/proc/self/stat field 22). 0 if unreadable.
double read_process_start_time() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i != 22) continue;
    std::ifstream proc_stat("/proc/stat");
    for (std::string l; std::getline(proc_stat, l);) {
      if (l.rfind("btime ", 0) != 0) continue;
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      return std::stod(l.substr(6)) + std::stod(field) / ticks;
    }
  }
  return 0;
}

}  // namespace

Source process_source() {
  const std::string program = program_invocation_short_name;
  const double start = read_process_start_time();
  return [program, start](Builder& b) {
    b.gauge("pollux_process_info", "1, with the program's name", {{"program", program}}, 1);
    if (start > 0)
      b.gauge("process_start_time_seconds", "Start time of the process since the Unix epoch",
              {}, start);
  };
}

struct Exporter::Collectable final : prometheus::Collectable {
  mutable std::mutex mu;
  std::map<int, Source> sources;
  int next_id = 1;
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard lock(mu);
    Builder b;
    for (const auto& [id, s] : sources) s(b);
    return b.take();
  }
};

Exporter::Exporter() : collectable_(std::make_shared<Collectable>()) {}

Exporter::~Exporter() {
  exposer_.reset();
}  // stop serving before the sources go

Result<std::unique_ptr<Exporter>> Exporter::start(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return make_error(EINVAL,
                      "--metrics '" + address + "': expected host:port, e.g. 127.0.0.1:9464");
  }
  auto e = std::make_unique<Exporter>();
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& ex) {
    // CivetServer says only "null context when constructing CivetServer": find out why.
    return make_error(EADDRINUSE, "metrics endpoint " + address + ": " +
                                      common::explain_listen_failure(address, ex.what()));
  }
  e->add_source(process_source());
  e->exposer_->RegisterCollectable(e->collectable_);
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? 0 : ports.front();
  e->host_ = address.substr(0, colon);
  return e;
}

int Exporter::add_source(Source source) {
  std::lock_guard lock(collectable_->mu);
  const int id = collectable_->next_id++;
  collectable_->sources.emplace(id, std::move(source));
  return id;
}

void Exporter::remove_source(int id) {
  std::lock_guard lock(collectable_->mu);
  collectable_->sources.erase(id);
}

std::vector<prometheus::MetricFamily> Exporter::collect() const {
  return collectable_->Collect();
}

std::string Exporter::render() const {
  return prometheus::TextSerializer().Serialize(collect());
}

}  // namespace pollux::metrics

namespace pollux::metrics {

void Snapshot::publish(std::vector<prometheus::MetricFamily> families) {
  std::lock_guard lock(mu_);
  last_ = std::move(families);
}

Source Snapshot::source() {
  return [this](Builder& b) {
    std::lock_guard lock(mu_);
    for (const prometheus::MetricFamily& f : last_) b.family(f);
  };
}

namespace {
volatile std::sig_atomic_t g_linger_stop = 0;
}  // namespace

void linger(uint64_t ns) {
  std::signal(SIGINT, [](int) { g_linger_stop = 1; });
  std::signal(SIGTERM, [](int) { g_linger_stop = 1; });
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (!g_linger_stop && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace pollux::metrics
