// Metrics of NVMe queue pairs: the application registers each queue pair when it is created
// and removes it before freeing it (bdev_nvme's qpair_observer does exactly that); a scrape
// reads their counters (env::OwnerCounter: written by the owner thread, readable anywhere).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "driver/metrics/exporter.h"
#include "driver/nvme/qpair.h"

namespace pollux::metrics {

class QpairRegistry {
 public:
  void add(const nvme::Qpair* qp, std::string controller);
  // Before the queue pair is freed: a scrape running now finishes first. Its counts move to
  // the controller's retired totals, so the controller-level counters never go backwards.
  void remove(const nvme::Qpair* qp);
  // The registry must outlive the source.
  Source source();

 private:
  struct Entry {
    const nvme::Qpair* qp;
    std::string controller;
  };
  struct Retired {
    std::string controller;
    nvme::QpairStats stats;
  };
  std::mutex mu_;
  std::vector<Entry> live_;
  std::vector<Retired> retired_;  // one per controller
};

}  // namespace pollux::metrics
