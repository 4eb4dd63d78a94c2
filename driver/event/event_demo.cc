// pollux-event-demo: the event framework at work. Reactors on a core mask, lightweight
// threads passing a token around a ring of messages, a DMA buffer pool used per thread,
// and the per-reactor / per-thread / per-poller statistics printed at the end.
//   bazel run //driver/event:pollux-event-demo -- -m 0x3 -t 2
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <vector>

#include "common/cli.h"
#include "driver/env/dma_pool.h"
#include "driver/event/framework.h"

using namespace pollux;
using event::PollStatus;
using event::Thread;

namespace {

struct Demo {
  event::Framework* fw = nullptr;
  env::DmaBufferPool* pool = nullptr;
  std::vector<Thread*> ring;
  std::atomic<uint64_t> hops{0};
  uint64_t deadline = 0;
};

struct PerThread {
  Demo* demo;
  std::size_t index;
  env::DmaBufferCache* cache;
  uint64_t buffers_used = 0;
};

std::vector<PerThread> g_state;

// The token: each hop borrows a DMA buffer on the current thread and forwards the token.
void pass_token(void* arg) {
  auto* st = static_cast<PerThread*>(arg);
  void* buf = st->cache->get();
  if (buf != nullptr) {
    static_cast<char*>(buf)[0] = static_cast<char>(st->index);
    st->cache->put(buf);
    ++st->buffers_used;
  }
  st->demo->hops.fetch_add(1, std::memory_order_relaxed);
  PerThread& next = g_state[(st->index + 1) % g_state.size()];
  while (next.demo->ring[next.index]->send_msg(pass_token, &next) == -EAGAIN) {
  }
}

PollStatus watchdog(void* arg) {
  auto* demo = static_cast<Demo*>(arg);
  if (demo->fw->clock().now() < demo->deadline) return PollStatus::kIdle;
  demo->fw->stop(0);
  return PollStatus::kBusy;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pollux-event-demo: reactors, threads, pollers and messages"};
  std::string mask = "0x3";
  double seconds = 2.0;
  std::size_t threads = 4;
  app.add_option("-m,--core-mask", mask, "reactor core mask, hex or [list]");
  app.add_option("-t,--time", seconds, "run time in seconds")->check(pollux::cli::kPositive);
  app.add_option("-n,--threads", threads, "lightweight threads in the ring")
      ->check(CLI::Range(1, 64));
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  event::FrameworkOptions opts;
  opts.core_mask = mask;
  auto fw = event::Framework::create(opts);
  if (!fw) {
    std::fprintf(stderr, "pollux-event-demo: %s\n", fw.error().message.c_str());
    return 1;
  }
  auto pool = env::DmaBufferPool::create(env::MemoryRegistry::global(), 4096, 1024);
  if (!pool) {
    std::fprintf(stderr, "pollux-event-demo: %s\n", pool.error().message.c_str());
    return 1;
  }
  const env::Clock& clock = (*fw)->clock();
  fmt::print("clock: {} at {:.1f} MHz; DMA pool: {} x {} B, {}\n",
             env::TscClock::instance().source(), clock.ticks_per_second() / 1e6,
             (*pool)->capacity(), (*pool)->buffer_size(), env::to_string((*pool)->backing()));

  Demo demo;
  demo.fw = fw->get();
  demo.pool = pool->get();
  std::vector<std::unique_ptr<env::DmaBufferCache>> caches;
  for (std::size_t i = 0; i < threads; ++i) {
    demo.ring.push_back((*fw)->create_thread(fmt::format("ring{}", i)));
    caches.push_back(std::make_unique<env::DmaBufferCache>(**pool, 16));
    g_state.push_back(PerThread{&demo, i, caches.back().get()});
  }
  demo.deadline = clock.now() + static_cast<uint64_t>(seconds * clock.ticks_per_second());
  demo.ring[0]->send_msg(pass_token, &g_state[0]);

  const int rc = (*fw)->run(
      [](void* arg) {
        Thread::current()->register_poller(watchdog, arg, 1000, "watchdog");
      },
      &demo);

  fmt::print("\n{} token hops in {:.1f} s: {:.2f} M hops/s\n", demo.hops.load(), seconds,
             demo.hops.load() / seconds / 1e6);
  fmt::print("\n{:<8} {:>5} {:>12} {:>8}\n", "reactor", "core", "iterations", "busy %");
  for (std::size_t i = 0; i < (*fw)->reactor_count(); ++i) {
    const auto& s = (*fw)->reactor(i).stats();
    const double busy = static_cast<double>(s.busy_ticks.load());
    const double total = busy + static_cast<double>(s.idle_ticks.load());
    fmt::print("{:<8} {:>5} {:>12} {:>7.1f}%\n", i, (*fw)->reactor(i).core(),
               s.iterations.load(), total > 0 ? 100.0 * busy / total : 0.0);
  }
  fmt::print("\n{:<12} {:>10} {:>8} {:>10}\n", "thread", "messages", "busy %", "buffers");
  for (Thread* t : (*fw)->threads()) {
    const double busy = static_cast<double>(t->stats().busy_ticks.load());
    const double total = busy + static_cast<double>(t->stats().idle_ticks.load());
    uint64_t used = 0;
    for (auto& st : g_state)
      if (demo.ring[st.index] == t) used = st.buffers_used;
    fmt::print("{:<12} {:>10} {:>7.1f}% {:>10}\n", t->name(), t->stats().messages.load(),
               total > 0 ? 100.0 * busy / total : 0.0, used);
  }
  fmt::print("\nall threads exited: {}; leaked channels: {}\n", (*fw)->live_threads() == 0,
             (*fw)->leaked_channels());
  return rc;
}
