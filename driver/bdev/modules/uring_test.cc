// bdev_uring on a file in TEST_TMPDIR, through the bdev layer (step-mode framework).
#include "driver/bdev/modules/uring.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "driver/event/framework.h"

namespace pollux::bdev {
namespace {

using event::CurrentThreadScope;

struct Done {
  int n = 0, ok = 0;
  static void cb(BdevIo&, bool success, void* arg) {
    auto* d = static_cast<Done*>(arg);
    ++d->n;
    d->ok += success;
  }
};

bool uring_available() {
  io_uring ring;
  if (io_uring_queue_init(4, &ring, 0) < 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

class UringBdevTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!uring_available()) GTEST_SKIP() << "io_uring is not available here";
    event::FrameworkOptions fo;
    fo.core_mask = "0x3";
    fo.step_mode = true;
    fo.pin_reactors = false;
    auto fw = event::Framework::create(fo);
    ASSERT_TRUE(fw.ok());
    fw_ = std::move(fw).value();
    t0_ = fw_->create_thread("t0", 0);
    t1_ = fw_->create_thread("t1", 1);
    auto mgr = Manager::create(*fw_);
    ASSERT_TRUE(mgr.ok());
    mgr_ = std::move(mgr).value();
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = std::string(tmp ? tmp : "/tmp") + "/uring_" + std::to_string(::getpid()) + ".img";
    const int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  void TearDown() override {
    if (fw_) {
      fw_->stop(0);
      run_until([&] { return fw_->finished(); });
    }
    mgr_.reset();
    fw_.reset();
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void run_until(const std::function<bool()>& pred, double seconds = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "condition not reached";
        return;
      }
      fw_->step();
    }
  }
  Bdev* create(uint64_t blocks = 0, uint32_t bs = 512) {
    UringOptions o;
    o.name = "U0";
    o.filename = path_;
    o.num_blocks = blocks;
    o.block_size = bs;
    o.queue_depth = 32;
    CurrentThreadScope on(t0_);
    auto b = create_uring_bdev(*mgr_, o);
    EXPECT_TRUE(b.ok()) << b.error().message;
    return b.ok() ? *b : nullptr;
  }
  void remove() {
    bool done = false;
    {
      CurrentThreadScope on(t0_);
      ASSERT_EQ(delete_uring_bdev(*mgr_, "U0", [](void* p) { *static_cast<bool*>(p) = true; },
                                  &done),
                0);
    }
    run_until([&] { return done; });
  }
  void io(event::Thread* t, Done& d, const std::function<int()>& fn, int want = 1) {
    {
      CurrentThreadScope on(t);
      ASSERT_EQ(fn(), 0);
    }
    run_until([&] { return d.n >= want; });
  }
  struct Open {
    Desc* desc = nullptr;
    event::IoChannel* ch = nullptr;
  };
  Open open(event::Thread* t) {
    CurrentThreadScope on(t);
    Open o;
    auto d = mgr_->open("U0", true);
    EXPECT_TRUE(d.ok());
    o.desc = *d;
    o.ch = mgr_->get_io_channel(o.desc);
    EXPECT_NE(o.ch, nullptr);
    return o;
  }
  void close(event::Thread* t, Open& o) {
    CurrentThreadScope on(t);
    mgr_->put_io_channel(o.ch);
    mgr_->close(o.desc);
  }

  std::unique_ptr<event::Framework> fw_;
  event::Thread* t0_ = nullptr;
  event::Thread* t1_ = nullptr;
  std::unique_ptr<Manager> mgr_;
  std::string path_;
};

TEST_F(UringBdevTest, SizesFromOptionsOrFile) {
  Bdev* b = create(2048, 4096);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->num_blocks(), 2048u);
  EXPECT_EQ(b->block_size(), 4096u);
  EXPECT_EQ(b->module(), "uring");
  EXPECT_TRUE(b->supports(IoType::kFlush));
  EXPECT_FALSE(b->supports(IoType::kNvmePassthru));
  remove();
  b = create();  // the file now holds 8 MiB
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->num_blocks(), 8u * 1024 * 1024 / 512);
  remove();
  UringOptions bad;
  bad.name = "U1";
  bad.filename = path_ + ".missing";
  EXPECT_FALSE(create_uring_bdev(*mgr_, bad).ok());
}

TEST_F(UringBdevTest, RoundTripsVectoredFlushUnmapAndTwoThreads) {
  ASSERT_NE(create(4096), nullptr);  // 2 MiB
  Open a = open(t0_);
  Open b = open(t1_);
  std::vector<uint8_t> out(256 * 1024), in(256 * 1024);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 31 + 7);
  Done w;
  io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, out.data(), 10, 512, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  Done r;  // read back on the other thread's ring
  io(t1_, r, [&] { return mgr_->read(b.desc, b.ch, in.data(), 10, 512, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(in, out);
  // Vectored both ways, pieces that are not block multiples.
  iovec wv[3] = {{out.data(), 1000}, {out.data() + 5000, 3096}, {out.data() + 20000, 4096}};
  Done w2;
  io(t1_, w2, [&] { return mgr_->writev(b.desc, b.ch, wv, 3, 2000, 16, Done::cb, &w2); });
  ASSERT_EQ(w2.ok, 1);
  std::fill(in.begin(), in.end(), 0);
  iovec rv[2] = {{in.data(), 4096}, {in.data() + 10000, 4096}};
  Done r2;
  io(t0_, r2, [&] { return mgr_->readv(a.desc, a.ch, rv, 2, 2000, 16, Done::cb, &r2); });
  ASSERT_EQ(r2.ok, 1);
  std::vector<uint8_t> want, got;
  for (auto& v : wv) want.insert(want.end(), (uint8_t*)v.iov_base, (uint8_t*)v.iov_base + v.iov_len);
  for (auto& v : rv) got.insert(got.end(), (uint8_t*)v.iov_base, (uint8_t*)v.iov_base + v.iov_len);
  EXPECT_EQ(want, got);
  // Many at once: more than the ring holds (the layer retries kNoMemory).
  Done many;
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < 100; ++i)
      ASSERT_EQ(mgr_->write(a.desc, a.ch, out.data() + i * 512, 3000 + i, 1, Done::cb, &many), 0);
  }
  run_until([&] { return many.n == 100; });
  EXPECT_EQ(many.ok, 100);
  Done f;
  io(t0_, f, [&] { return mgr_->flush(a.desc, a.ch, 0, 4096, Done::cb, &f); });
  EXPECT_EQ(f.ok, 1);
  // Unmap (punch hole) reads back zeros, if the file system supports it.
  Done u;
  io(t0_, u, [&] { return mgr_->unmap(a.desc, a.ch, 10, 256, Done::cb, &u); });
  if (u.ok == 1) {
    Done r3;
    io(t0_, r3, [&] { return mgr_->read(a.desc, a.ch, in.data(), 10, 512, Done::cb, &r3); });
    ASSERT_EQ(r3.ok, 1);
    for (std::size_t i = 0; i < 256 * 512; ++i) ASSERT_EQ(in[i], 0) << i;
    EXPECT_EQ(std::memcmp(in.data() + 256 * 512, out.data() + 256 * 512, 256 * 512), 0);
  } else {
    std::printf("punch hole unsupported in %s\n", path_.c_str());
  }
  // Out of range is refused by the layer; a reset completes.
  {
    CurrentThreadScope on(t0_);
    Done x;
    EXPECT_EQ(mgr_->read(a.desc, a.ch, in.data(), 4095, 2, Done::cb, &x), -EINVAL);
  }
  Done rs;
  io(t0_, rs, [&] { return mgr_->reset(a.desc, a.ch, Done::cb, &rs); });
  EXPECT_EQ(rs.ok, 1);
  close(t0_, a);
  close(t1_, b);
  remove();
}

TEST_F(UringBdevTest, DataPersistsAcrossReopen) {
  ASSERT_NE(create(1024), nullptr);
  std::vector<uint8_t> out(64 * 1024), in(64 * 1024);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 17 + 3);
  {
    Open a = open(t0_);
    Done w, f;
    io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, out.data(), 100, 128, Done::cb, &w); });
    ASSERT_EQ(w.ok, 1);
    io(t0_, f, [&] { return mgr_->flush(a.desc, a.ch, 0, 0, Done::cb, &f); });
    ASSERT_EQ(f.ok, 1);
    close(t0_, a);
    remove();
  }
  EXPECT_EQ(mgr_->find("U0"), nullptr);
  // The file holds the data (read directly), and a new bdev over it reads it back.
  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, in.data(), in.size(), 100 * 512), static_cast<ssize_t>(in.size()));
  ::close(fd);
  EXPECT_EQ(in, out);
  std::fill(in.begin(), in.end(), 0);
  ASSERT_NE(create(), nullptr);
  Open b = open(t1_);
  Done r;
  io(t1_, r, [&] { return mgr_->read(b.desc, b.ch, in.data(), 100, 128, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(in, out);
  close(t1_, b);
  remove();
}

}  // namespace
}  // namespace pollux::bdev
