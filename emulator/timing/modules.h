// The SystemC modules of the timed SSD and the interfaces that connect them.
//
//   host <-> PcieLink <-> QueueEngineModule (doorbells, arbitration, fetch, CQ tail/phase)
//                              |  grants            ^ completion requests
//                              v                    |
//                         CommandProcessor --> WriteCache --> Media (Optane | FTL -> NAND array)
//                              |  data to/from the host streams through the DataPath
//
// Modules talk through sc_port/sc_export interfaces and annotate time (the loosely-timed
// TLM style): a call is given the time an operation may start and returns when it ends,
// reserving the resources it used. Only the points where the host can observe something
// (a fetch decision, a completion entry landing) are SystemC events.
#pragma once

// Verilator headers (if any) must come before <systemc>: include this header last.
#include <systemc>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "emulator/timing/datapath.h"
#include "emulator/timing/media.h"
#include "emulator/timing/pcie_link.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"

namespace pollux::emu::timing {

inline sc_core::sc_time sc_ps(SimTime t) { return sc_core::sc_time::from_value(t); }

// ---- time -------------------------------------------------------------------------------------
//
// The models' time can run ahead of the SystemC kernel's, for speed and never for effect:
// with the fast-forward (Simulation::set_fast_forward) the devices' events do not enter the
// kernel at all — the simulation runs each at its time from the devices' own records of them
// (kernel_events below; Simulation::dispatch_until) — and a queue engine works through clock
// edges no other event can come between in one activation (QueueEngineModule::edge). No event
// is ever pending between the kernel's time and the models', so the models' time is the later
// of the two: the kernel's inside a kernel process, the simulation's otherwise (a dispatched
// event, a scan, a fault), an edge's own while an engine runs ahead. Notifications are made at
// absolute model times (notify_at), whatever the kernel's clock reads.
namespace model_clock {
// Raised by the simulation that runs on this thread (its time outside the kernel) and by an
// engine's edges run ahead; 0 when no simulation runs.
inline thread_local SimTime floor = 0;
// Engines may run edges ahead strictly before this (the end of the run under way, 0: none:
// outside a run, without the fast-forward, or once the run is to pause).
inline thread_local SimTime run_ahead_limit = 0;
// Whether the devices' events are the kernel's (notified to it: fast-forward off), or only
// kept in their own records, which the simulation runs from directly (Simulation::run_until).
inline thread_local bool kernel_events = true;
}  // namespace model_clock

inline SimTime kernel_now() { return sc_core::sc_get_curr_simcontext()->time_stamp().value(); }
inline SimTime sc_now() { return std::max(kernel_now(), model_clock::floor); }
inline void notify_at(sc_core::sc_event& e, SimTime at) { e.notify(sc_ps(at - kernel_now())); }
// The kernel's next event (its time now for one pending in this instant), ~0 for none, as the
// kernel answers it: a query that walks its queues (~100 instructions).
inline SimTime kernel_query_next_event() {
  static const uint64_t never = sc_core::sc_max_time().value();
  const uint64_t to = sc_core::sc_time_to_pending_activity().value();
  const uint64_t now = kernel_now();
  return to >= never - now ? ~SimTime{0} : now + to;
}
namespace model_clock {
// The same from the models' own record of the notifications they made (each device keeps the
// time of its two events': Simulation::next_kernel_event), set by the simulation running on
// this thread; null: ask the kernel.
inline thread_local SimTime (*next_event_fn)(void* ctx) = nullptr;
inline thread_local void* next_event_ctx = nullptr;
}  // namespace model_clock
inline SimTime next_kernel_event_time() {
  return model_clock::next_event_fn ? model_clock::next_event_fn(model_clock::next_event_ctx)
                                    : kernel_query_next_event();
}

// ---- interfaces -------------------------------------------------------------------------------

struct LinkIf : virtual sc_core::sc_interface {
  virtual SimTime dma_read(SimTime start, uint64_t bytes) = 0;
  virtual SimTime dma_write(SimTime start, uint64_t bytes) = 0;
  virtual SimTime mmio_write(SimTime start) const = 0;
};

struct DataPathIf : virtual sc_core::sc_interface {
  virtual DataPath::Slot to_host(SimTime start, uint64_t bytes) = 0;
  virtual DataPath::Slot from_host(SimTime start, uint64_t bytes) = 0;
};

struct MediaIf : virtual sc_core::sc_interface {
  virtual SimTime read(SimTime start, uint64_t unit) = 0;
  virtual Media::WriteOutcome write(SimTime start, uint64_t unit) = 0;
  virtual Media::WriteOutcome flush(SimTime start) = 0;
  virtual void trim(uint64_t unit) = 0;
};

struct CacheIf : virtual sc_core::sc_interface {
  virtual bool enabled() const = 0;
  virtual SimTime admit(SimTime start) = 0;
  virtual void release_pending(uint32_t n, SimTime done) = 0;
  virtual SimTime drained_at() const = 0;
  virtual uint64_t admitted() const = 0;
};

// ---- leaf modules -----------------------------------------------------------------------------

class PcieLinkModule final : public sc_core::sc_module, public LinkIf {
 public:
  PcieLinkModule(sc_core::sc_module_name n, const PcieProfile& p) : sc_module(n), link_(p) {}
  SimTime dma_read(SimTime s, uint64_t b) override { return link_.dma_read(sc_now(), s, b); }
  SimTime dma_write(SimTime s, uint64_t b) override { return link_.dma_write(sc_now(), s, b); }
  SimTime mmio_write(SimTime s) const override { return link_.mmio_write(s); }
  const PcieLink& core() const { return link_; }

 private:
  PcieLink link_;
};

class DataPathModule final : public sc_core::sc_module, public DataPathIf {
 public:
  DataPathModule(sc_core::sc_module_name n, const DataPathProfile& p) : sc_module(n), path_(p) {}
  DataPath::Slot to_host(SimTime s, uint64_t b) override { return path_.to_host(sc_now(), s, b); }
  DataPath::Slot from_host(SimTime s, uint64_t b) override {
    return path_.from_host(sc_now(), s, b);
  }

 private:
  DataPath path_;
};

// Any Media core (null, Optane) as a module.
class MediaModule final : public sc_core::sc_module, public MediaIf {
 public:
  MediaModule(sc_core::sc_module_name n, std::unique_ptr<Media> m)
      : sc_module(n), media_(std::move(m)) {}
  SimTime read(SimTime s, uint64_t u) override { return media_->read(s, u); }
  Media::WriteOutcome write(SimTime s, uint64_t u) override { return media_->write(s, u); }
  Media::WriteOutcome flush(SimTime s) override { return media_->flush(s); }
  void trim(uint64_t u) override { media_->trim(u); }

 private:
  std::unique_ptr<Media> media_;
};

// The NAND array (dies, planes, channels) and the FTL in front of it.
class NandArrayModule final : public sc_core::sc_module {
 public:
  NandArrayModule(sc_core::sc_module_name n, const NandGeometry& g, const NandTiming& t)
      : sc_module(n), array_(g, t) {}
  NandArray& core() { return array_; }

 private:
  NandArray array_;
};

class FtlModule final : public sc_core::sc_module, public MediaIf {
 public:
  FtlModule(sc_core::sc_module_name n, const FtlConfig& c, NandArrayModule& nand)
      : sc_module(n), nand_(nand.core()), ftl_(c, nand.core()) {}
  SimTime read(SimTime s, uint64_t u) override {
    nand_.set_now(sc_now());
    return ftl_.read(s, u);
  }
  Media::WriteOutcome write(SimTime s, uint64_t u) override {
    nand_.set_now(sc_now());
    const Ftl::WriteResult r = ftl_.write(s, u);
    return {r.units, r.done};
  }
  Media::WriteOutcome flush(SimTime s) override {
    nand_.set_now(sc_now());
    const Ftl::WriteResult r = ftl_.flush(s);
    return {r.units, r.units ? r.done : s};
  }
  void trim(uint64_t u) override { ftl_.trim(u); }
  const Ftl& core() const { return ftl_; }

 private:
  NandArray& nand_;
  Ftl ftl_;
};

class WriteCacheModule final : public sc_core::sc_module, public CacheIf {
 public:
  WriteCacheModule(sc_core::sc_module_name n, uint64_t bytes)
      : sc_module(n), cache_(bytes / kUnitBytes) {}
  bool enabled() const override { return cache_.enabled(); }
  SimTime admit(SimTime s) override { return cache_.admit(s); }
  void release_pending(uint32_t n, SimTime d) override { cache_.release_pending(n, d); }
  SimTime drained_at() const override { return cache_.drained_at(); }
  uint64_t admitted() const override { return cache_.admitted(); }
  const WriteCache& core() const { return cache_; }
  WriteCache& core() { return cache_; }

 private:
  WriteCache cache_;
};

}  // namespace pollux::emu::timing
