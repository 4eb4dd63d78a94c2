// Metrics of block devices. A bdev's counters live in its channels, each written by its own
// thread without atomics, so a scrape may not read them; instead a timed poller on one
// framework thread gathers every bdev's statistics now and then (Manager::get_stats: a
// message walk over the channels, off the I/O path) and the scrape serves the last result.
// The collector holds a read-only descriptor on each bdev it watches, which keeps a bdev
// alive during a walk; it lets go as soon as the bdev is being removed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/metrics/exporter.h"

namespace pollux::metrics {

class BdevCollector {
 public:
  // On a framework thread (usually the app thread): gathers every `period_us` from there,
  // and once right away. The collector must outlive the framework's threads.
  static std::unique_ptr<BdevCollector> start(bdev::Manager& mgr, uint64_t period_us);
  ~BdevCollector();

  // On the thread that started it: no more gathering; descriptors are closed (those inside a
  // walk when it ends), then done(ctx) runs (on this thread, perhaps inside this call).
  void stop(event::MsgFn done = nullptr, void* ctx = nullptr);
  // The collector must outlive the source.
  Source source();

 private:
  struct Watch {
    BdevCollector* owner = nullptr;
    std::string name;
    bdev::Desc* desc = nullptr;
    bool walking = false;
    bool close_after_walk = false;
  };
  struct Published {
    bdev::IoStats stats;
    bdev::QosLimits qos;
  };
  explicit BdevCollector(bdev::Manager& mgr) : mgr_(mgr) {}
  static event::PollStatus gather(void* arg);
  static void on_event(bdev::DescEvent e, bdev::Bdev& b, void* ctx);
  static void walk_done(const bdev::IoStats& stats, void* ctx);
  void release(Watch& w);

  bdev::Manager& mgr_;
  event::Thread* thread_ = nullptr;
  event::Poller* poller_ = nullptr;
  double seconds_per_tick_ = 1e-9;
  bool stopped_ = false;
  event::MsgFn stopped_fn_ = nullptr;
  void* stopped_ctx_ = nullptr;
  std::vector<std::unique_ptr<Watch>> watches_;  // the collector's thread only

  std::mutex mu_;
  std::map<std::string, Published> published_;  // by bdev name; what a scrape serves
};

// bdev_nvme's controllers (recovery counters of the module and of the driver's controller)
// and its hot-plug poller, read under the module's lock at scrape time. `mgr` must outlive
// the source.
Source bdev_nvme_source(bdev::Manager& mgr);

}  // namespace pollux::metrics
