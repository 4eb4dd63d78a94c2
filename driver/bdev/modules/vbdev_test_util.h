// Test fixture of the virtual bdev modules: a step-mode framework on a virtual clock, a bdev
// manager, two threads, DMA buffers, and helpers that act "on" a thread.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/bdev/modules/null.h"
#include "driver/env/dma_memory.h"
#include "driver/event/test_util.h"

namespace pollux::bdev::testing {

struct Done {
  int calls = 0, ok = 0;
  IoStatus last = IoStatus::kPending;
  uint16_t nvme = 0;
  static void cb(BdevIo& io, bool success, void* arg) {
    auto* d = static_cast<Done*>(arg);
    ++d->calls;
    d->ok += success;
    d->last = io.status();
    d->nvme = io.nvme_status();
  }
};

// Counts kRemove events; optionally closes the descriptor and puts its channels right away.
struct Watch {
  int removes = 0;
  std::function<void()> on_remove;
  static void cb(DescEvent e, Bdev&, void* ctx) {
    auto* w = static_cast<Watch*>(ctx);
    if (e != DescEvent::kRemove) return;
    ++w->removes;
    if (w->on_remove) w->on_remove();
  }
};

class VbdevFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ManagerOptions o;
    o.io_pool_size = 8192;
    o.bounce_buffers = 0;
    auto m = Manager::create(*s.fw, o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    mgr = std::move(m).value();
    t0 = s.fw->create_thread("t0", 0);
    t1 = s.fw->create_thread("t1", 1);
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 1 << 20);
    ASSERT_TRUE(mem.ok());
    buf = std::move(mem).value();
  }
  // Whatever a test left open is closed and unregistered, so every module is torn down.
  void TearDown() override {
    release_all();
    for (Bdev* b : mgr->bdevs()) on(t0, [&] { mgr->unregister_bdev(b->name()); });
    s.settle();
  }
  void release_all() {
    for (auto& [ch, t] : channels) on(t, [&] { mgr->put_io_channel(ch); });
    channels.clear();
    for (Desc* d : descs) on(t0, [&] { mgr->close(d); });
    descs.clear();
    s.settle();
  }

  void on(event::Thread* t, const std::function<void()>& fn) {
    event::CurrentThreadScope scope(t);
    fn();
  }
  Bdev* add_malloc(const std::string& name, uint64_t blocks = 4096, uint32_t bs = 512) {
    Result<Bdev*> r = make_error(EINVAL, "");
    on(t0, [&] { r = create_malloc_bdev(*mgr, {name, blocks, bs, nullptr, nullptr}); });
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : nullptr;
  }
  Bdev* add_null(const std::string& name, uint64_t blocks = 1 << 20, uint32_t bs = 512) {
    Result<Bdev*> r = make_error(EINVAL, "");
    on(t0, [&] { r = create_null_bdev(*mgr, {name, blocks, bs}); });
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : nullptr;
  }
  // Opened on t0; closed at tear-down unless forget()-ten.
  Desc* open(const std::string& name, bool write = true, Watch* w = nullptr) {
    Result<Desc*> r = make_error(EINVAL, "");
    on(t0, [&] { r = mgr->open(name, write, w ? &Watch::cb : nullptr, w); });
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (!r.ok()) return nullptr;
    descs.push_back(r.value());
    return r.value();
  }
  event::IoChannel* channel(Desc* d, event::Thread* t) {
    event::IoChannel* ch = nullptr;
    on(t, [&] { ch = mgr->get_io_channel(d); });
    EXPECT_NE(ch, nullptr);
    channels.emplace_back(ch, t);
    return ch;
  }
  // Closes d and puts its channels now (what a user does on kRemove).
  void close_now(Desc* d) {
    for (auto it = channels.begin(); it != channels.end();) {
      if (it->first->io_device() == &d->bdev()) {
        mgr->put_io_channel(it->first);
        it = channels.erase(it);
      } else {
        ++it;
      }
    }
    mgr->close(d);
    descs.erase(std::find(descs.begin(), descs.end(), d));
  }
  int read(Desc* d, event::IoChannel* ch, std::size_t at, uint64_t off, uint64_t n, Done* done) {
    int rc;
    on(ch->thread(), [&] { rc = mgr->read(d, ch, mem(at), off, n, &Done::cb, done); });
    return rc;
  }
  int write(Desc* d, event::IoChannel* ch, std::size_t at, uint64_t off, uint64_t n, Done* done) {
    int rc;
    on(ch->thread(), [&] { rc = mgr->write(d, ch, mem(at), off, n, &Done::cb, done); });
    return rc;
  }
  uint8_t* mem(std::size_t off = 0) { return static_cast<uint8_t*>(buf->data()) + off; }

  event::testing::StepFramework s;
  std::unique_ptr<Manager> mgr;
  event::Thread *t0 = nullptr, *t1 = nullptr;
  std::unique_ptr<env::DmaRegion> buf;
  std::vector<std::pair<event::IoChannel*, event::Thread*>> channels;
  std::vector<Desc*> descs;
};

}  // namespace pollux::bdev::testing
