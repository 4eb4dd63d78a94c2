// The bdev core against a scriptable backend, in step mode on a virtual clock.
#include "driver/bdev/bdev.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "driver/bdev/modules/malloc.h"
#include "driver/bdev/modules/null.h"
#include "driver/env/dma_memory.h"
#include "driver/event/test_util.h"

namespace pollux::bdev {
namespace {

// Records what reaches it; completes inline, holds I/O until told, or fails by script.
class ScriptBackend final : public Backend {
 public:
  enum class Mode { kInline, kHold, kFail, kNoMemoryThenOk };
  explicit ScriptBackend(event::Framework& fw, uint32_t bs, uint64_t blocks)
      : fw_(fw), bs_(bs), disk_(bs * blocks) {
    fw_.register_io_device(this, [](void*, void*) { return 0; }, [](void*, void*) {}, 0, "script");
  }
  bool supports(IoType t) const override { return t != IoType::kNvmePassthru; }
  void* io_device() override { return this; }
  void destruct() override {
    destructed = true;
    if (destructed_flag) *destructed_flag = true;  // the backend itself is freed next
    fw_.unregister_io_device(this, nullptr, nullptr);
  }
  void submit(BdevIo& io, void*) override {
    seen.push_back({io.type(), io.offset_blocks(), io.num_blocks(), io.iovcnt(),
                    io.iovcnt() ? io.iovs()[0].iov_base : nullptr});
    if (mode == Mode::kHold) {
      held.push_back(&io);
      return;
    }
    if (mode == Mode::kFail) {
      io.complete(IoStatus::kFailed);
      return;
    }
    if (mode == Mode::kNoMemoryThenOk && nomem_left > 0) {
      --nomem_left;
      io.complete(IoStatus::kNoMemory);
      return;
    }
    execute(io);
  }
  void execute(BdevIo& io) {
    uint8_t* at = disk_.data() + io.offset_blocks() * bs_;
    std::size_t left = io.num_blocks() * bs_;
    for (int i = 0; i < io.iovcnt() && left; ++i) {
      const std::size_t n = std::min(io.iovs()[i].iov_len, left);
      if (io.type() == IoType::kWrite) std::memcpy(at, io.iovs()[i].iov_base, n);
      if (io.type() == IoType::kRead) std::memcpy(io.iovs()[i].iov_base, at, n);
      at += n;
      left -= n;
    }
    io.complete(IoStatus::kSuccess);
  }
  void abort(BdevIo& io, void*) override { aborted.push_back(&io); }
  void release_all() {
    auto h = std::move(held);
    held.clear();
    for (BdevIo* io : h) execute(*io);
  }
  struct Seen {
    IoType type;
    uint64_t offset, num;
    int iovcnt;
    void* base0;
  };
  Mode mode = Mode::kInline;
  int nomem_left = 0;
  bool destructed = false;
  bool* destructed_flag = nullptr;
  std::vector<Seen> seen;
  std::vector<BdevIo*> held;
  std::vector<BdevIo*> aborted;  // what Manager::abort told the module about

 private:
  event::Framework& fw_;
  uint32_t bs_;
  std::vector<uint8_t> disk_;
};

struct Done {
  int calls = 0, ok = 0;
  IoStatus last = IoStatus::kPending;
  static void cb(BdevIo& io, bool success, void* arg) {
    auto* d = static_cast<Done*>(arg);
    ++d->calls;
    d->ok += success;
    d->last = io.status();
  }
};

class BdevTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ManagerOptions o;
    o.io_pool_size = 4096;
    o.bounce_buffers = 8;
    o.bounce_buffer_size = 256 * 1024;
    auto m = Manager::create(*s.fw, o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    mgr = std::move(m).value();
    t0 = s.fw->create_thread("t0", 0);
    t1 = s.fw->create_thread("t1", 1);
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 4 << 20);
    ASSERT_TRUE(mem.ok());
    buf = std::move(mem).value();
  }
  void TearDown() override {
    for (auto* ch : channels) {
      event::CurrentThreadScope on(ch->thread());
      mgr->put_io_channel(ch);
    }
    s.settle();
  }
  ScriptBackend* add_script(const std::string& name, BdevProperties p = {}) {
    auto be = std::make_unique<ScriptBackend>(*s.fw, 512, 1 << 16);
    ScriptBackend* raw = be.get();
    p.name = name;
    p.block_size = 512;
    p.num_blocks = 1 << 16;
    auto b = mgr->register_bdev(p, std::move(be), "script");
    EXPECT_TRUE(b.ok()) << b.error().message;
    return raw;
  }
  event::IoChannel* channel(Desc* d, event::Thread* t) {
    event::CurrentThreadScope on(t);
    auto* ch = mgr->get_io_channel(d);
    channels.push_back(ch);
    return ch;
  }
  uint8_t* mem(std::size_t off = 0) { return static_cast<uint8_t*>(buf->data()) + off; }
  // A manager with only `ios` bdev_ios and a held-I/O script bdev "tiny" on it.
  struct Small {
    std::unique_ptr<Manager> mgr;
    ScriptBackend* be;
  };
  Small small_manager(std::size_t ios, uint32_t max_transfer_blocks) {
    ManagerOptions o;
    o.io_pool_size = ios;
    o.io_cache_size = ios;
    o.bounce_buffers = 0;
    auto m = Manager::create(*s.fw, o);
    EXPECT_TRUE(m.ok());
    auto be = std::make_unique<ScriptBackend>(*s.fw, 512, 1024);
    be->mode = ScriptBackend::Mode::kHold;
    ScriptBackend* raw = be.get();
    BdevProperties p;
    p.name = "tiny";
    p.num_blocks = 1024;
    p.max_transfer_blocks = max_transfer_blocks;
    EXPECT_TRUE((*m)->register_bdev(p, std::move(be), "script").ok());
    return {std::move(m).value(), raw};
  }

  event::testing::StepFramework s;
  std::unique_ptr<Manager> mgr;
  event::Thread *t0 = nullptr, *t1 = nullptr;
  std::unique_ptr<env::DmaRegion> buf;
  std::vector<event::IoChannel*> channels;
};

TEST_F(BdevTest, RegistryNamesAliasesAndBadSizes) {
  BdevProperties p;
  p.aliases = {"disk0"};
  add_script("S0", p);
  EXPECT_NE(mgr->find("S0"), nullptr);
  EXPECT_EQ(mgr->find("disk0"), mgr->find("S0"));
  BdevProperties q;
  q.name = "disk0";  // collides with an alias
  q.num_blocks = 8;
  auto dup = mgr->register_bdev(q, std::make_unique<ScriptBackend>(*s.fw, 512, 8), "script");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, -EEXIST);
  BdevProperties z;
  z.name = "Z";
  auto zero = mgr->register_bdev(z, std::make_unique<ScriptBackend>(*s.fw, 512, 8), "script");
  EXPECT_FALSE(zero.ok());
  EXPECT_FALSE(mgr->open("nope", false).ok());
}

TEST_F(BdevTest, ClaimsAreExclusiveForWriters) {
  add_script("S0");
  auto base = mgr->open("S0", false);
  ASSERT_TRUE(base.ok());
  ASSERT_EQ(mgr->claim(*base, "vbdev"), 0);
  auto w = mgr->open("S0", true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, -EPERM);
  auto r = mgr->open("S0", false);  // readers still welcome
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(mgr->claim(*r, "other"), -EPERM);
  mgr->close(*base);  // closing the claimer releases the claim
  auto w2 = mgr->open("S0", true);
  EXPECT_TRUE(w2.ok());
  EXPECT_EQ(mgr->claim(*r, "other"), -EPERM);  // a writer exists now
  mgr->close(*r);
  mgr->close(*w2);
}

// 4e9 blocks mapped 16 TB and grew until the OOM killer came: refused up front, by name.
TEST_F(BdevTest, MallocLargerThanTheMachineIsRefused) {
  auto r = create_malloc_bdev(*mgr, {"Big", 4'000'000'000, 4096});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, -ENOMEM);
  EXPECT_NE(r.error().message.find("malloc bdev Big: 4000000000 blocks of 4096 bytes: cannot map"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(mgr->find("Big"), nullptr);
  auto overflow = create_malloc_bdev(*mgr, {"Huge", uint64_t{1} << 60, 4096});
  ASSERT_FALSE(overflow.ok());  // num_blocks x block_size does not fit in 64 bits
  EXPECT_NE(overflow.error().message.find("too large"), std::string::npos);
}

TEST_F(BdevTest, ReadWriteRoundTripAndValidation) {
  MallocOptions mo{"M0", 2048, 512};
  ASSERT_TRUE(create_malloc_bdev(*mgr, mo).ok());
  auto d = mgr->open("M0", true);
  ASSERT_TRUE(d.ok());
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  for (int i = 0; i < 4096; ++i) mem()[i] = static_cast<uint8_t>(i * 7);
  Done w, r;
  ASSERT_EQ(mgr->write(*d, ch, mem(), 100, 8, Done::cb, &w), 0);
  EXPECT_EQ(w.calls, 0);  // completed inside submit: the callback waits for the poller
  s.settle();
  ASSERT_EQ(mgr->read(*d, ch, mem(8192), 100, 8, Done::cb, &r), 0);
  s.settle();
  EXPECT_EQ(w.ok, 1);
  EXPECT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(mem(), mem(8192), 4096), 0);
  Done x;
  EXPECT_EQ(mgr->read(*d, ch, mem(), 2047, 2, Done::cb, &x), -EINVAL);   // past the end
  EXPECT_EQ(mgr->read(*d, ch, mem(), 0, 0, Done::cb, &x), -EINVAL);      // empty
  EXPECT_EQ(mgr->read(*d, ch, mem(), UINT64_MAX, 2, Done::cb, &x), -EINVAL);  // overflow
  auto ro = mgr->open("M0", false);
  EXPECT_EQ(mgr->write(*ro, ch, mem(), 0, 1, Done::cb, &x), -EBADF);
  EXPECT_EQ(x.calls, 0);
  mgr->close(*ro);
  // Stats: one read, one write, bytes counted.
  static IoStats got;
  mgr->get_stats(*mgr->find("M0"), [](const IoStats& st, void*) { got = st; }, nullptr);
  s.settle();
  EXPECT_EQ(got.by_type[0].ops, 1u);
  EXPECT_EQ(got.by_type[1].ops, 1u);
  EXPECT_EQ(got.by_type[0].bytes, 4096u);
  EXPECT_EQ(got.read_latency.count(), 1u);
  // The same from the channel itself, on its thread (what pollux-bdevperf reads).
  const IoStats& mine = mgr->channel_stats(ch);
  EXPECT_EQ(mine.by_type[0].ops, 1u);
  EXPECT_EQ(mine.read_latency.count(), 1u);
  EXPECT_EQ(mine.write_latency.count(), 1u);
  EXPECT_EQ(mine.other_latency.count(), 0u);
  mgr->close(*d);
}

TEST_F(BdevTest, UnsupportedTypesAreRefused) {
  ASSERT_TRUE(create_null_bdev(*mgr, {"N0", 1024, 512}).ok());
  auto d = mgr->open("N0", true);
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  Done x;
  EXPECT_EQ(mgr->compare(*d, ch, mem(), 0, 1, Done::cb, &x), -ENOTSUP);
  mgr->close(*d);
}

TEST_F(BdevTest, SplitsAtMaxTransferAndOptimalBoundary) {
  BdevProperties p;
  p.max_transfer_blocks = 8;
  p.optimal_io_boundary = 16;
  p.split_on_optimal_io_boundary = true;
  ScriptBackend* be = add_script("S0", p);
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  for (int i = 0; i < 20 * 512; ++i) mem()[i] = static_cast<uint8_t>(i % 251);
  Done w;
  ASSERT_EQ(mgr->write(*d, ch, mem(), 10, 20, Done::cb, &w), 0);  // blocks 10..29
  s.settle();
  ASSERT_EQ(w.ok, 1);
  ASSERT_EQ(be->seen.size(), 3u);
  EXPECT_EQ(be->seen[0].offset, 10u);  // 10..15: stops at the boundary 16
  EXPECT_EQ(be->seen[0].num, 6u);
  EXPECT_EQ(be->seen[1].offset, 16u);  // 16..23: max transfer
  EXPECT_EQ(be->seen[1].num, 8u);
  EXPECT_EQ(be->seen[2].offset, 24u);
  EXPECT_EQ(be->seen[2].num, 6u);
  EXPECT_EQ(be->seen[1].base0, mem(6 * 512));
  Done r;
  std::memset(mem(1 << 20), 0, 20 * 512);
  ASSERT_EQ(mgr->read(*d, ch, mem(1 << 20), 10, 20, Done::cb, &r), 0);
  s.settle();
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(mem(), mem(1 << 20), 20 * 512), 0);
  mgr->close(*d);
}

TEST_F(BdevTest, SplitChildFailureFailsTheParentOnce) {
  BdevProperties p;
  p.max_transfer_blocks = 4;
  ScriptBackend* be = add_script("S0", p);
  be->mode = ScriptBackend::Mode::kHold;
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  Done w;
  ASSERT_EQ(mgr->write(*d, ch, mem(), 0, 12, Done::cb, &w), 0);
  ASSERT_EQ(be->held.size(), 3u);
  be->held[1]->complete(IoStatus::kFailed);
  be->held[0]->complete(IoStatus::kSuccess);
  EXPECT_EQ(w.calls, 0);  // still one child out
  be->held[2]->complete(IoStatus::kSuccess);
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w.ok, 0);
  EXPECT_EQ(w.last, IoStatus::kFailed);
  mgr->close(*d);
}

TEST_F(BdevTest, MisalignedBuffersAreBounced) {
  BdevProperties p;
  p.required_alignment = 12;  // 4 KiB
  ScriptBackend* be = add_script("S0", p);
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  for (int i = 0; i < 4096; ++i) mem(100)[i] = static_cast<uint8_t>(i ^ 0x5a);
  Done w, r;
  ASSERT_EQ(mgr->write(*d, ch, mem(100), 0, 8, Done::cb, &w), 0);
  s.settle();
  ASSERT_EQ(w.ok, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(be->seen[0].base0) % 4096, 0u);
  EXPECT_NE(be->seen[0].base0, mem(100));
  ASSERT_EQ(mgr->read(*d, ch, mem(3 << 20) + 7, 0, 8, Done::cb, &r), 0);
  s.settle();
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(mem(100), mem(3 << 20) + 7, 4096), 0);
  ASSERT_EQ(mgr->read(*d, ch, mem(4096), 0, 8, Done::cb, &r), 0);  // aligned: not bounced
  EXPECT_EQ(be->seen.back().base0, mem(4096));
  mgr->close(*d);
}

TEST_F(BdevTest, NoMemoryFromTheModuleIsRetriedNotFailed) {
  ScriptBackend* be = add_script("S0");
  be->mode = ScriptBackend::Mode::kNoMemoryThenOk;
  be->nomem_left = 3;
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  Done w;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->write(*d, ch, mem(), 0, 1, Done::cb, &w), 0);
  }
  s.settle();
  EXPECT_EQ(w.ok, 1);
  EXPECT_EQ(be->seen.size(), 4u);
  mgr->close(*d);
}

// Manager::abort: an I/O waiting in the layer (here: refused by a module out of resources,
// waiting to be resubmitted) ends with kAborted and never reaches the module again; one the
// module holds is marked and reported to it, and ends as the module decides. Callbacks never
// run inside abort(); other I/O and other cb_args are untouched.
TEST_F(BdevTest, AbortEndsWaitingIoAndTellsTheModuleWhatItHolds) {
  ScriptBackend* be = add_script("S0");
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  event::CurrentThreadScope on(t0);
  Done held, other, waiting;
  be->mode = ScriptBackend::Mode::kHold;
  ASSERT_EQ(mgr->write(*d, ch, mem(), 0, 1, Done::cb, &held), 0);
  ASSERT_EQ(mgr->write(*d, ch, mem(), 8, 1, Done::cb, &other), 0);
  be->mode = ScriptBackend::Mode::kNoMemoryThenOk;
  be->nomem_left = 1000;
  ASSERT_EQ(mgr->write(*d, ch, mem(), 16, 1, Done::cb, &waiting), 0);
  ASSERT_EQ(be->seen.size(), 3u);
  EXPECT_EQ(mgr->abort(*d, ch, &held), 1);
  EXPECT_EQ(mgr->abort(*d, ch, &waiting), 1);
  EXPECT_EQ(waiting.calls, 0);  // not inside abort()
  EXPECT_EQ(mgr->abort(*d, ch, &held), 0);  // already given up
  EXPECT_EQ(mgr->abort(*d, ch, this), 0);   // nothing submitted with that cb_arg
  ASSERT_EQ(be->aborted.size(), 1u);        // told once, however many aborts follow
  EXPECT_EQ(be->aborted[0], be->held[0]);
  EXPECT_TRUE(be->held[0]->abort_requested());
  EXPECT_FALSE(be->held[1]->abort_requested());
  s.settle();
  EXPECT_EQ(waiting.calls, 1);
  EXPECT_EQ(waiting.last, IoStatus::kAborted);
  EXPECT_EQ(be->seen.size(), 3u);  // the aborted one was not submitted again
  EXPECT_EQ(held.calls, 0);        // the module still holds it
  be->held[0]->complete(IoStatus::kAborted);
  be->held[1]->complete(IoStatus::kSuccess);
  s.settle();
  EXPECT_EQ(held.last, IoStatus::kAborted);
  EXPECT_EQ(other.ok, 1);
  mgr->close(*d);
}

// Aborting a split I/O: the module hears of every child in flight (each reports
// abort_requested through its parent), and the parent makes no more children.
TEST_F(BdevTest, AbortOfASplitIoReachesItsChildrenAndStopsTheSplit) {
  auto small = small_manager(3, 4);  // 3 bdev_ios: a parent and two children at a time
  auto d = small.mgr->open("tiny", true);
  event::IoChannel* ch;
  {
    event::CurrentThreadScope on(t0);
    ch = small.mgr->get_io_channel(*d);
  }
  event::CurrentThreadScope on(t0);
  Done w;
  ASSERT_EQ(small.mgr->write(*d, ch, mem(), 0, 16, Done::cb, &w), 0);
  ASSERT_EQ(small.be->held.size(), 2u);
  EXPECT_EQ(small.mgr->abort(*d, ch, &w), 1);
  ASSERT_EQ(small.be->aborted.size(), 2u);
  for (BdevIo* c : small.be->held) EXPECT_TRUE(c->abort_requested());
  small.be->held[0]->complete(IoStatus::kSuccess);
  small.be->held[1]->complete(IoStatus::kSuccess);
  s.settle();
  EXPECT_EQ(small.be->seen.size(), 2u);  // no third child
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w.last, IoStatus::kAborted);
  small.mgr->put_io_channel(ch);
  small.mgr->close(*d);
  s.settle();
}

TEST_F(BdevTest, ResetQuiescesChannelsAndLosesNothing) {
  ScriptBackend* be = add_script("S0");
  auto d = mgr->open("S0", true);
  auto* c0 = channel(*d, t0);
  auto* c1 = channel(*d, t1);
  be->mode = ScriptBackend::Mode::kHold;
  Done reset, during0, during1;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->reset(*d, c0, Done::cb, &reset), 0);
  }
  s.settle();  // every channel frozen, the reset reached the module and is held there
  ASSERT_EQ(be->held.size(), 1u);
  EXPECT_EQ(be->held[0]->type(), IoType::kReset);
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->write(*d, c0, mem(), 0, 1, Done::cb, &during0), 0);
  }
  {
    event::CurrentThreadScope on(t1);
    ASSERT_EQ(mgr->read(*d, c1, mem(4096), 0, 1, Done::cb, &during1), 0);
  }
  s.settle();
  EXPECT_EQ(be->held.size(), 1u);  // the new I/O waits in the channels, not in the module
  be->mode = ScriptBackend::Mode::kInline;
  {
    event::CurrentThreadScope on(t0);
    be->release_all();  // the reset completes
  }
  s.settle();
  EXPECT_EQ(reset.ok, 1);
  EXPECT_EQ(during0.ok, 1);
  EXPECT_EQ(during1.ok, 1);
  mgr->close(*d);
}

TEST_F(BdevTest, ConcurrentResetsShareOneModuleReset) {
  ScriptBackend* be = add_script("S0");
  auto d = mgr->open("S0", true);
  auto* c0 = channel(*d, t0);
  auto* c1 = channel(*d, t1);
  be->mode = ScriptBackend::Mode::kHold;
  Done r0, r1;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->reset(*d, c0, Done::cb, &r0), 0);
  }
  s.settle();
  {
    event::CurrentThreadScope on(t1);
    ASSERT_EQ(mgr->reset(*d, c1, Done::cb, &r1), 0);  // arrives while the first is running
  }
  s.settle();
  ASSERT_EQ(be->held.size(), 1u);  // the module saw one reset
  be->mode = ScriptBackend::Mode::kInline;
  {
    event::CurrentThreadScope on(t0);
    be->release_all();
  }
  s.settle();
  EXPECT_EQ(r0.ok, 1);
  EXPECT_EQ(r1.ok, 1);
  mgr->close(*d);
}

TEST_F(BdevTest, HotRemoveTellsDescriptorsAndDestructsAfterTheLastClose) {
  ScriptBackend* be = add_script("S0");
  bool destructed = false;
  be->destructed_flag = &destructed;
  struct Events {
    int removes = 0;
  } ev;
  auto d = mgr->open("S0", true, [](DescEvent e, Bdev&, void* ctx) {
    if (e == DescEvent::kRemove) ++static_cast<Events*>(ctx)->removes;
  }, &ev);
  auto* ch = channel(*d, t0);
  be->mode = ScriptBackend::Mode::kHold;
  Done inflight;
  static bool unregistered;
  unregistered = false;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->write(*d, ch, mem(), 0, 1, Done::cb, &inflight), 0);
    ASSERT_EQ(mgr->unregister_bdev("S0", [](void*) { unregistered = true; }, nullptr), 0);
  }
  s.settle();
  EXPECT_EQ(ev.removes, 1);
  EXPECT_EQ(mgr->find("S0"), nullptr);  // invisible to new users at once
  EXPECT_FALSE(mgr->open("S0", false).ok());
  {
    event::CurrentThreadScope on(t0);
    be->release_all();  // in-flight I/O still completes to its owner
  }
  EXPECT_EQ(inflight.ok, 1);
  EXPECT_FALSE(destructed);  // a descriptor is still open
  {
    event::CurrentThreadScope on(t0);
    mgr->put_io_channel(ch);
    channels.clear();
    mgr->close(*d);
  }
  s.settle();
  EXPECT_TRUE(destructed);
  EXPECT_TRUE(unregistered);
}

TEST_F(BdevTest, QosLimitsIopsInVirtualTime) {
  ASSERT_TRUE(create_null_bdev(*mgr, {"N0", 1 << 20, 512}).ok());
  auto d = mgr->open("N0", true);
  auto* ch = channel(*d, t0);
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->set_qos(*mgr->find("N0"), 20000, 0), 0);  // 20 per millisecond
  }
  struct Loop {
    Manager* mgr;
    Desc* d;
    event::IoChannel* ch;
    uint8_t* buf;
    int done = 0;
    bool stop = false;
    static void cb(BdevIo&, bool, void* arg) {
      auto* l = static_cast<Loop*>(arg);
      ++l->done;
      if (!l->stop) l->mgr->read(l->d, l->ch, l->buf, 0, 1, cb, l);  // keep the queue full
    }
  } loop{mgr.get(), *d, ch, mem()};
  {
    event::CurrentThreadScope on(t0);
    for (int i = 0; i < 64; ++i) mgr->read(*d, ch, mem(), 0, 1, Loop::cb, &loop);
  }
  const int before = loop.done;
  for (int step = 0; step < 1000; ++step) {  // 100 ms of virtual time in 100 µs steps
    s.clock.advance_us(100);
    s.fw->step();
  }
  const int admitted = loop.done - before;
  EXPECT_GE(admitted, 1900);  // 20,000 IOPS × 0.1 s = 2000
  EXPECT_LE(admitted, 2100);
  const int at_stop = loop.done;
  loop.stop = true;
  {
    event::CurrentThreadScope on(t0);
    mgr->set_qos(*mgr->find("N0"), 0, 0);
  }
  s.settle(100000);
  EXPECT_EQ(loop.done - at_stop, 64);  // the 64 held back by QoS all complete: none lost
  mgr->close(*d);
}

// A write-bandwidth limit holds writes to their rate, and does not limit reads. (Like SPDK,
// QoS keeps submission order: an I/O waiting for tokens holds back those behind it.)
TEST_F(BdevTest, QosWriteBandwidthLimitsWritesOnly) {
  ASSERT_TRUE(create_null_bdev(*mgr, {"N0", 1 << 20, 512}).ok());
  auto d = mgr->open("N0", true);
  auto* ch = channel(*d, t0);
  {
    event::CurrentThreadScope on(t0);
    QosLimits l;
    l.write_bps = 4096 * 10000;  // 10,000 4 KiB writes per second
    ASSERT_EQ(mgr->set_qos(*mgr->find("N0"), l), 0);
  }
  struct Loop {
    Manager* mgr;
    Desc* d;
    event::IoChannel* ch;
    uint8_t* buf;
    bool write;
    int done = 0;
    bool stop = false;
    static void cb(BdevIo&, bool, void* arg) {
      auto* l = static_cast<Loop*>(arg);
      ++l->done;
      if (l->stop) return;
      if (l->write) l->mgr->write(l->d, l->ch, l->buf, 0, 8, cb, l);
      else l->mgr->read(l->d, l->ch, l->buf, 0, 8, cb, l);
    }
  } writes{mgr.get(), *d, ch, mem(), true}, reads{mgr.get(), *d, ch, mem(8192), false};
  {
    event::CurrentThreadScope on(t0);
    for (int i = 0; i < 16; ++i) mgr->write(*d, ch, mem(), 0, 8, Loop::cb, &writes);
  }
  for (int step = 0; step < 500; ++step) {  // 50 ms
    s.clock.advance_us(100);
    s.fw->step();
  }
  EXPECT_GE(writes.done, 480);  // 10,000/s × 0.05 s = 500
  EXPECT_LE(writes.done, 530);
  writes.stop = true;
  s.settle(100000);
  {
    event::CurrentThreadScope on(t0);
    for (int i = 0; i < 16; ++i) mgr->read(*d, ch, mem(8192), 0, 8, Loop::cb, &reads);
  }
  for (int step = 0; step < 50; ++step) {  // 5 ms: a write-limited bdev would allow 50
    s.clock.advance_us(100);
    s.fw->step();
  }
  EXPECT_GT(reads.done, 500);  // reads are not limited
  reads.stop = true;
  {
    event::CurrentThreadScope on(t0);
    mgr->set_qos(*mgr->find("N0"), QosLimits{});
  }
  s.settle(100000);
  mgr->close(*d);
}

// A thread that exits while still holding a bdev channel: the channel, its module channel
// and its poller are released in the right order (ASan checks the frees), counted as leaks.
TEST_F(BdevTest, ExitingThreadReleasesForgottenBdevChannels) {
  ASSERT_TRUE(create_malloc_bdev(*mgr, {"M0", 1024, 512}).ok());
  auto d = mgr->open("M0", true);
  {
    event::CurrentThreadScope on(t0);
    ASSERT_NE(mgr->get_io_channel(*d), nullptr);  // never put
  }
  s.fw->stop();
  s.settle();
  EXPECT_TRUE(s.fw->finished());
  EXPECT_GE(s.fw->leaked_channels(), 1u);
  mgr->close(*d);
}

// A module that runs out of resources on a reset fails the reset; the bdev is not left
// frozen.
TEST_F(BdevTest, ResetRefusedByTheModuleFailsAndThaws) {
  ScriptBackend* be = add_script("S0");
  be->mode = ScriptBackend::Mode::kNoMemoryThenOk;
  be->nomem_left = 1;
  auto d = mgr->open("S0", true);
  auto* ch = channel(*d, t0);
  Done r, w;
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->reset(*d, ch, Done::cb, &r), 0);
  }
  s.settle();
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.ok, 0);
  {
    event::CurrentThreadScope on(t0);
    ASSERT_EQ(mgr->write(*d, ch, mem(), 0, 1, Done::cb, &w), 0);
  }
  s.settle();
  EXPECT_EQ(w.ok, 1);  // not frozen
  mgr->close(*d);
}

// I/Os larger than a millisecond's byte budget, and rates below 1000 per second, still get
// the configured rate: debt carries over and fractions accumulate.
TEST_F(BdevTest, QosHoldsLargeIoAndLowRatesToTheirLimits) {
  ASSERT_TRUE(create_null_bdev(*mgr, {"N0", 1 << 22, 512}).ok());
  auto d = mgr->open("N0", true);
  auto* ch = channel(*d, t0);
  struct Loop {
    Manager* mgr;
    Desc* d;
    event::IoChannel* ch;
    uint8_t* buf;
    uint64_t blocks;
    int done = 0;
    bool stop = false;
    static void cb(BdevIo&, bool, void* arg) {
      auto* l = static_cast<Loop*>(arg);
      ++l->done;
      if (!l->stop) l->mgr->write(l->d, l->ch, l->buf, 0, l->blocks, cb, l);
    }
  };
  auto run = [&](QosLimits limits, uint64_t blocks, int ms) {
    {
      event::CurrentThreadScope on(t0);
      EXPECT_EQ(mgr->set_qos(*mgr->find("N0"), limits), 0);
    }
    Loop loop{mgr.get(), *d, ch, mem(), blocks};
    {
      event::CurrentThreadScope on(t0);
      for (int i = 0; i < 4; ++i) mgr->write(*d, ch, mem(), 0, blocks, Loop::cb, &loop);
    }
    for (int step = 0; step < ms * 10; ++step) {
      s.clock.advance_us(100);
      s.fw->step();
    }
    const int done = loop.done;
    loop.stop = true;
    {
      event::CurrentThreadScope on(t0);
      mgr->set_qos(*mgr->find("N0"), QosLimits{});
    }
    s.settle(100000);
    return done;
  };
  // 100 MiB/s with 1 MiB writes: 100 per second, so about 20 in 200 ms (not one per ms).
  QosLimits bw;
  bw.bps = 100ull << 20;
  const int big = run(bw, 2048, 200);
  EXPECT_GE(big, 18);
  EXPECT_LE(big, 24);
  // 100 IOPS: about 20 in 200 ms (not one per ms).
  QosLimits slow;
  slow.iops = 100;
  const int few = run(slow, 1, 200);
  EXPECT_GE(few, 18);
  EXPECT_LE(few, 24);
  mgr->close(*d);
}

// An I/O needing far more children than there are bdev_ios goes through anyway: the split
// continues as children give their bdev_ios back.
TEST_F(BdevTest, SplitLargerThanThePoolProgresses) {
  auto [small, raw] = small_manager(4, 1);
  auto d = small->open("tiny", true);
  event::CurrentThreadScope on(t0);
  auto* ch = small->get_io_channel(*d);
  for (int i = 0; i < 64 * 512; ++i) mem()[i] = static_cast<uint8_t>(i * 13);
  Done w;
  ASSERT_EQ(small->write(*d, ch, mem(), 0, 64, Done::cb, &w), 0);  // 64 children, 4 bdev_ios
  int rounds = 0;
  while (w.calls == 0 && rounds++ < 1000) {
    EXPECT_LE(raw->held.size(), 3u);  // one bdev_io is the parent
    raw->release_all();
    s.fw->step();
  }
  EXPECT_EQ(w.ok, 1);
  EXPECT_EQ(raw->seen.size(), 64u);
  raw->mode = ScriptBackend::Mode::kInline;
  Done r;
  ASSERT_EQ(small->read(*d, ch, mem(1 << 20), 0, 64, Done::cb, &r), 0);
  s.settle();
  EXPECT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(mem(), mem(1 << 20), 64 * 512), 0);
  small->put_io_channel(ch);
  small->close(*d);
  s.settle();
}

TEST_F(BdevTest, PoolExhaustionIsAClearError) {
  auto [small, raw] = small_manager(4, 0);
  auto d = small->open("tiny", true);
  event::CurrentThreadScope on(t0);
  auto* ch = small->get_io_channel(*d);
  Done w;
  int accepted = 0, refused = 0;
  for (int i = 0; i < 8; ++i) {
    const int rc = small->write(*d, ch, mem(), 0, 1, Done::cb, &w);
    if (rc == 0) ++accepted; else if (rc == -ENOMEM) ++refused;
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(refused, 4);
  raw->mode = ScriptBackend::Mode::kInline;
  raw->release_all();
  EXPECT_EQ(w.ok, 4);
  small->put_io_channel(ch);
  small->close(*d);
  s.settle();
}

}  // namespace
}  // namespace pollux::bdev
