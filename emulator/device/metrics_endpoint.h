// An HTTP pull endpoint for Prometheus that serves the set of metric families published last:
// a program builds them on the thread that owns its counters and publishes a copy now and
// then (pollux-emu, pollux-rnic).
#pragma once

#include <prometheus/metric_family.h>

#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Exposer;
}

namespace pollux::emu::device {

using LabelList = std::vector<prometheus::ClientMetric::Label>;

// A sample of family `name` appended to `out` (the family made on first use): its value is
// for the caller to set (counter.value, gauge.value).
prometheus::ClientMetric& add_sample(std::vector<prometheus::MetricFamily>& out,
                                     const std::string& name, const std::string& help,
                                     prometheus::MetricType type, LabelList labels);

// An HTTP pull endpoint that serves whatever was published last.
class MetricsEndpoint {
 public:
  // "host:port" (port 0: any free one). Empty string and an error on failure.
  static std::unique_ptr<MetricsEndpoint> start(const std::string& address, std::string* error);
  ~MetricsEndpoint();
  void publish(std::vector<prometheus::MetricFamily> families);
  int port() const { return port_; }

 private:
  struct Published;
  std::shared_ptr<Published> published_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace pollux::emu::device
