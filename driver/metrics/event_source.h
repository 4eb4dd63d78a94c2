// Metrics of an event framework: per reactor, per thread and per poller busy/idle time and
// run counts (the counters the framework keeps as relaxed atomics; read at scrape time).
#pragma once

#include "driver/event/framework.h"
#include "driver/metrics/exporter.h"

namespace pollux::metrics {

// The framework must outlive the source (remove it from the exporter first).
Source event_source(event::Framework& fw);

}  // namespace pollux::metrics
