#include "emulator/device/metrics_endpoint.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <algorithm>
#include <mutex>

#include "common/listen_probe.h"

namespace pollux::emu::device {

prometheus::ClientMetric& add_sample(std::vector<prometheus::MetricFamily>& out,
                                     const std::string& name, const std::string& help,
                                     prometheus::MetricType type, LabelList labels) {
  auto f = std::find_if(out.begin(), out.end(), [&](const auto& x) { return x.name == name; });
  if (f == out.end()) f = out.insert(out.end(), prometheus::MetricFamily{name, help, type, {}});
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  f->metric.push_back(std::move(m));
  return f->metric.back();
}

struct MetricsEndpoint::Published final : prometheus::Collectable {
  mutable std::mutex mu;
  std::vector<prometheus::MetricFamily> last;
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard lock(mu);
    return last;
  }
};

std::unique_ptr<MetricsEndpoint> MetricsEndpoint::start(const std::string& address,
                                                        std::string* error) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    *error = "'" + address + "': expected host:port, e.g. 127.0.0.1:9464";
    return nullptr;
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint);
  e->published_ = std::make_shared<Published>();
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& ex) {
    // CivetServer says only "null context when constructing CivetServer": find out why.
    *error = address + ": " + common::explain_listen_failure(address, ex.what());
    return nullptr;
  }
  e->exposer_->RegisterCollectable(e->published_);
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? 0 : ports.front();
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  exposer_.reset();
}

void MetricsEndpoint::publish(std::vector<prometheus::MetricFamily> families) {
  std::lock_guard lock(published_->mu);
  published_->last = std::move(families);
}

}  // namespace pollux::emu::device
