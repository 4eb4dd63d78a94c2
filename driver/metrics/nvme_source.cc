#include "driver/metrics/nvme_source.h"

#include <algorithm>
#include <map>

namespace pollux::metrics {
namespace {

struct Field {
  const char* name;
  const char* help;
  env::OwnerCounter nvme::QpairStats::*member;
};

constexpr Field kFields[] = {
    {"submitted", "Commands placed in the submission queue", &nvme::QpairStats::submitted},
    {"completed", "Completions reaped", &nvme::QpairStats::completed},
    {"errors", "Completions with a non-zero status", &nvme::QpairStats::errors},
    {"queued", "Requests that waited for a submission queue slot", &nvme::QpairStats::queued},
    {"timeouts", "Commands that outlived the queue pair's timeout", &nvme::QpairStats::timeouts},
    {"bad_completions", "Completion entries ignored (unknown or stale command id, wrong SQ)",
     &nvme::QpairStats::bad_completions},
    {"doorbells", "Submission queue tail doorbell writes", &nvme::QpairStats::doorbells},
    {"injected", "Commands hit by a software error-injection rule", &nvme::QpairStats::injected},
    {"failed_on_removal", "Requests ended because the device was removed",
     &nvme::QpairStats::failed_on_removal},
};

// Status Code Types (NVMe base spec, Completion Queue Entry Status Field); 4-6 are reserved.
constexpr const char* kStatusTypes[8] = {"generic", "command_specific", "media", "path",
                                         "reserved4", "reserved5", "reserved6", "vendor"};

void add_stats(nvme::QpairStats& to, const nvme::QpairStats& from) {
  for (const Field& f : kFields) to.*f.member += from.*f.member;
  for (std::size_t t = 0; t < to.errors_by_type.size(); ++t)
    to.errors_by_type[t] += from.errors_by_type[t].load();
  from.latency.add_to(to.latency);
}

// The four defined types always (0 is data too), reserved ones only if a device used them.
void add_errors_by_type(Builder& b, const char* name, const Labels& l, const nvme::QpairStats& s) {
  for (std::size_t t = 0; t < s.errors_by_type.size(); ++t) {
    const uint64_t v = s.errors_by_type[t].load();
    if (v == 0 && t > 3 && t < 7) continue;
    Labels tl = l;
    tl.emplace_back("type", kStatusTypes[t]);
    b.counter(name, "Completions with a non-zero status, by Status Code Type", tl,
              static_cast<double>(v));
  }
}

constexpr const char* kLatencyHelp =
    "Submission-to-completion latency of I/O commands (queue pairs created with track_latency)";

}  // namespace

void QpairRegistry::add(const nvme::Qpair* qp, std::string controller) {
  std::lock_guard lock(mu_);
  live_.push_back({qp, std::move(controller)});
}

void QpairRegistry::remove(const nvme::Qpair* qp) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(live_.begin(), live_.end(), [qp](const Entry& e) { return e.qp == qp; });
  if (it == live_.end()) return;
  auto r = std::find_if(retired_.begin(), retired_.end(),
                        [&](const Retired& x) { return x.controller == it->controller; });
  if (r == retired_.end()) r = retired_.insert(retired_.end(), Retired{it->controller, {}});
  add_stats(r->stats, qp->stats());
  live_.erase(it);
}

Source QpairRegistry::source() {
  return [this](Builder& b) {
    std::lock_guard lock(mu_);
    std::map<std::string, nvme::QpairStats> per_controller;
    for (const Retired& r : retired_) add_stats(per_controller[r.controller], r.stats);
    for (const Entry& e : live_) {
      const nvme::QpairStats& s = e.qp->stats();
      add_stats(per_controller[e.controller], s);
      const Labels l = {{"controller", e.controller}, {"qid", std::to_string(e.qp->id())}};
      for (const Field& f : kFields) {
        b.counter(std::string("pollux_nvme_qpair_") + f.name + "_total", f.help, l,
                  static_cast<double>((s.*f.member).load()));
      }
      b.histogram("pollux_nvme_qpair_latency_seconds", kLatencyHelp, l, s.latency,
                  1e-9);
      add_errors_by_type(b, "pollux_nvme_qpair_errors_by_type_total", l, s);
      const uint64_t sub = s.submitted.load(), cpl = s.completed.load();
      b.gauge("pollux_nvme_qpair_outstanding",
              "Commands submitted to the device and not completed by it", l,
              static_cast<double>(sub > cpl ? sub - cpl : 0));
    }
    for (const auto& [name, s] : per_controller) {
      const Labels l = {{"controller", name}};
      for (const Field& f : kFields) {
        b.counter(std::string("pollux_nvme_controller_io_") + f.name + "_total",
                  std::string(f.help) + " (all I/O queue pairs, past and present)", l,
                  static_cast<double>((s.*f.member).load()));
      }
      add_errors_by_type(b, "pollux_nvme_controller_io_errors_by_type_total", l, s);
      b.histogram("pollux_nvme_controller_io_latency_seconds",
                  std::string(kLatencyHelp) + " (all I/O queue pairs, past and present)", l,
                  s.latency, 1e-9);
    }
  };
}

}  // namespace pollux::metrics
