// An emulated RNIC's Prometheus metrics as prometheus-cpp families: per NIC (packets, bytes,
// retransmissions, NAKs, drops, link, QPs by state) and per QP (traffic, errors, message
// latency), and the wire's. pollux-rnic serves them itself; an in-process host (scenarios/sim's
// RdmaFabric) adds them to its own exporter. Built on the thread that drives the NICs.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "emulator/rnic/rnic.h"
#include "emulator/rnic/wire.h"

namespace pollux::emu::rnic {

struct NicMetricsInput {
  const Rnic* nic = nullptr;
  std::string name;  // the "nic" label: "host", "target", "rnic0"...
  uint64_t port = 0;
  bool link_up = true;
};

// Appends the NIC's samples to `out` (families of the same name are merged).
void append_nic_metrics(const NicMetricsInput& in, std::vector<prometheus::MetricFamily>& out);
// The wire's totals (no labels).
void append_wire_metrics(const WireStats& w, std::vector<prometheus::MetricFamily>& out);

}  // namespace pollux::emu::rnic
