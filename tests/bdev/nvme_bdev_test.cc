// bdev_nvme through the bdev layer against Pollux's emulator (nvme_bdev_fixture.h): attach,
// I/O of every type, MDTS splitting, retries, channels on two framework threads, hot-remove and
// hot-plug. Controller resets: nvme_bdev_reset_test.cc.
#include "tests/bdev/nvme_bdev_fixture.h"

namespace pollux::nvme_bdev_testing {
namespace {

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
    start();
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
  // Hot-plug: the drive is pulled (the client is disconnected; the socket keeps listening),
  // then put back as a fresh function with the same data. The device thread is stopped
  // around each (the device is single-threaded).
  void surprise_remove() {
    freeze();
    dev_->surprise_remove();
    present_.store(false);
    start();
  }
  void insert() {
    freeze();
    dev_->insert();
    present_.store(true);
    start();
  }
  bool present() const { return present_.load(); }
  // The device fetches every I/O command and never completes it (registers keep answering:
  // the admin poller's health check reads CSTS over the socket, which a frozen device would
  // leave unanswered).
  void hold_all_io() {
    freeze();
    emu::nvme::FaultRule rule;
    rule.action = emu::nvme::FaultAction::kNeverComplete;
    EXPECT_TRUE(dev_->controller().faults().add(rule).ok());
    start();
  }

 private:
  void start() {
    stop_.store(false);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const int rc = dev_->server().poll_once(dev_->server().client_connected() ? 0 : 5);
        if (rc < 0) break;
        if (dev_->server().client_connected()) dev_->poll();
      }
    });
  }
  std::unique_ptr<emu::device::NvmeDevice> dev_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> present_{true};
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
    bdev::NvmeAddress bad;
    bad.trtype = "nonsense";
    bad.traddr = path;
    EXPECT_FALSE(bdev::nvme_attach_controller_by_address(*mgr_, "Bad", bad).ok());
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
  // The device stops completing I/O; queue I/O on both threads (more than the SQ holds on
  // t0), then pull it.
  emu.hold_all_io();
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

// ------------------------------------------------------------------------- hot-plug ----

// The hot-plug poller attaches a device that appears (first connect fails: retried at the
// next period), leaves a pulled one alone, and attaches it again under the same name once
// it is back and the removed controller has been freed; the data survives.
TEST_F(NvmeBdevTest, HotplugPollerReattachesReinsertedDevice) {
  char dir[] = "/tmp/pollux_bdev_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/emu.sock";
  SocketEmulator emu(path);
  auto trid = nvme::parse_transport_id("trtype:vfio-user traddr:" + path);
  ASSERT_TRUE(trid.ok()) << trid.error().message;
  bool fail_next = true;
  int connects = 0;
  bdev::NvmeHotplugSlot slot;
  slot.name = "nvme0";
  slot.present = [&] { return emu.present(); };
  slot.connect = [&]() -> Result<std::unique_ptr<nvme::Controller>> {
    ++connects;
    if (fail_next) {
      fail_next = false;
      return make_error(EIO, "test: the first connect fails");
    }
    return nvme::connect(*trid);
  };
  bdev::NvmeBdevOptions base;
  base.admin_poll_period_us = 1000;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(bdev::nvme_hotplug_start(*mgr_, {slot}, 2000, base), 0);
    EXPECT_EQ(bdev::nvme_hotplug_start(*mgr_, {slot}, 2000, base), -EEXIST);
  }
  run_until([&] { return mgr_->find("nvme0n1") != nullptr; });
  EXPECT_EQ(bdev::nvme_hotplug_stats(*mgr_).attaches, 1u);
  EXPECT_EQ(bdev::nvme_hotplug_stats(*mgr_).connect_failures, 1u);
  EXPECT_EQ(connects, 2);
  EXPECT_EQ(bdev::nvme_controller_names(*mgr_), std::vector<std::string>{"nvme0"});
  Events ev;
  Open a = open(t0_, "nvme0n1", &ev);
  for (int j = 0; j < 4096; ++j) buf()[j] = static_cast<uint8_t>(j * 5 + 9);
  Done w;
  io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, buf(), 100, 8, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  // Pull it: the bdevs go; the poller does not attach while the slot is empty.
  emu.surprise_remove();
  run_until([&] { return ev.removes == 1; });
  close(t0_, a);
  run_until([&] { return bdev::nvme_controller_names(*mgr_).empty(); });
  EXPECT_EQ(mgr_->find("nvme0n1"), nullptr);
  const uint64_t polls = bdev::nvme_hotplug_stats(*mgr_).polls;
  run_until([&] { return bdev::nvme_hotplug_stats(*mgr_).polls >= polls + 3; });
  EXPECT_EQ(bdev::nvme_hotplug_stats(*mgr_).attaches, 1u);
  EXPECT_EQ(connects, 2);
  // Put it back: attached again under the same name.
  emu.insert();
  run_until([&] { return mgr_->find("nvme0n1") != nullptr; });
  EXPECT_EQ(bdev::nvme_hotplug_stats(*mgr_).attaches, 2u);
  EXPECT_EQ(bdev::nvme_controller_names(*mgr_), std::vector<std::string>{"nvme0"});
  Open a2 = open(t0_, "nvme0n1");
  std::memset(buf(1 << 20), 0, 4096);
  Done r;
  io(t0_, r, [&] { return mgr_->read(a2.desc, a2.ch, buf(1 << 20), 100, 8, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(), 4096), 0);
  close(t0_, a2);
  {
    CurrentThreadScope on(t0_);
    bdev::nvme_hotplug_stop(*mgr_);
    bdev::nvme_hotplug_stop(*mgr_);  // idempotent
  }
  EXPECT_EQ(bdev::nvme_hotplug_stats(*mgr_).attaches, 0u);  // stopped
  detach("nvme0");
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace pollux::nvme_bdev_testing
