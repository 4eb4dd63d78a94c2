#include "emulator/device/metrics.h"

#include <algorithm>

namespace pollux::emu::device {
namespace {

double seconds(timing::SimTime t) {
  return static_cast<double>(t) / double(timing::kSec);
}

}  // namespace

void append_device_metrics(const DeviceMetricsInput& in,
                           std::vector<prometheus::MetricFamily>& out) {
  const LabelList l = {{"device", in.name}, {"profile", in.profile}};
  auto counter = [&](const char* name, const char* help, double v, LabelList labels) {
    add_sample(out, name, help, prometheus::MetricType::Counter, std::move(labels)).counter.value =
        v;
  };
  auto gauge = [&](const char* name, const char* help, double v, LabelList labels) {
    add_sample(out, name, help, prometheus::MetricType::Gauge, std::move(labels)).gauge.value = v;
  };
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  const nvme::ControllerCounters& c = in.controller->counters();
  if (in.timed != nullptr) {
    const timing::TimedSsdStats s = in.timed->stats();
    counter("pollux_emu_commands_total", "Commands the device fetched", n(s.commands), l);
    counter("pollux_emu_completions_total", "Completions the device posted", n(s.completions), l);
    gauge("pollux_emu_in_flight", "Commands inside the device", n(s.in_flight), l);
    counter("pollux_emu_nand_reads_total", "NAND page reads", n(s.nand_reads), l);
    counter("pollux_emu_nand_programs_total", "NAND page-group programs", n(s.nand_programs), l);
    counter("pollux_emu_nand_erases_total", "NAND block erases", n(s.nand_erases), l);
    counter("pollux_emu_gc_relocations_total", "Mapping units garbage collection moved",
            n(s.ftl.gc_relocations), l);
    gauge("pollux_emu_write_amplification", "NAND units written per host unit written",
          s.ftl.write_amplification(), l);
    counter("pollux_emu_cache_stalls_total", "Writes that waited for write-cache room",
            n(s.cache_stalls), l);
    const timing::WriteCache& cache = in.timed->write_cache();
    gauge("pollux_emu_write_cache_used_bytes",
          "Write-cache space holding data not yet on the media",
          n(cache.occupancy_at(in.now) * timing::kUnitBytes), l);
    gauge("pollux_emu_write_cache_capacity_bytes", "Write-cache size (0: no cache)",
          n(cache.capacity() * timing::kUnitBytes), l);
    if (const timing::NandArray* nand = in.timed->nand()) {
      const timing::NandGeometry& g = nand->geometry();
      for (uint32_t ch = 0; ch < g.channels; ++ch) {
        LabelList cl = l;
        cl.push_back({"channel", std::to_string(ch)});
        counter("pollux_emu_channel_busy_seconds_total",
                "Simulated time the NAND channel's bus was booked (rate: utilisation)",
                seconds(nand->channel_busy_time(ch)), cl);
        for (uint32_t d = 0; d < g.dies_per_channel; ++d) {
          LabelList dl = cl;
          dl.push_back({"die", std::to_string(d)});
          counter("pollux_emu_die_busy_seconds_total",
                  "Simulated time booked on the die for tR/tPROG/tBERS (rate: utilisation; "
                  "bookings ahead of time, e.g. GC, count when booked)",
                  seconds(nand->die_busy_time(ch, d)), dl);
        }
      }
    }
  } else {
    const uint64_t io = c.io_reads + c.io_writes + c.io_flushes + c.io_compares +
                        c.io_write_zeroes + c.io_dataset_management + c.io_other;
    counter("pollux_emu_commands_total", "Commands the device fetched", n(io + c.admin_commands),
            l);
    counter("pollux_emu_completions_total", "Completions the device posted",
            n(c.completions_posted), l);
  }
  // By class: each rule action, and reads failed by a bad block.
  constexpr const char* kFaultsHelp = "Commands the device's fault injection hit, by class";
  for (int a = 0; a < nvme::kFaultActions; ++a) {
    const auto action = static_cast<nvme::FaultAction>(a);
    LabelList fl = l;
    fl.push_back({"class", nvme::to_string(action)});
    counter("pollux_emu_faults_injected_total", kFaultsHelp,
            n(in.controller->faults().hits(action)), fl);
  }
  LabelList bl = l;
  bl.push_back({"class", "bad_block"});
  counter("pollux_emu_faults_injected_total", kFaultsHelp, n(c.bad_block_reads), bl);
  counter("pollux_emu_controller_resets_total", "Controller resets the device went through",
          n(c.resets), l);
  gauge("pollux_emu_present", "1 while the device is plugged in", in.present ? 1 : 0, l);
  counter("pollux_emu_writes_lost_to_power_total",
          "Acknowledged writes a power cut undid (volatile cache)", n(in.writes_lost_to_power), l);
}

}  // namespace pollux::emu::device
