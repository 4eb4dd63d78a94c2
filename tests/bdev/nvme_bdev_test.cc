// bdev_nvme through the bdev layer against Pollux's emulator: attach, I/O of every type,
// MDTS splitting, retries, reset, channels on two framework threads, hot-remove, controller
// resets (bdev reset under load, fatal status, timeout) and hot-plug.
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
#include "driver/nvme/connect.h"
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

// One I/O's completions (each I/O must complete exactly once).
struct Each {
  int n = 0;
  IoStatus status = IoStatus::kPending;
  static void cb(BdevIo& io, bool, void* arg) {
    auto* e = static_cast<Each*>(arg);
    ++e->n;
    e->status = io.status();
  }
};
int completed(const std::vector<Each>& v) {
  int n = 0;
  for (const Each& e : v) n += e.n;
  return n;
}
// Every I/O completed once, successfully.
void expect_all_once_ok(const std::vector<Each>& v, const char* what) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].n, 1) << what << " #" << i;
    EXPECT_EQ(v[i].status, IoStatus::kSuccess) << what << " #" << i << " "
                                               << bdev::to_string(v[i].status);
  }
}

struct Events {
  int removes = 0;
  static void fn(bdev::DescEvent e, bdev::Bdev&, void* ctx) {
    if (e == bdev::DescEvent::kRemove) ++static_cast<Events*>(ctx)->removes;
  }
};

// A device rule: fetch the next `count` commands with `opcode` and never complete them.
emu::nvme::FaultRule held(uint8_t opcode, uint64_t count) {
  emu::nvme::FaultRule r;
  r.action = emu::nvme::FaultAction::kNeverComplete;
  r.opcode = opcode;
  r.count = count;
  return r;
}

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
  void attach_in_process(bdev::NvmeBdevOptions o = {},
                         nvme::TimeoutAction timeout_action = nvme::TimeoutAction::kAbort,
                         const std::function<void(nvme::ControllerOptions&)>& tweak = nullptr) {
    auto dev = emu::device::InProcessNvmeDevice::create(config());
    ASSERT_TRUE(dev.ok()) << dev.error();
    device_ = std::move(dev).value();
    auto pci = env::VfioUserDevice::attach(device_.get(), env::MemoryRegistry::global());
    ASSERT_TRUE(pci.ok()) << pci.error().message;
    nvme::ControllerOptions co;
    co.io_queues_requested = 4;
    co.timeout_action = timeout_action;
    if (tweak) tweak(co);
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
  // A device-side fault rule (emulator fault injector).
  void add_fault(const emu::nvme::FaultRule& rule) {
    ASSERT_TRUE(
        device_->with_device([&](auto& d) { return d.controller().faults().add(rule).ok(); }));
  }
  void hold_commands(uint8_t opcode, uint64_t count) { add_fault(held(opcode, count)); }

  uint64_t fault_hits() {
    return device_->with_device([](auto& d) { return d.controller().fault_hits(); });
  }
  uint64_t module_resets(const std::string& name = "Nvme0") {
    auto st = bdev::nvme_controller_stats(*mgr_, name);
    EXPECT_TRUE(st.ok());
    return st.ok() ? st->resets : ~0ull;
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

// ---------------------------------------------------------------- controller resets ----

// A bdev reset is a controller reset: writes in flight on two threads (four of them held by
// the device, which only a controller reset ends) and writes issued on another bdev of the
// controller while the reset runs all complete once, successfully, and read back.
TEST_F(NvmeBdevTest, BdevResetResetsControllerUnderLoadOnTwoThreads) {
  attach_in_process();
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  Open b2 = open(t1_, "Nvme0n2");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  hold_commands(sn::nvm::kWrite, 4);
  constexpr int kPer = 32;  // writes per thread, 8 blocks (4 KiB) each
  for (int i = 0; i < 2 * kPer; ++i)
    for (int j = 0; j < 4096; ++j) buf(i * 4096)[j] = static_cast<uint8_t>(i * 31 + j * 7 + 1);
  std::vector<Each> wa(kPer), wb(kPer);
  {
    CurrentThreadScope on(t0_);
    for (int i = 0; i < kPer; ++i)
      ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(i * 4096), i * 8, 8, Each::cb, &wa[i]), 0);
  }
  {
    CurrentThreadScope on(t1_);
    for (int i = 0; i < kPer; ++i)
      ASSERT_EQ(mgr_->write(b.desc, b.ch, buf((kPer + i) * 4096), 1024 + i * 8, 8, Each::cb,
                            &wb[i]),
                0);
  }
  // Everything but the four held writes completes; those stay (no timeout is set).
  run_until([&] { return completed(wa) + completed(wb) == 2 * kPer - 4 && fault_hits() == 4; });
  for (int i = 0; i < 50; ++i) fw_->step();
  ASSERT_EQ(completed(wa) + completed(wb), 2 * kPer - 4);
  // The reset, from t0; meanwhile t1 keeps writing to the other namespace (not frozen by
  // the bdev layer: while the module's channel is paused they are parked, not lost).
  constexpr int kDuring = 64;
  for (int i = 0; i < kDuring; ++i)
    for (int j = 0; j < 4096; ++j) buf((1 << 20) + i * 4096)[j] = static_cast<uint8_t>(i ^ j);
  std::vector<Each> during(kDuring);
  Done reset;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->reset(a.desc, a.ch, Done::cb, &reset), 0);
  }
  int issued = 0;
  run_until([&] {
    if (reset.n == 0 && issued < kDuring) {
      CurrentThreadScope on(t1_);
      EXPECT_EQ(mgr_->write(b2.desc, b2.ch, buf((1 << 20) + issued * 4096), issued, 1, Each::cb,
                            &during[issued]),
                0);
      ++issued;
    }
    return reset.n == 1;
  });
  ASSERT_GT(issued, 0);
  during.resize(issued);
  run_until([&] {
    return completed(wa) + completed(wb) == 2 * kPer && completed(during) == issued;
  });
  for (int i = 0; i < 100; ++i) fw_->step();  // nothing completes a second time
  EXPECT_EQ(reset.n, 1);
  EXPECT_EQ(reset.ok, 1) << bdev::to_string(reset.status);
  expect_all_once_ok(wa, "t0 write");
  expect_all_once_ok(wb, "t1 write");
  expect_all_once_ok(during, "write during reset");
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(bdev::nvme_controller_stats(*mgr_, "Nvme0")->reset_failures, 0u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);  // CC.EN 1 -> 0 once
  // The data is there.
  Done r;
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(4 << 20), 0, kPer * 8, Done::cb, &r), 0);
    ASSERT_EQ(mgr_->read(b2.desc, b2.ch, buf(6 << 20), 0, issued, Done::cb, &r), 0);
  }
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(5 << 20), 1024, kPer * 8, Done::cb, &r), 0);
  }
  run_until([&] { return r.n == 3; });
  ASSERT_EQ(r.ok, 3);
  EXPECT_EQ(std::memcmp(buf(4 << 20), buf(0), kPer * 4096), 0);
  EXPECT_EQ(std::memcmp(buf(5 << 20), buf(kPer * 4096), kPer * 4096), 0);
  EXPECT_EQ(std::memcmp(buf(6 << 20), buf(1 << 20), issued * 4096), 0);
  close(t0_, a);
  close(t1_, b);
  close(t1_, b2);
  detach();
}

// nvme_reset_controller: done(ctx, rc) on the calling thread; resets requested while one runs
// join it (one controller reset for all of them); unknown names are -ENODEV.
TEST_F(NvmeBdevTest, ResetControllerApiJoinsAndReportsOnCallingThread) {
  // The queue-pair observer sees each channel's queue pair created and freed, on its thread.
  struct Seen {
    std::vector<std::pair<const nvme::Qpair*, event::Thread*>> created, freed;
  } seen;
  bdev::NvmeBdevOptions opt;
  opt.qpair_observer = [&seen](const nvme::Qpair* qp, bool created, const std::string&) {
    (created ? seen.created : seen.freed).push_back({qp, event::Thread::current()});
  };
  attach_in_process(opt);
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n2");  // channels (queue pairs) on both threads
  struct Waiter {
    event::Thread* want;
    int n = 0;
    int rc = 1;
    bool right_thread = false;
    static void fn(void* ctx, int rc) {
      auto* w = static_cast<Waiter*>(ctx);
      ++w->n;
      w->rc = rc;
      w->right_thread = event::Thread::current() == w->want;
    }
  };
  Waiter w0{t0_}, w0b{t0_}, w1{t1_};
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(bdev::nvme_reset_controller(*mgr_, "Nope", Waiter::fn, &w0), -ENODEV);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w0), 0);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w0b), 0);
  }
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", Waiter::fn, &w1), 0);
    ASSERT_EQ(bdev::nvme_reset_controller(*mgr_, "Nvme0", nullptr, nullptr), 0);
  }
  run_until([&] { return w0.n == 1 && w0b.n == 1 && w1.n == 1; });
  for (Waiter* w : {&w0, &w0b, &w1}) {
    EXPECT_EQ(w->n, 1);
    EXPECT_EQ(w->rc, 0);
    EXPECT_TRUE(w->right_thread);
  }
  EXPECT_EQ(module_resets(), 1u);
  // I/O works on both threads afterwards.
  Done d;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->read(a.desc, a.ch, buf(), 0, 8, Done::cb, &d), 0);
  }
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(1 << 20), 0, 1, Done::cb, &d), 0);
  }
  run_until([&] { return d.n == 2; });
  EXPECT_EQ(d.ok, 2);
  close(t0_, a);
  close(t1_, b);
  detach();
  ASSERT_EQ(seen.created.size(), 2u);
  EXPECT_EQ(seen.created[0].second, t0_);
  EXPECT_EQ(seen.created[1].second, t1_);
  ASSERT_EQ(seen.freed.size(), 2u);
  for (const auto& f : seen.freed)
    EXPECT_TRUE(f == seen.created[0] || f == seen.created[1]);
}

// CSTS.CFS with I/O outstanding (two writes held by the device, more waiting in the SQs that
// the fatal controller no longer fetches): the admin poller's health check resets the
// controller and every I/O is retried to success.
TEST_F(NvmeBdevTest, FatalStatusIsResetByTheAdminPoller) {
  attach_in_process();
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  hold_commands(sn::nvm::kWrite, 2);
  for (int i = 0; i < 48; ++i)
    for (int j = 0; j < 4096; ++j) buf(i * 4096)[j] = static_cast<uint8_t>(i * 17 + j * 3 + 5);
  std::vector<Each> w(48);
  auto issue = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const bool first = i % 2 == 0;
      CurrentThreadScope on(first ? t0_ : t1_);
      Open& o = first ? a : b;
      ASSERT_EQ(mgr_->write(o.desc, o.ch, buf(i * 4096), i * 8, 8, Each::cb, &w[i]), 0);
    }
  };
  issue(0, 32);
  run_until([&] { return completed(w) == 30 && fault_hits() == 2; });
  device_->with_device([](auto& d) { d.controller().inject_fatal_status(); });
  issue(32, 48);
  run_until([&] { return completed(w) == 48; });
  for (int i = 0; i < 100; ++i) fw_->step();
  expect_all_once_ok(w, "write");
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);
  Done r;
  {
    CurrentThreadScope on(t1_);
    ASSERT_EQ(mgr_->read(b.desc, b.ch, buf(4 << 20), 0, 48 * 8, Done::cb, &r), 0);
  }
  run_until([&] { return r.n == 1; });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(buf(4 << 20), buf(0), 48 * 4096), 0);
  close(t0_, a);
  close(t1_, b);
  detach();
}

// An I/O timeout with action kReset on a channel that is not on the admin thread: the
// driver's reset request goes through the module's hook (pause, reset, resume), and the
// read the device never answered is retried to success.
TEST_F(NvmeBdevTest, TimeoutActionResetRecoversHeldIo) {
  bdev::NvmeBdevOptions o;
  o.qpair.timeout_us = 100'000;
  attach_in_process(o, nvme::TimeoutAction::kReset);
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  const uint64_t emu_resets = counter([](auto& c) { return c.resets; });
  for (int j = 0; j < 4096; ++j) buf()[j] = static_cast<uint8_t>(j * 11 + 3);
  Done w;
  io(t0_, w, [&] { return mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &w); });
  ASSERT_EQ(w.ok, 1);
  hold_commands(sn::nvm::kRead, 1);
  std::memset(buf(1 << 20), 0, 4096);
  Done r;
  io(t1_, r, [&] { return mgr_->read(b.desc, b.ch, buf(1 << 20), 40, 8, Done::cb, &r); });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.ok, 1) << bdev::to_string(r.status);
  EXPECT_EQ(fault_hits(), 1u);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(), 4096), 0);
  EXPECT_EQ(module_resets(), 1u);
  EXPECT_EQ(counter([](auto& c) { return c.resets; }) - emu_resets, 1u);
  close(t0_, a);
  close(t1_, b);
  detach();
}

// A write the device holds is given up by its submitter (Manager::abort: a fabric target
// whose host connection went). The submitter writes newer data to the same blocks; the
// controller reset that ends the held write must not issue it again (it would land over the
// newer data): it completes aborted, and the newer data stays.
TEST_F(NvmeBdevTest, AnAbortedWriteIsNotRetriedAfterTheResetThatEndsIt) {
  bdev::NvmeBdevOptions o;
  o.retry_count = 4;
  attach_in_process(o);
  Open a = open(t0_, "Nvme0n1");
  for (int j = 0; j < 4096; ++j) {
    buf()[j] = static_cast<uint8_t>(j * 3 + 1);      // the stale write
    buf(8192)[j] = static_cast<uint8_t>(j * 5 + 2);  // the newer one
  }
  hold_commands(sn::nvm::kWrite, 1);
  Done stale;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &stale), 0);
  }
  run_until([&] { return fault_hits() == 1; });
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(mgr_->abort(a.desc, a.ch, &stale), 1);
  }
  Done newer;
  io(t0_, newer, [&] { return mgr_->write(a.desc, a.ch, buf(8192), 40, 8, Done::cb, &newer); });
  ASSERT_EQ(newer.ok, 1);
  EXPECT_EQ(stale.n, 0);  // the device still holds it
  Done reset;
  io(t0_, reset, [&] { return mgr_->reset(a.desc, a.ch, Done::cb, &reset); });
  run_until([&] { return stale.n == 1; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(stale.n, 1);
  EXPECT_EQ(stale.status, bdev::IoStatus::kAborted);
  Done r;
  io(t0_, r, [&] { return mgr_->read(a.desc, a.ch, buf(1 << 20), 40, 8, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_EQ(std::memcmp(buf(1 << 20), buf(8192), 4096), 0);
  close(t0_, a);
  detach();
}

// The same hazard one step earlier: an aborted write still waiting in the queue pair for an
// SQ slot (the queue is full) ends there and never reaches the device.
TEST_F(NvmeBdevTest, AnAbortedWriteWaitingForAnSqSlotNeverReachesTheDevice) {
  bdev::NvmeBdevOptions o;
  o.qpair.queue_size = 2;  // one slot
  attach_in_process(o);
  Open a = open(t0_, "Nvme0n1");
  for (int j = 0; j < 4096; ++j) {
    buf()[j] = static_cast<uint8_t>(j * 3 + 1);      // held by the device
    buf(8192)[j] = static_cast<uint8_t>(j * 5 + 2);  // waits, then is given up
  }
  hold_commands(sn::nvm::kWrite, 1);
  Done held, given_up;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(), 40, 8, Done::cb, &held), 0);
    ASSERT_EQ(mgr_->write(a.desc, a.ch, buf(8192), 80, 8, Done::cb, &given_up), 0);
  }
  run_until([&] { return fault_hits() == 1; });
  {
    CurrentThreadScope on(t0_);
    EXPECT_EQ(mgr_->abort(a.desc, a.ch, &given_up), 1);
  }
  run_until([&] { return given_up.n == 1; });
  EXPECT_EQ(given_up.status, bdev::IoStatus::kAborted);
  Done reset;  // ends the held write (retried: it was not given up)
  io(t0_, reset, [&] { return mgr_->reset(a.desc, a.ch, Done::cb, &reset); });
  run_until([&] { return held.n == 1; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(held.ok, 1);
  EXPECT_EQ(given_up.n, 1);
  Done r;
  std::memset(buf(1 << 20), 0xee, 4096);
  io(t0_, r, [&] { return mgr_->read(a.desc, a.ch, buf(1 << 20), 80, 8, Done::cb, &r); });
  ASSERT_EQ(r.ok, 1);
  EXPECT_NE(std::memcmp(buf(1 << 20), buf(8192), 4096), 0);  // never written
  close(t0_, a);
  detach();
}

// Real time, 50 times faster: the driver's 10.5 s wait for a controller that never becomes
// ready again (CAP.TO) takes 210 ms.
class FastClock final : public env::Clock {
 public:
  uint64_t read() const override { return env::system_clock().now() * 50; }
  uint64_t ticks_per_second() const override { return env::system_clock().ticks_per_second(); }
};

// A reset that fails (the controller never becomes ready again) with max_reset_failures = 1:
// the controller is failed. What the device held ends with the driver's DNR status, what was
// parked during the reset fails, the bdev reset fails, nothing is left behind, and new I/O
// fails at once.
TEST_F(NvmeBdevTest, FailedResetFailsHeldAndParkedIo) {
  static FastClock fast;
  attach_in_process({}, nvme::TimeoutAction::kAbort, [](nvme::ControllerOptions& co) {
    co.clock = &fast;
    co.max_reset_failures = 1;
  });
  Open a = open(t0_, "Nvme0n1");
  Open b = open(t1_, "Nvme0n1");
  Open b2 = open(t1_, "Nvme0n2");
  hold_commands(sn::nvm::kWrite, 2);
  std::vector<Each> w(16);
  for (int i = 0; i < 16; ++i) {
    CurrentThreadScope on(i % 2 ? t1_ : t0_);
    Open& o = i % 2 ? b : a;
    ASSERT_EQ(mgr_->write(o.desc, o.ch, buf(i * 4096), i * 8, 8, Each::cb, &w[i]), 0);
  }
  run_until([&] { return completed(w) == 14 && fault_hits() == 2; });
  device_->with_device([](auto& d) { d.controller().hold_ready(true); });
  Done reset;
  {
    CurrentThreadScope on(t0_);
    ASSERT_EQ(mgr_->reset(a.desc, a.ch, Done::cb, &reset), 0);
  }
  std::vector<Each> during(64);
  int issued = 0;
  run_until([&] {
    if (reset.n == 0 && issued < 64) {
      CurrentThreadScope on(t1_);
      EXPECT_EQ(mgr_->write(b2.desc, b2.ch, buf(1 << 20), issued, 1, Each::cb, &during[issued]), 0);
      ++issued;
    }
    return reset.n == 1;
  });
  during.resize(issued);
  run_until([&] { return completed(w) == 16 && completed(during) == issued; });
  for (int i = 0; i < 100; ++i) fw_->step();
  EXPECT_EQ(reset.n, 1);
  EXPECT_EQ(reset.status, IoStatus::kFailed);
  int held = 0;
  for (const Each& e : w) {
    EXPECT_EQ(e.n, 1);
    if (e.status == IoStatus::kSuccess) continue;
    ++held;
    EXPECT_EQ(e.status, IoStatus::kNvmeError);  // the driver's final status (DNR): not retried
  }
  EXPECT_EQ(held, 2);
  for (const Each& e : during) EXPECT_EQ(e.n, 1);
  auto st = bdev::nvme_controller_stats(*mgr_, "Nvme0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->resets, 0u);
  EXPECT_EQ(st->reset_failures, 1u);
  Done late;
  io(t1_, late, [&] { return mgr_->write(b2.desc, b2.ch, buf(), 0, 1, Done::cb, &late); });
  EXPECT_EQ(late.status, IoStatus::kFailed);
  close(t0_, a);
  close(t1_, b);
  close(t1_, b2);
  detach();
}

// ------------------------------------------- controller reset, free-running reactors ----

// Runs f on t (a message).
void post(event::Thread* t, std::function<void()> f) {
  auto* p = new std::function<void()>(std::move(f));
  if (t->send_msg(
          [](void* a) {
            std::unique_ptr<std::function<void()>> g(static_cast<std::function<void()>*>(a));
            (*g)();
          },
          p) != 0) {
    delete p;
    ADD_FAILURE() << "send_msg failed";
  }
}
// On the current thread: polls pred() every period_us, runs then() once it holds.
void when(std::function<bool()> pred, std::function<void()> then, uint64_t period_us = 0) {
  struct W {
    std::function<bool()> pred;
    std::function<void()> then;
    event::Poller* p = nullptr;
  };
  auto* w = new W{std::move(pred), std::move(then)};
  w->p = event::Thread::current()->register_poller(
      [](void* a) {
        auto* w = static_cast<W*>(a);
        if (!w->pred()) return event::PollStatus::kIdle;
        event::Thread::current()->unregister_poller(w->p);
        std::unique_ptr<W> own(w);
        own->then();
        return event::PollStatus::kBusy;
      },
      w, period_us, "test_when");
}

// The reset under load again, with the reactors on two OS threads (run under TSan): channel
// threads pause while the admin thread resets, completions the reset delivers are deferred to
// their channel's thread, and writes issued by the other thread meanwhile are parked.
TEST(NvmeBdevFreeRun, ControllerResetWithReactorsOnTwoOsThreads) {
  event::FrameworkOptions fo;
  fo.core_mask = "0x3";
  fo.pin_reactors = false;
  auto fwr = event::Framework::create(fo);
  ASSERT_TRUE(fwr.ok()) << fwr.error().message;
  std::unique_ptr<event::Framework> fw = std::move(fwr).value();
  event::Thread* t1 = fw->create_thread("t1", 1);
  ASSERT_NE(t1, nullptr);
  auto mgrr = bdev::Manager::create(*fw);
  ASSERT_TRUE(mgrr.ok());
  std::unique_ptr<bdev::Manager> mgr = std::move(mgrr).value();
  auto memr = env::DmaRegion::create(env::MemoryRegistry::global(), 8 << 20);
  ASSERT_TRUE(memr.ok());
  std::unique_ptr<env::DmaRegion> mem = std::move(memr).value();
  auto* base = static_cast<uint8_t*>(mem->data());
  auto devr = emu::device::InProcessNvmeDevice::create(config());
  ASSERT_TRUE(devr.ok()) << devr.error();
  std::unique_ptr<emu::device::InProcessNvmeDevice> device = std::move(devr).value();
  auto pci = env::VfioUserDevice::attach(device.get(), env::MemoryRegistry::global());
  ASSERT_TRUE(pci.ok()) << pci.error().message;
  nvme::ControllerOptions co;
  co.io_queues_requested = 4;
  auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  const uint64_t emu_resets =
      device->with_device([](auto& d) { return d.controller().counters().resets; });
  auto fault_hits = [&] {
    return device->with_device([](auto& d) { return d.controller().fault_hits(); });
  };

  constexpr int kPer = 32, kDuring = 256;
  struct Io {
    std::atomic<int> n{0}, ok{0};
    std::atomic<int>* group = nullptr;
    static void cb(BdevIo&, bool success, void* arg) {
      auto* x = static_cast<Io*>(arg);
      x->ok += success;
      ++x->n;
      ++*x->group;
    }
  };
  struct State {
    Io wa[kPer], wb[kPer], during[kDuring], reads[3];
    std::atomic<int> writes_done{0}, during_done{0}, during_issued{0}, reads_done{0};
    std::atomic<int> reset_n{0}, reset_ok{0};
    std::atomic<bool> writer_stopped{false}, finished{false};
    bdev::NvmeControllerStats stats;
    uint64_t emu_resets = 0;  // before the detach (its shutdown clears CC.EN too)
    bool data_ok[3] = {false, false, false};
    bdev::Desc *a = nullptr, *b = nullptr, *b2 = nullptr;
    event::IoChannel *ach = nullptr, *bch = nullptr, *b2ch = nullptr;
    event::Thread* app = nullptr;
  } st;
  for (Io& x : st.wa) x.group = &st.writes_done;
  for (Io& x : st.wb) x.group = &st.writes_done;
  for (Io& x : st.during) x.group = &st.during_done;
  for (Io& x : st.reads) x.group = &st.reads_done;
  for (int i = 0; i < 2 * kPer; ++i)
    for (int j = 0; j < 4096; ++j) base[i * 4096 + j] = static_cast<uint8_t>(i * 29 + j * 5 + 3);
  for (int i = 0; i < kDuring; ++i)
    for (int j = 0; j < 4096; ++j) base[(1 << 20) + i * 4096 + j] = static_cast<uint8_t>(i + j * 3);
  // The device holds the first four writes: only a controller reset ends them.
  const emu::nvme::FaultRule hold = held(sn::nvm::kWrite, 4);
  ASSERT_TRUE(device->with_device([&](auto& d) { return d.controller().faults().add(hold).ok(); }));

  std::function<void()> finish_up;  // on the app thread
  std::function<void()> start = [&] {
    st.app = event::Thread::current();
    bdev::NvmeBdevOptions o;
    o.name = "Nvme0";
    o.admin_poll_period_us = 1000;
    auto names = bdev::nvme_attach_controller(*mgr, std::move(ctrl).value(), o);
    ASSERT_TRUE(names.ok()) << names.error().message;
    auto d = mgr->open("Nvme0n1", true, nullptr, nullptr);
    ASSERT_TRUE(d.ok());
    st.a = *d;
    st.ach = mgr->get_io_channel(st.a);
    post(t1, [&] {
      auto d1 = mgr->open("Nvme0n1", true, nullptr, nullptr);
      auto d2 = mgr->open("Nvme0n2", true, nullptr, nullptr);
      ASSERT_TRUE(d1.ok() && d2.ok());
      st.b = *d1;
      st.b2 = *d2;
      st.bch = mgr->get_io_channel(st.b);
      st.b2ch = mgr->get_io_channel(st.b2);
      for (int i = 0; i < kPer; ++i)
        EXPECT_EQ(mgr->write(st.b, st.bch, base + (kPer + i) * 4096, 1024 + i * 8, 8, Io::cb,
                             &st.wb[i]),
                  0);
      post(st.app, [&] {
        for (int i = 0; i < kPer; ++i)
          EXPECT_EQ(mgr->write(st.a, st.ach, base + i * 4096, i * 8, 8, Io::cb, &st.wa[i]), 0);
        when([&] { return st.writes_done == 2 * kPer - 4 && fault_hits() == 4; }, [&] {
          // t1 keeps writing to the other namespace (one write every 20 us) until the reset
          // is over; the reset starts from this thread.
          post(t1, [&] {
            when([&] {
              if (st.reset_n.load() == 0 && st.during_issued < kDuring) {
                const int i = st.during_issued;
                EXPECT_EQ(mgr->write(st.b2, st.b2ch, base + (1 << 20) + i * 4096, i, 1, Io::cb,
                                     &st.during[i]),
                          0);
                ++st.during_issued;
                return false;
              }
              return true;
            }, [&] { st.writer_stopped = true; }, 20);
          });
          EXPECT_EQ(mgr->reset(st.a, st.ach,
                               [](BdevIo&, bool ok, void* arg) {
                                 auto* s = static_cast<State*>(arg);
                                 s->reset_ok += ok;
                                 ++s->reset_n;
                               },
                               &st),
                    0);
          when([&] {
            return st.reset_n == 1 && st.writes_done == 2 * kPer && st.writer_stopped &&
                   st.during_done == st.during_issued;
          }, finish_up);
        });
      });
    });
  };
  finish_up = [&] {
    st.stats = *bdev::nvme_controller_stats(*mgr, "Nvme0");
    st.emu_resets = device->with_device([](auto& d) { return d.controller().counters().resets; });
    const int issued = st.during_issued;
    EXPECT_EQ(mgr->read(st.a, st.ach, base + (4 << 20), 1024, kPer * 8, Io::cb, &st.reads[0]), 0);
    post(t1, [&, issued] {
      EXPECT_EQ(mgr->read(st.b, st.bch, base + (5 << 20), 0, kPer * 8, Io::cb, &st.reads[1]), 0);
      EXPECT_EQ(mgr->read(st.b2, st.b2ch, base + (6 << 20), 0, issued, Io::cb, &st.reads[2]), 0);
    });
    when([&] { return st.reads_done == 3; }, [&, issued] {
      st.data_ok[0] = std::memcmp(base + (4 << 20), base + kPer * 4096, kPer * 4096) == 0;
      st.data_ok[1] = std::memcmp(base + (5 << 20), base, kPer * 4096) == 0;
      st.data_ok[2] = std::memcmp(base + (6 << 20), base + (1 << 20), issued * 4096) == 0;
      mgr->put_io_channel(st.ach);
      mgr->close(st.a);
      post(t1, [&] {
        mgr->put_io_channel(st.bch);
        mgr->put_io_channel(st.b2ch);
        mgr->close(st.b);
        mgr->close(st.b2);
        post(st.app, [&] {
          EXPECT_EQ(bdev::nvme_detach_controller(
                        *mgr, "Nvme0",
                        [](void* arg) {
                          std::unique_ptr<std::pair<event::Framework*, State*>> s(
                              static_cast<std::pair<event::Framework*, State*>*>(arg));
                          s->second->finished = true;
                          s->first->stop(0);
                        },
                        new std::pair<event::Framework*, State*>(fw.get(), &st)),
                    0);
        });
      });
    });
  };
  // A lost completion fails the test instead of hanging it.
  std::atomic<bool> over{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 400 && !over.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!over.load()) {
      ADD_FAILURE() << "scenario did not finish in 20 s";
      fw->stop(1);
    }
  });
  const int rc = fw->run(
      [](void* arg) {
        auto* f = static_cast<std::function<void()>*>(arg);
        (*f)();
      },
      &start);
  over = true;
  watchdog.join();
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(st.finished);
  EXPECT_EQ(st.reset_n.load(), 1);
  EXPECT_EQ(st.reset_ok.load(), 1);
  for (int i = 0; i < kPer; ++i) {
    EXPECT_EQ(st.wa[i].n.load(), 1) << i;
    EXPECT_EQ(st.wa[i].ok.load(), 1) << i;
    EXPECT_EQ(st.wb[i].n.load(), 1) << i;
    EXPECT_EQ(st.wb[i].ok.load(), 1) << i;
  }
  EXPECT_GT(st.during_issued.load(), 0);
  for (int i = 0; i < st.during_issued; ++i) {
    EXPECT_EQ(st.during[i].n.load(), 1) << i;
    EXPECT_EQ(st.during[i].ok.load(), 1) << i;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(st.reads[i].ok.load(), 1) << i;
    EXPECT_TRUE(st.data_ok[i]) << i;
  }
  EXPECT_EQ(st.stats.resets, 1u);
  EXPECT_EQ(st.stats.reset_failures, 0u);
  EXPECT_EQ(st.emu_resets - emu_resets, 1u);  // CC.EN 1 -> 0 once
  mgr.reset();
  fw.reset();
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
}  // namespace pollux
