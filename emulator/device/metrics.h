// The emulated device's Prometheus metrics, built as prometheus-cpp families: pollux-emu
// serves them itself, and in-process hosts (the scenario runner) add them to their own
// exporter. Built on the thread that runs the device (its counters are not shared), so a
// program publishes them from there and its endpoint serves the last published set.
#pragma once

#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "emulator/device/metrics_endpoint.h"
#include "emulator/nvme/controller.h"
#include "emulator/timing/timed_ssd.h"

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

}  // namespace pollux::emu::device
