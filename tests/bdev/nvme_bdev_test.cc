// bdev_nvme through the bdev layer against Pollux's emulator: attach, I/O of every type,
// MDTS splitting, retries, reset, channels on two framework threads, and hot-remove.
// The framework runs in step mode on the test's thread (real clock); the emulator has its
// own thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/event/framework.h"
#include "driver/nvme/controller.h"
#include "emulator/device/nvme_device.h"

namespace pollux {
namespace {

namespace sn = spec::nvme;
using bdev::BdevIo;
using bdev::IoStatus;
using event::CurrentThreadScope;

emu::nvme::ControllerConfig config() {
  emu::nvme::ControllerConfig c;
  c.max_queue_entries = 256;
  c.max_io_queue_pairs = 8;
  c.mdts = 5;  // 128 KiB
  c.namespaces = {{64ull << 20, 512, "memory"}, {32ull << 20, 4096, "memory"}};
  return c;
}

struct Done {
  int n = 0;
  int ok = 0;
  IoStatus status = IoStatus::kPending;
  uint16_t nvme = 0;
  static void cb(BdevIo& io, bool success, void* arg) {
    auto* d = static_cast<Done*>(arg);
    ++d->n;
    d->ok += success;
    d->status = io.status();
    d->nvme = io.nvme_status();
  }
};

struct Events {
  int removes = 0;
  static void fn(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
    if (e == bdev::DescEvent::kRemove) ++static_cast<Events*>(ctx)->removes;
  }
};

class NvmeBdevTest : public ::testing::Test {
 protected:
  void SetUp() override {
    event::FrameworkOptions fo;
    fo.core_mask = "0x3";
    fo.step_mode = true;
    fo.pin_reactors = false;
    auto fw = event::Framework::create(fo);
    ASSERT_TRUE(fw.ok()) << fw.error().message;
    fw_ = std::move(fw).value();
    t0_ = fw_->create_thread("t0", 0);
    t1_ = fw_->create_thread("t1", 1);
    auto mgr = bdev::Manager::create(*fw_);
    ASSERT_TRUE(mgr.ok()) << mgr.error().message;
    mgr_ = std::move(mgr).value();
    auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), 8 << 20);
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(mem).value();
  }
  void TearDown() override {
    if (fw_) {
      fw_->stop(0);
      run_until([&] { return fw_->finished(); });
    }
    mgr_.reset();
    fw_.reset();
    mem_.reset();
  }

  // In-process emulator, attached on t0.
  void attach_in_process(bdev::NvmeBdevOptions o = {}) {
    auto dev = emu::device::InProcessNvmeDevice::create(config());
    ASSERT_TRUE(dev.ok()) << dev.error();
    device_ = std::move(dev).value();
    auto pci = env::VfioUserDevice::attach(device_.get(), env::MemoryRegistry::global());
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    nvme::ControllerOptions co;
    co.io_queues_requested = 4;
    auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
    ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
    if (o.name.empty()) o.name = "Nvme0";
    o.admin_poll_period_us = 1000;
    CurrentThreadScope on(t0_);
    auto names = bdev::nvme_attach_controller(*mgr_, std::move(ctrl).value(), o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    names_ = *names;
  }
  void detach(const std::string& name = "Nvme0") {
    bool freed = false;
    {
      CurrentThreadScope on(t0_);
      ASSERT_EQ(bdev::nvme_detach_controller(
                    *mgr_, name, [](void* p) { *static_cast<bool*>(p) = true; }, &freed),
                0);
    }
    run_until([&] { return freed; });
    ASSERT_TRUE(freed);
    EXPECT_TRUE(bdev::nvme_controller_names(*mgr_).empty());
  }

  // Steps the framework until pred() (bounded in time: a lost completion fails, not hangs).
  void run_until(const std::function<bool()>& pred, double seconds = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "condition not reached in " << seconds << " s";
        return;
      }
      fw_->step();
    }
  }
  uint8_t* buf(std::size_t off = 0) { return static_cast<uint8_t*>(mem_->data()) + off; }
  template <typename Fn>
  uint64_t counter(Fn fn) {
    return device_->with_device([&](auto& d) { return fn(d.controller().counters()); });
  }

  struct Open {
    bdev::Desc* desc = nullptr;
    event::IoChannel* ch = nullptr;
  };
  Open open(event::Thread* t, const std::string& name, Events* ev = nullptr) {
    CurrentThreadScope on(t);
    Open o;
    auto d = mgr_->open(name, true, ev ? Events::fn : nullptr, ev);
    EXPECT_TRUE(d.ok()) << d.error().message;
    if (!d.ok()) return o;
    o.desc = *d;
    o.ch = mgr_->get_io_channel(o.desc);
    EXPECT_NE(o.ch, nullptr);
    return o;
  }
  void close(event::Thread* t, Open& o) {
    CurrentThreadScope on(t);
    if (o.ch) mgr_->put_io_channel(o.ch);
    if (o.desc) mgr_->close(o.desc);
    o = {};
  }
  // Runs fn on t, then steps until `d` has `want` completions.
  void io(event::Thread* t, Done& d, const std::function<int()>& fn, int want = 1) {
    {
      CurrentThreadScope on(t);
      ASSERT_EQ(fn(), 0);
    }
    run_until([&] { return d.n >= want; });
  }

  std::unique_ptr<event::Framework> fw_;
  event::Thread* t0_ = nullptr;
  event::Thread* t1_ = nullptr;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<env::DmaRegion> mem_;
  std::unique_ptr<emu::device::InProcessNvmeDevice> device_;
  std::vector<std::string> names_;
};

TEST_F(NvmeBdevTest, AttachCreatesOneBdevPerNamespace) {
  attach_in_process();
  ASSERT_EQ(names_, (std::vector<std::string>{"Nvme0n1", "Nvme0n2"}));
  bdev::Bdev* b1 = mgr_->find("Nvme0n1");
  bdev::Bdev* b2 = mgr_->find("Nvme0n2");
  ASSERT_NE(b1, nullptr);
  ASSERT_NE(b2, nullptr);
  EXPECT_EQ(b1->block_size(), 512u);
  EXPECT_EQ(b1->num_blocks(), (64ull << 20) / 512);
  EXPECT_EQ(b2->block_size(), 4096u);
  EXPECT_EQ(b2->num_blocks(), (32ull << 20) / 4096);
  EXPECT_EQ(b1->props().max_transfer_blocks, 128u * 1024 / 512);  // from MDTS
  EXPECT_EQ(b2->props().max_transfer_blocks, 128u * 1024 / 4096);
  EXPECT_EQ(b1->module(), "nvme");
  EXPECT_TRUE(b1->supports(bdev::IoType::kUnmap));
  EXPECT_TRUE(b1->supports(bdev::IoType::kWriteZeroes));
  EXPECT_TRUE(b1->supports(bdev::IoType::kCompare));
  EXPECT_TRUE(b1->supports(bdev::IoType::kNvmePassthru));
  EXPECT_FALSE(b1->supports(bdev::IoType::kCompareAndWrite));  // emulator: FUSES = 0
  EXPECT_EQ(bdev::nvme_controller_names(*mgr_), std::vector<std::string>{"Nvme0"});
  {  // a second controller of the same name is refused
    CurrentThreadScope on(t0_);
    bdev::NvmeBdevOptions o;
    o.name = "Nvme0";
    EXPECT_FALSE(bdev::nvme_attach_controller(*mgr_, nvme::TransportId{}, o).ok());
  }
  detach();
  EXPECT_EQ(mgr_->find("Nvme0n1"), nullptr);
}

TEST_F(NvmeBdevTest, ReadWriteRoundTripsIncludingVectoredAndBeyondMdts) {
  attach_in_process();
  for (const char* name : {"Nvme0n1", "Nvme0n2"}) {
    Open o = open(t0_, name);
    const uint32_t bs = o.desc->bdev().block_size();
    // One block, then 1 MiB (8 × MDTS: the bdev layer splits it).
    for (uint64_t bytes : {uint64_t{bs}, uint64_t{1} << 20}) {
      const uint64_t nb = bytes / bs;
      for (uint64_t i = 0; i < bytes; ++i) buf()[i] = static_cast<uint8_t>(i * 7 + nb + bs);
      const uint64_t writes_before = counter([](auto& c) { return c.io_writes; });
      Done w;
      io(t0_, w, [&] { return mgr_->write(o.desc, o.ch, buf(), 100, nb, Done::cb, &w); });
      ASSERT_EQ(w.ok, 1) << bdev::to_string(w.status);
      EXPECT_EQ(counter([](auto& c) { return c.io_writes; }) - writes_before,
                std::max<uint64_t>(1, bytes / (128 * 1024)));
      std::memset(buf(4 << 20), 0, bytes);
      Done r;
      io(t0_, r, [&] { return mgr_->read(o.desc, o.ch, buf(4 << 20), 100, nb, Done::cb, &r); });
      ASSERT_EQ(r.ok, 1);
      ASSERT_EQ(std::memcmp(buf(), buf(4 << 20), bytes), 0) << name << " " << bytes;
    }
    close(t0_, o);
  }
  // Vectored, pieces that are not block multiples (SGL), and a vectored I/O crossing MDTS.
  Open o = open(t0_, "Nvme0n1");
  iovec wr[3] = {{buf(100 * 1024), 1000}, {buf(200 * 1024 + 4), 5144}, {buf(300 * 1024), 2048}};
  for (auto& v : wr)
    for (std::size_t i = 0; i < v.iov_len; ++i)
      static_cast<uint8_t*>(v.iov_base)[i] = static_cast<uint8_t>(i ^ v.iov_len);
  Done w;
  io(t0_, w, [&] { return mgr_->writev(o.desc, o.ch, wr, 3, 7, 16, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  iovec rd[2] = {{buf(1 << 20), 4000}, {buf(2 << 20), 4192}};
  Done r;
  io(t0_, r, [&] { return mgr_->readv(o.desc, o.ch, rd, 2, 7, 16, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  std::vector<uint8_t> want, got;
  for (auto& v : wr) want.insert(want.end(), (uint8_t*)v.iov_base, (uint8_t*)v.iov_base + v.iov_len);
  for (auto& v : rd) got.insert(got.end(), (uint8_t*)v.iov_base, (uint8_t*)v.iov_base + v.iov_len);
  EXPECT_EQ(want, got);
  // 384 KiB in two iovecs: three children, the middle one spanning both.
  for (int i = 0; i < 384 * 1024; ++i) buf(1 << 20)[i] = static_cast<uint8_t>(i * 13 + 1);
  iovec big[2] = {{buf(1 << 20), 192 * 1024}, {buf((1 << 20) + 192 * 1024), 192 * 1024}};
  Done w2;
  io(t0_, w2, [&] { return mgr_->writev(o.desc, o.ch, big, 2, 5000, 768, Done::cb, &w2); });
  ASSERT_EQ(w2.ok, 1);
  Done r2;
  io(t0_, r2, [&] { return mgr_->read(o.desc, o.ch, buf(4 << 20), 5000, 768, Done::cb, &r2); });
  ASSERT_EQ(r2.ok, 1);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(4 << 20), 384 * 1024), 0);
  close(t0_, o);
  detach();
}

TEST_F(NvmeBdevTest, WriteZeroesUnmapFlushCompare) {
  attach_in_process();
  Open o = open(t0_, "Nvme0n1");
  const uint64_t nb = 256;  // 128 KiB
  std::memset(buf(), 0xab, nb * 512);
  for (uint64_t lba : {0ull, 256ull, 100'000ull}) {
    Done w;
    io(t0_, w, [&] { return mgr_->write(o.desc, o.ch, buf(), lba, nb, Done::cb, &w); });
    ASSERT_EQ(w.ok, 1);
  }
  // Compare: equal, then different.
  Done c;
  io(t0_, c, [&] { return mgr_->compare(o.desc, o.ch, buf(), 0, nb, Done::cb, &c); });
  EXPECT_EQ(c.ok, 1) << bdev::to_string(c.status);
  buf()[5 * 512 + 3] ^= 1;
  Done c2;
  io(t0_, c2, [&] { return mgr_->compare(o.desc, o.ch, buf(), 0, nb, Done::cb, &c2); });
  EXPECT_EQ(c2.status, IoStatus::kMiscompare);
  // Write zeroes over 100 000 blocks (two commands of at most 65536).
  const uint64_t wz_before = counter([](auto& k) { return k.io_write_zeroes; });
  Done z;
  io(t0_, z, [&] { return mgr_->write_zeroes(o.desc, o.ch, 0, 100'000, Done::cb, &z); });
  ASSERT_EQ(z.ok, 1) << bdev::to_string(z.status);
  EXPECT_EQ(counter([](auto& k) { return k.io_write_zeroes; }) - wz_before, 2u);
  Done r;
  std::memset(buf(1 << 20), 0xee, nb * 512);
  io(t0_, r, [&] { return mgr_->read(o.desc, o.ch, buf(1 << 20), 256, nb, Done::cb, &r); });
  for (uint64_t i = 0; i < nb * 512; ++i) ASSERT_EQ(buf(1 << 20)[i], 0) << i;
  // Unmap reads back zeros.
  Done u;
  io(t0_, u, [&] { return mgr_->unmap(o.desc, o.ch, 100'000, nb, Done::cb, &u); });
  ASSERT_EQ(u.ok, 1) << bdev::to_string(u.status);
  Done r2;
  std::memset(buf(1 << 20), 0xee, nb * 512);
  io(t0_, r2, [&] { return mgr_->read(o.desc, o.ch, buf(1 << 20), 100'000, nb, Done::cb, &r2); });
  for (uint64_t i = 0; i < nb * 512; ++i) ASSERT_EQ(buf(1 << 20)[i], 0) << i;
  // Many unmaps at once (per-channel DSM slots), then flush.
  Done many;
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < 64; ++i)
      ASSERT_EQ(mgr_->unmap(o.desc, o.ch, 1000 + i * 8, 8, Done::cb, &many), 0);
  }
  run_until([&] { return many.n == 64; });
  EXPECT_EQ(many.ok, 64);
  Done f;
  io(t0_, f, [&] { return mgr_->flush(o.desc, o.ch, 0, 0, Done::cb, &f); });
  EXPECT_EQ(f.ok, 1);
  {
    CurrentThreadScope on(t0_);
    Done cw;
    EXPECT_EQ(mgr_->compare_and_write(o.desc, o.ch, buf(), buf(), 0, 1, Done::cb, &cw), -ENOTSUP);
  }
  close(t0_, o);
  detach();
}

TEST_F(NvmeBdevTest, PassthruAndRetriesOfRetriableStatus) {
  bdev::NvmeBdevOptions opt;
  opt.retry_count = 2;
  attach_in_process(opt);
  Open o = open(t0_, "Nvme0n2");
  for (int i = 0; i < 8192; ++i) buf()[i] = static_cast<uint8_t>(i * 3);
  Done w;
  io(t0_, w, [&] { return mgr_->write(o.desc, o.ch, buf(), 9, 2, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  // A raw Read of the same two blocks; the bdev's NSID is filled in.
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::nvm::kRead;
  cmd.nsid = 77;
  cmd.cdw10 = 9;
  cmd.cdw12 = 1;
  std::memset(buf(1 << 20), 0, 8192);
  Done p;
  io(t0_, p, [&] { return mgr_->nvme_passthru(o.desc, o.ch, &cmd, buf(1 << 20), 8192, Done::cb, &p); });
  ASSERT_EQ(p.ok, 1) << bdev::to_string(p.status) << " " << p.nvme;
  EXPECT_EQ(std::memcmp(buf(), buf(1 << 20), 8192), 0);
  // An opcode the device does not implement: Invalid Opcode with DNR — never retried.
  const uint64_t other_before = counter([](auto& k) { return k.io_other; });
  sn::SubmissionEntry bad{};
  bad.opcode = 0x7e;
  Done b;
  io(t0_, b, [&] { return mgr_->nvme_passthru(o.desc, o.ch, &bad, nullptr, 0, Done::cb, &b); });
  EXPECT_EQ(b.status, IoStatus::kNvmeError);
  EXPECT_EQ(sn::status::sc(b.nvme), sn::sc::kInvalidOpcode);
  EXPECT_TRUE(sn::status::dnr(b.nvme));
  EXPECT_EQ(counter([](auto& k) { return k.io_other; }) - other_before, 1u);
  // A Read into memory nobody mapped: Data Transfer Error, no DNR — retried twice (three
  // attempts), then reported with its NVMe status.
  const uint64_t reads_before = counter([](auto& k) { return k.io_reads; });
  sn::SubmissionEntry fault{};
  fault.opcode = sn::nvm::kRead;
  fault.dptr.prp.prp1 = 0x7f0000000000ull;
  Done f;
  io(t0_, f, [&] { return mgr_->nvme_passthru(o.desc, o.ch, &fault, nullptr, 0, Done::cb, &f); });
  EXPECT_EQ(f.status, IoStatus::kNvmeError);
  EXPECT_EQ(sn::status::sc(f.nvme), sn::sc::kDataTransferError);
  EXPECT_EQ(counter([](auto& k) { return k.io_reads; }) - reads_before, 3u);
  auto st = bdev::nvme_controller_stats(*mgr_, "Nvme0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->retries, 2u);
  EXPECT_EQ(st->channels, 1u);
  close(t0_, o);
  detach();
}

TEST(NvmeRetryPolicy, DnrIsNeverRetriedAndAttemptsAreBounded) {
  const uint16_t transient = sn::status::make(sn::sct::kGeneric, sn::sc::kTransientTransportError);
  const uint16_t not_ready = sn::status::make(sn::sct::kGeneric, sn::sc::kNamespaceNotReady);
  const uint16_t dnr = sn::status::make(sn::sct::kGeneric, sn::sc::kNamespaceNotReady, true);
  const uint16_t miscompare = sn::status::make(sn::sct::kMediaError, sn::sc_media::kCompareFailure);
  EXPECT_TRUE(bdev::nvme_should_retry(transient, 0, 3));
  EXPECT_TRUE(bdev::nvme_should_retry(not_ready, 2, 3));
  EXPECT_FALSE(bdev::nvme_should_retry(not_ready, 3, 3));
  EXPECT_FALSE(bdev::nvme_should_retry(dnr, 0, 3));
  EXPECT_FALSE(bdev::nvme_should_retry(miscompare, 0, 3));
  EXPECT_FALSE(bdev::nvme_should_retry(0, 0, 3));
  EXPECT_FALSE(bdev::nvme_should_retry(transient, 0, 0));
}

TEST_F(NvmeBdevTest, ChannelsOnTwoThreadsAndReset) {
  attach_in_process();
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  Open b2 = open(t1_, "Nvme0n2");
  auto st = bdev::nvme_controller_stats(*mgr_, "Nvme0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->channels, 2u);  // one queue pair per thread, shared by both namespaces
  // Each thread writes its own range; the other reads it back.
  for (int i = 0; i < 64 * 1024; ++i) buf()[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64 * 1024; ++i) buf(64 * 1024)[i] = static_cast<uint8_t>(255 - i);
  Done w;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(), 0, 128, Done::cb, &w), 0);
  }
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->write(b.desc, b.ch, buf(64 * 1024), 128, 128, Done::cb, &w), 0);
  }
  run_until([&] { return w.n == 2; });
  ASSERT_EQ(w.ok, 2);
  Done r;
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(1 << 20), 0, 128, Done::cb, &r), 0);
  }
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(2 << 20), 128, 128, Done::cb, &r), 0);
  }
  run_until([&] { return r.n == 2; });
  ASSERT_EQ(r.ok, 2);
  EXPECT_EQ(std::memcmp(buf(), buf(1 << 20), 64 * 1024), 0);
  EXPECT_EQ(std::memcmp(buf(64 * 1024), buf(2 << 20), 64 * 1024), 0);
  // Reset with I/O outstanding on both threads (one on the other namespace): it completes
  // once every queue pair has drained, after the reads.
  Done busy, reset;
  std::vector<int> order;
  {
    CurrentThreadScope on(t1_);
    for (int i = 0; i < 32; ++i)
      ASSERT_EQ(mgr_->read(b2.desc, b2.ch, buf((3 << 20) + i * 4096), i, 1, Done::cb, &busy), 0);
  }
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < 32; ++i)
      ASSERT_EQ(mgr_->read(a.desc, a.ch, buf((4 << 20) + i * 512), i, 1, Done::cb, &busy), 0);
    ASSERT_EQ(mgr_->reset(a.desc, a.ch,
                          [](BdevIo& io, bool ok, void* arg) {
                            auto* d = static_cast<Done*>(arg);
                            Done::cb(io, ok, arg);
                            d->nvme = 0;
                          },
                          &reset),
              0);
  }
  // A controller reset: what the device held is ended retriable and retried after it, so
  // every I/O still completes once, successfully.
  run_until([&] { return reset.n == 1 && busy.n == 64; });
  EXPECT_EQ(reset.ok, 1);
  EXPECT_EQ(busy.n, 64);
  EXPECT_EQ(busy.ok, 64);
  // I/O after the reset still works.
  Done after;
  io(t0_, after, [&] { return mgr_->read(a.desc, a.ch, buf(1 << 20), 0, 8, Done::cb, &after); });
  EXPECT_EQ(after.ok, 1);
  close(t0_, a);
  close(t1_, b);
  close(t1_, b2);
  detach();
}

// ------------------------------------------------------------------------ hot-remove ----

// The emulator served over a UNIX socket by a thread of this process; destroying it closes
// the socket, which the driver's removal probe sees as a hang-up.
class SocketEmulator {
 public:
  explicit SocketEmulator(const std::string& path) {
    auto dev = emu::device::NvmeDevice::create(config());
    EXPECT_TRUE(dev.ok()) << dev.error();
    dev_ = std::move(dev).value();
    EXPECT_EQ(dev_->server().listen(path), 0);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const int rc = dev_->server().poll_once(dev_->server().client_connected() ? 0 : 5);
        if (rc < 0) break;
        if (dev_->server().client_connected()) dev_->poll();
      }
    });
  }
  ~SocketEmulator() { remove(); }
  // Stops the device (commands stay in the queues, unanswered), keeping the socket open.
  void freeze() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Surprise removal: the device and its socket go away.
  void remove() {
    freeze();
    dev_.reset();
  }

 private:
  std::unique_ptr<emu::device::NvmeDevice> dev_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(NvmeBdevTest, HotRemoveFailsOutstandingIoAndRemovesBdevs) {
  // TEST_TMPDIR is too long for a UNIX socket path.
  char dir[] = "/tmp/pollux_bdev_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/emu.sock";
  SocketEmulator emu(path);
  {
    CurrentThreadScope on(t0_);
    bdev::NvmeBdevOptions o;
    o.name = "Hot";
    o.admin_poll_period_us = 1000;
    // The config method's entry point refuses a bad transport type.
    EXPECT_FALSE(bdev::nvme_attach_controller_by_address(*mgr_, "Bad", "nonsense", path).ok());
    auto trid = nvme::parse_transport_id("trtype:vfio-user traddr:" + path);
    ASSERT_TRUE(trid.ok()) << trid.error().message;
    auto names = bdev::nvme_attach_controller(*mgr_, *trid, o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    ASSERT_EQ(*names, (std::vector<std::string>{"Hotn1", "Hotn2"}));
  }
  Events ev1, ev2;
  Open a = open(t0_, "Hotn1", &ev1);
  Open b = open(t1_, "Hotn2", &ev2);
  // Works before the removal.
  std::memset(buf(), 0x5a, 4096);
  Done w;
  io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, buf(), 0, 8, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  // Freeze the device, queue I/O on both threads (more than the SQ holds on t0), then pull it.
  emu.freeze();
  Done pending;
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < 300; ++i)
      ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(1 << 20), i, 1, Done::cb, &pending), 0);
  }
  {
    CurrentThreadScope on(t1_);
    for (int i = 0; i < 20; ++i)
      ASSERT_EQ(mgr_->write(b.desc, b.ch, buf(), i, 1, Done::cb, &pending), 0);
  }
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(pending.n, 0);
  emu.remove();
  run_until([&] { return pending.n == 320 && ev1.removes == 1 && ev2.removes == 1; });
  EXPECT_EQ(pending.n, 320);
  EXPECT_EQ(pending.ok, 0);
  EXPECT_EQ(pending.status, IoStatus::kRemoved);
  EXPECT_EQ(ev1.removes, 1);
  EXPECT_EQ(ev2.removes, 1);
  // New I/O on the still-open channel fails the same way.
  Done late;
  io(t0_, late, [&] { return mgr_->read(a.desc, a.ch, buf(), 0, 1, Done::cb, &late); });
  EXPECT_EQ(late.status, IoStatus::kRemoved);
  auto st = bdev::nvme_controller_stats(*mgr_, "Hot");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->removed_failures, 321u);
  // The users let go; the controller is freed.
  bool freed = false;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(bdev::nvme_detach_controller(*mgr_, "Hot",
                                           [](void* p) { *static_cast<bool*>(p) = true; }, &freed),
              0);  // already going: just waits
  }
  close(t0_, a);
  close(t1_, b);
  run_until([&] { return freed; });
  EXPECT_TRUE(bdev::nvme_controller_names(*mgr_).empty());
  EXPECT_EQ(mgr_->find("Hotn1"), nullptr);
  EXPECT_EQ(mgr_->find("Hotn2"), nullptr);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace pollux
