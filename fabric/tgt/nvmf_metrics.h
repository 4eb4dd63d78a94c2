// Prometheus metrics of the NVMe-oF target (pollux-tgt --metrics): each poll group's counters
// (env::OwnerCounter, written by the group's thread, read here at scrape time) and its TCP
// transport's. docs/METRICS.md lists them.
#pragma once

#include "driver/metrics/exporter.h"
#include "fabric/target/target.h"

namespace pollux::fabric::tgt {

// The target must outlive the source (remove the exporter first).
metrics::Source nvmf_source(const target::Target& tgt);

}  // namespace pollux::fabric::tgt
