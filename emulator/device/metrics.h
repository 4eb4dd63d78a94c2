// The emulated device's Prometheus metrics, built as prometheus-cpp families: pollux-emu
// serves them itself, and in-process hosts (the scenario runner) add them to their own
// exporter. Built on the thread that runs the device (its counters are not shared), so a
// program publishes them from there and its endpoint serves the last published set.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "emulator/nvme/controller.h"
#include "emulator/timing/timed_ssd.h"

namespace prometheus {
class Exposer;
}

namespace pollux::emu::device {

struct DeviceMetricsInput {
  std::string name, profile;
  const nvme::Controller* controller = nullptr;
  const timing::TimedSsd* timed = nullptr;  // null: a functional device (no timing model)
  timing::SimTime now = 0;                  // the device's simulated time
  bool present = true;
  uint64_t writes_lost_to_power = 0;
};

// Appends the device's samples to `out` (families of the same name are merged).
void append_device_metrics(const DeviceMetricsInput& in,
                           std::vector<prometheus::MetricFamily>& out);

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
