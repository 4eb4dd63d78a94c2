#include "driver/metrics/event_source.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "driver/event/framework.h"
#include "driver/event/reactor.h"
#include "driver/event/thread.h"

namespace pollux::metrics {

Source event_source(event::Framework& fw) {
  return [&fw](Builder& b) {
    const env::Clock& clock = fw.clock();
    auto secs = [&clock](uint64_t ticks) { return clock.ticks_to_seconds(ticks); };
    for (std::size_t i = 0; i < fw.reactor_count(); ++i) {
      const event::Reactor& r = fw.reactor(i);
      const Labels l = {{"reactor", std::to_string(r.index())}, {"core", std::to_string(r.core())}};
      const event::ReactorStats& s = r.stats();
      b.counter("pollux_reactor_busy_seconds_total",
                "Time the reactor spent in iterations where some thread did work", l,
                secs(s.busy_ticks.load(std::memory_order_relaxed)));
      b.counter("pollux_reactor_idle_seconds_total",
                "Time the reactor spent in iterations where no thread did work", l,
                secs(s.idle_ticks.load(std::memory_order_relaxed)));
      b.counter("pollux_reactor_iterations_total", "Reactor loop iterations", l,
                static_cast<double>(s.iterations.load(std::memory_order_relaxed)));
      b.gauge("pollux_reactor_threads", "Lightweight threads scheduled on the reactor", l,
              static_cast<double>(r.thread_count()));
    }
    // Threads may share a name (and pollers within a thread): series are summed per label set.
    struct PollerSum {
      uint64_t runs = 0, busy_runs = 0, busy_ticks = 0;
      uint64_t period_ticks = 0;  // 0: active (runs every iteration)
      bool paused = false;
    };
    std::map<std::tuple<int, std::string, std::string>, PollerSum> pollers;
    struct ThreadSum {
      uint64_t busy = 0, idle = 0, messages = 0;
      std::vector<int> cpumask;  // the union of the masks of threads sharing the name
    };
    std::map<std::pair<int, std::string>, ThreadSum> threads;
    for (const event::Thread* t : fw.threads()) {
      const int reactor = t->reactor_index();
      ThreadSum& ts = threads[{reactor, t->name()}];
      ts.busy += t->stats().busy_ticks.load(std::memory_order_relaxed);
      ts.idle += t->stats().idle_ticks.load(std::memory_order_relaxed);
      ts.messages += t->stats().messages.load(std::memory_order_relaxed);
      ts.cpumask.insert(ts.cpumask.end(), t->cpumask().begin(), t->cpumask().end());
      for (const event::PollerSample& p : t->poller_samples()) {
        PollerSum& ps = pollers[{reactor, t->name(), p.name}];
        ps.runs += p.runs;
        ps.busy_runs += p.busy_runs;
        ps.busy_ticks += p.busy_ticks;
        ps.period_ticks = p.period_ticks;
        ps.paused = p.paused;
      }
    }
    for (const auto& [key, s] : threads) {
      const Labels l = {{"reactor", std::to_string(key.first)}, {"thread", key.second}};
      b.counter("pollux_thread_busy_seconds_total",
                "Time the thread's polls did work (messages or busy pollers)", l, secs(s.busy));
      b.counter("pollux_thread_idle_seconds_total", "Time the thread's polls found nothing", l,
                secs(s.idle));
      b.counter("pollux_thread_messages_total", "Messages the thread ran", l,
                static_cast<double>(s.messages));
      std::vector<int> mask = s.cpumask;
      std::sort(mask.begin(), mask.end());
      mask.erase(std::unique(mask.begin(), mask.end()), mask.end());
      Labels info = l;
      info.emplace_back("cpumask", event::format_core_mask(mask));
      b.gauge("pollux_thread_info", "1 per thread, with the cores it may run on (cpumask)", info, 1);
    }
    for (const auto& [key, s] : pollers) {
      const Labels l = {{"reactor", std::to_string(std::get<0>(key))},
                        {"thread", std::get<1>(key)},
                        {"poller", std::get<2>(key)}};
      b.counter("pollux_poller_runs_total", "Times the poller ran", l,
                static_cast<double>(s.runs));
      b.counter("pollux_poller_busy_runs_total", "Runs in which the poller reported work", l,
                static_cast<double>(s.busy_runs));
      b.counter("pollux_poller_busy_seconds_total", "Time spent in the poller's busy runs", l,
                secs(s.busy_ticks));
      b.gauge("pollux_poller_period_seconds",
              "The poller's period (0: active, it runs every iteration)", l, secs(s.period_ticks));
      b.gauge("pollux_poller_paused", "1 while the poller is paused", l, s.paused ? 1 : 0);
    }
  };
}

}  // namespace pollux::metrics
