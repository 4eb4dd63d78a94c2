// Prometheus metrics, pull model: an HTTP endpoint (prometheus-cpp's, on civetweb) whose
// families are built at scrape time by registered sources. Sources read the counters the
// stack keeps anyway (per-thread relaxed atomics, env::OwnerCounter): nothing is aggregated
// or locked on the hot path. Names follow Prometheus conventions (docs/METRICS.md).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "driver/env/histogram.h"
#include "driver/env/owner_counter.h"
#include "driver/env/result.h"

namespace prometheus {
class Exposer;
}

namespace pollux::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Collects one scrape's samples, grouped into families by name.
class Builder {
 public:
  void counter(std::string_view name, std::string_view help, const Labels& labels, double v);
  void gauge(std::string_view name, std::string_view help, const Labels& labels, double v);
  // A latency histogram in seconds, from env::LatencyHistogram values in `unit_seconds`
  // (e.g. 1e-9 for ns), at these upper bounds (seconds, ascending; +Inf is added).
  void histogram(std::string_view name, std::string_view help, const Labels& labels,
                 const env::LatencyHistogram& h, double unit_seconds,
                 const std::vector<double>& bounds_seconds);
  // A histogram in seconds from an env::OwnerHistogram of values in `unit_seconds` (1e-9 for
  // the queue pairs' ns): its power-of-two bounds from 100 ns to 100 s.
  void histogram(std::string_view name, std::string_view help, const Labels& labels,
                 const env::OwnerHistogram& h, double unit_seconds);
  // A whole family, as collected elsewhere (its samples are appended).
  void family(const prometheus::MetricFamily& f);
  std::vector<prometheus::MetricFamily> take();

 private:
  prometheus::ClientMetric& sample(std::string_view name, std::string_view help,
                                   prometheus::MetricType type, const Labels& labels);
  std::map<std::string, std::size_t, std::less<>> index_;
  std::vector<prometheus::MetricFamily> families_;
};

// Latency bucket bounds (seconds) used by every Pollux latency histogram: 1 us .. 10 s.
const std::vector<double>& latency_bounds();

using Source = std::function<void(Builder&)>;

// The program's name and start time (pollux_process_info{program}, process_start_time_seconds):
// every endpoint started with Exporter::start has it, for tools such as pollux-top.
Source process_source();

class Exporter {
 public:
  // Listens on "host:port" (port 0: any free port; see port()). Serves process_source() too.
  static Result<std::unique_ptr<Exporter>> start(const std::string& address);
  // Without an HTTP endpoint: render() only (tests, --metrics-dump).
  Exporter();
  ~Exporter();

  // A source runs on the scraping thread, under the exporter's lock. Returns its id.
  int add_source(Source source);
  void remove_source(int id);
  int port() const { return port_; }
  // "http://host:port/metrics", the port being the one bound (what programs print).
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port_) + "/metrics"; }
  // The text exposition format of one collection (what a scrape returns).
  std::string render() const;
  std::vector<prometheus::MetricFamily> collect() const;

 private:
  struct Collectable;
  std::shared_ptr<Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  int port_ = 0;
};

}  // namespace pollux::metrics

namespace pollux::metrics {

// For programs whose counters live on one thread that is never scraped directly (the virtual
// time lockstep): that thread collects its sources now and then and publishes the result;
// the scrape serves the last one. Survives the program's stack (e.g. after a run, lingering).
class Snapshot {
 public:
  void publish(std::vector<prometheus::MetricFamily> families);
  Source source();  // the snapshot must outlive it

 private:
  std::mutex mu_;
  std::vector<prometheus::MetricFamily> last_;
};

// For a program that has finished its work: keeps the process, and so its endpoint, up for
// `ns` (Prometheus scrapes the final state) or until SIGINT/SIGTERM.
void linger(uint64_t ns);

}  // namespace pollux::metrics
