// The vfio-user device boundary end to end: driver/env's VfioUserDevice (client) against
// emulator/vfio_user's Server (server) with a toy device model, in both transports:
// in-process (direct MessageEndpoint calls) and a UNIX socket with the server polled on its
// own thread.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "driver/env/dma_memory.h"
#include "driver/env/memory_registry.h"
#include "driver/env/vfio_user_client.h"
#include "emulator/vfio_user/server.h"
#include "emulator/vfio_user/toy_device.h"
#include "spec/vfio_user.h"

namespace pollux {
namespace {

namespace vu = spec::vfio_user;
using emu::vfio_user::Server;
using emu::vfio_user::ToyDevice;
using env::DmaRegion;
using env::MemoryRegistry;
using env::VfioUserDevice;

enum class Mode { kInProcess, kSocket };

// A private directory for the socket: sun_path is short (108 bytes), so not under TEST_TMPDIR.
struct SocketDir {
  std::string dir;
  SocketDir() {
    char tmpl[] = "/tmp/pollux-vu-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) dir = tmpl;
  }
  ~SocketDir() {
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
};

// A server for the toy device, reachable in-process or over a socket polled on a thread.
class Harness {
 public:
  explicit Harness(Mode mode) : mode_(mode), server_(device_) {  // NOLINT
    device_.attach_server(&server_);
    if (mode_ == Mode::kSocket) {
      path_ = dir_.dir + "/s.sock";
      listen_rc_ = server_.listen(path_);
      if (listen_rc_ == 0) start();
    }
  }
  ~Harness() { stop(); }

  void start() {
    stop_.store(false);
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_acquire)) (void)server_.poll_once(20);
    });
  }
  // Joins the server thread: afterwards the test may look at the server directly.
  void stop() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  Result<std::unique_ptr<VfioUserDevice>> open(MemoryRegistry& registry) {
    if (mode_ == Mode::kInProcess) return VfioUserDevice::attach(&server_, registry);
    return VfioUserDevice::connect("vfio-user:" + path_, registry);
  }

  Mode mode() const { return mode_; }
  int listen_rc() const { return listen_rc_; }
  Server& server() { return server_; }
  ToyDevice& device() { return device_; }

 private:
  Mode mode_;
  SocketDir dir_;  // outlives the server, which removes the socket file
  ToyDevice device_;
  Server server_;
  std::string path_;
  int listen_rc_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class VfioUserLoopback : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    h_ = std::make_unique<Harness>(GetParam());
    ASSERT_TRUE(h_->device().ok());
    ASSERT_EQ(h_->listen_rc(), 0);
  }
  void TearDown() override {
    dev_.reset();
    h_.reset();
  }
  void open() {
    auto d = h_->open(registry_);
    ASSERT_TRUE(d.ok()) << d.error().message << " (" << d.error().code << ")";
    dev_ = std::move(d.value());
  }
  // Programs the toy DMA engine and returns its status.
  uint32_t dma(uint64_t src, uint64_t dst, uint32_t len) {
    EXPECT_EQ(dev_->write64(0, ToyDevice::kRegDmaSrc, src), 0);
    EXPECT_EQ(dev_->write64(0, ToyDevice::kRegDmaDst, dst), 0);
    EXPECT_EQ(dev_->write32(0, ToyDevice::kRegDmaLen, len), 0);
    EXPECT_EQ(dev_->write32(0, ToyDevice::kRegDmaCtrl, 1), 0);
    return dev_->read32(0, ToyDevice::kRegDmaStatus);
  }

  MemoryRegistry registry_;
  std::unique_ptr<Harness> h_;
  std::unique_ptr<VfioUserDevice> dev_;
};

TEST_P(VfioUserLoopback, NegotiatesVersionAndCapabilities) {
  open();
  const auto& caps = dev_->server_caps();
  EXPECT_EQ(caps.major, 0);
  EXPECT_EQ(caps.minor, 1);
  EXPECT_EQ(caps.max_msg_fds, 8u);
  EXPECT_EQ(caps.max_data_xfer_size, 1u << 20);
  EXPECT_EQ(caps.max_dma_maps, 4096u);
  EXPECT_EQ(caps.pgsizes, 4096u);
  EXPECT_EQ(dev_->device_info().flags, vu::kDeviceFlagPci | vu::kDeviceFlagReset);
  EXPECT_EQ(dev_->device_info().num_regions, 9u);
  EXPECT_EQ(dev_->device_info().num_irqs, 5u);
  EXPECT_FALSE(dev_->removed());
  EXPECT_EQ(dev_->address().rfind("vfio-user:", 0), 0u);
}

TEST_P(VfioUserLoopback, RegionInfoCarriesTheSparseMmapCapability) {
  open();
  const auto& bar0 = dev_->region(0);
  EXPECT_EQ(bar0.size, ToyDevice::kBar0Size);
  EXPECT_EQ(bar0.flags, vu::kRegionFlagRead | vu::kRegionFlagWrite | vu::kRegionFlagMmap |
                            vu::kRegionFlagCaps);
  ASSERT_EQ(bar0.sparse.size(), 1u);
  EXPECT_EQ(bar0.sparse[0].offset, ToyDevice::kDoorbellOffset);
  EXPECT_EQ(bar0.sparse[0].size, ToyDevice::kDoorbellSize);
  EXPECT_EQ(dev_->region(vu::region::kConfig).size, ToyDevice::kConfigSize);
  EXPECT_EQ(dev_->region(vu::region::kConfig).flags, vu::kRegionFlagRead | vu::kRegionFlagWrite);
  EXPECT_EQ(dev_->region(1).size, 0u);
  // Only the sparse area is mapped: registers are trapped.
  EXPECT_NE(dev_->bar_map(0, 0x1000, 0x1000), nullptr);
  EXPECT_NE(dev_->bar_map(0, 0x1008, 4), nullptr);
  EXPECT_EQ(dev_->bar_map(0, 0, 4), nullptr);
  EXPECT_EQ(dev_->bar_map(0, 0xffc, 8), nullptr);  // straddles the boundary
  EXPECT_EQ(dev_->bar_map(1, 0, 4), nullptr);
}

TEST_P(VfioUserLoopback, ConfigSpaceAndRegisters) {
  open();
  uint32_t ids = 0;
  ASSERT_EQ(dev_->config_read(0, &ids, 4), 0);
  EXPECT_EQ(ids & 0xffff, ToyDevice::kVendorId);
  EXPECT_EQ(ids >> 16, ToyDevice::kDeviceId);
  uint32_t class_rev = 0;
  ASSERT_EQ(dev_->config_read(8, &class_rev, 4), 0);
  EXPECT_EQ(class_rev >> 8, 0x010802u);
  uint16_t cmd = 0x0006;
  EXPECT_EQ(dev_->config_write(4, &cmd, 2), 0);
  uint16_t back = 0;
  EXPECT_EQ(dev_->config_read(4, &back, 2), 0);
  EXPECT_EQ(back, 0x0006);
  EXPECT_EQ(dev_->config_read(255, &ids, 4), -EINVAL);  // past the end of config space

  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegId), ToyDevice::kIdValue);
  EXPECT_EQ(dev_->write32(0, ToyDevice::kRegScratch, 0xdeadbeef), 0);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegScratch), 0xdeadbeefu);
  EXPECT_EQ(dev_->write64(0, ToyDevice::kRegDmaSrc, 0x1122334455667788ull), 0);
  EXPECT_EQ(dev_->read64(0, ToyDevice::kRegDmaSrc), 0x1122334455667788ull);
  uint32_t v = 0;
  EXPECT_EQ(dev_->bar_read(0, ToyDevice::kBar0Size, &v, 4), -EINVAL);
  EXPECT_EQ(dev_->bar_read(1, 0, &v, 4), -EINVAL);  // BAR1 does not exist
  EXPECT_EQ(dev_->bar_read(6, 0, &v, 4), -EINVAL);
}

TEST_P(VfioUserLoopback, DoorbellPageIsSharedBothWays) {
  open();
  auto* db = static_cast<volatile uint32_t*>(dev_->bar_map(0, 0x1000, 0x1000));
  ASSERT_NE(db, nullptr);
  // Host store through the mapping; the device sees it.
  db[2] = 0xabcd;  // offset 0x1008
  ASSERT_EQ(dev_->write32(0, ToyDevice::kRegDbSelect, 8), 0);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegDbValue), 0xabcdu);
  EXPECT_EQ(dev_->read32(0, 0x1008), 0xabcdu);  // bar_read goes through the mapping too
  // Device store into the page; the host sees it through the mapping.
  ASSERT_EQ(dev_->write32(0, ToyDevice::kRegDbSelect, 0x10), 0);
  ASSERT_EQ(dev_->write32(0, ToyDevice::kRegDbValue, 0x1234), 0);
  EXPECT_EQ(db[4], 0x1234u);
  // bar_write inside the mapped area is a plain store.
  ASSERT_EQ(dev_->write32(0, 0x1ffc, 77), 0);
  ASSERT_EQ(dev_->write32(0, ToyDevice::kRegDbSelect, 0xffc), 0);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegDbValue), 77u);
}

TEST_P(VfioUserLoopback, DmaToMemoryRegisteredBeforeAndAfterAttach) {
  auto before = DmaRegion::create(registry_, 64 * 1024);
  ASSERT_TRUE(before.ok()) << before.error().message;
  open();
  EXPECT_EQ(dev_->dma_map_count(), 1u);
  auto after = DmaRegion::create(registry_, 64 * 1024);
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_EQ(dev_->dma_map_count(), 2u);
  EXPECT_EQ(dev_->dma_map_failures(), 0u);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegDmaMaps), 2u);

  auto* a = static_cast<uint8_t*>((*before)->data());
  auto* b = static_cast<uint8_t*>((*after)->data());
  for (int i = 0; i < 4096; ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  EXPECT_EQ(dma((*before)->iova(), (*after)->iova() + 100, 4096), ToyDevice::kDmaDone);
  EXPECT_EQ(std::memcmp(a, b + 100, 4096), 0);
  for (int i = 0; i < 512; ++i) b[8192 + i] = static_cast<uint8_t>(0xa5 ^ i);
  EXPECT_EQ(dma((*after)->iova() + 8192, (*before)->iova() + 20000, 512), ToyDevice::kDmaDone);
  EXPECT_EQ(std::memcmp(b + 8192, a + 20000, 512), 0);

  // Removing a region DMA_UNMAPs it: the device can no longer reach it.
  const uint64_t gone = (*after)->iova();
  after.value().reset();
  EXPECT_EQ(dev_->dma_map_count(), 1u);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegDmaMaps), 1u);
  EXPECT_EQ(dma((*before)->iova(), gone, 64), ToyDevice::kDmaFault);
}

TEST_P(VfioUserLoopback, DmaToUnmappedIovaIsRefused) {
  auto mem = DmaRegion::create(registry_, 64 * 1024);
  ASSERT_TRUE(mem.ok()) << mem.error().message;
  open();
  const uint64_t base = (*mem)->iova();
  const uint64_t size = (*mem)->size();
  EXPECT_EQ(dma(0x1000, base, 64), ToyDevice::kDmaFault);             // nothing there
  EXPECT_EQ(dma(base, base + size - 32, 64), ToyDevice::kDmaFault);   // runs off the end
  EXPECT_EQ(dma(base - 16, base, 64), ToyDevice::kDmaFault);          // starts before
  EXPECT_EQ(dma(base, base + 4096, 64), ToyDevice::kDmaDone);
}

TEST_P(VfioUserLoopback, ResetKeepsDmaMappings) {
  auto mem = DmaRegion::create(registry_, 16 * 1024);
  ASSERT_TRUE(mem.ok()) << mem.error().message;
  open();
  ASSERT_EQ(dev_->write32(0, ToyDevice::kRegScratch, 5), 0);
  auto* db = static_cast<volatile uint32_t*>(dev_->bar_map(0, 0x1000, 4));
  ASSERT_NE(db, nullptr);
  *db = 9;
  EXPECT_EQ(dev_->reset(), 0);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegScratch), 0u);
  EXPECT_EQ(dev_->read32(0, ToyDevice::kRegResets), 1u);
  EXPECT_EQ(*db, 0u);  // the device cleared its doorbell page
  EXPECT_EQ(dev_->dma_map_count(), 1u);
  EXPECT_EQ(dma((*mem)->iova(), (*mem)->iova() + 8192, 128), ToyDevice::kDmaDone);
}

TEST_P(VfioUserLoopback, IrqInfoAndEventfds) {
  open();
  auto intx = dev_->irq_info(vu::irq::kIntx);
  ASSERT_TRUE(intx.ok());
  EXPECT_EQ(intx->count, 1u);
  EXPECT_EQ(intx->flags, vu::kIrqInfoEventfd | vu::kIrqInfoMaskable | vu::kIrqInfoAutomasked);
  auto msix = dev_->irq_info(vu::irq::kMsix);
  ASSERT_TRUE(msix.ok());
  EXPECT_EQ(msix->count, 4u);
  EXPECT_EQ(msix->flags, vu::kIrqInfoEventfd | vu::kIrqInfoNoresize);
  auto msi = dev_->irq_info(vu::irq::kMsi);
  ASSERT_TRUE(msi.ok());
  EXPECT_EQ(msi->count, 0u);
  EXPECT_EQ(dev_->irq_info(5).error().code, -EINVAL);

  const int efd[2] = {::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK),
                      ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  ASSERT_GE(efd[0], 0);
  ASSERT_GE(efd[1], 0);
  EXPECT_EQ(dev_->set_irq_eventfds(vu::irq::kMsix, 1, efd, 2), 0);
  EXPECT_EQ(dev_->set_irq_eventfds(vu::irq::kMsix, 3, efd, 2), -EINVAL);  // past the count
  const int not_eventfd = ::dup(STDERR_FILENO);
  EXPECT_EQ(dev_->set_irq_eventfds(vu::irq::kMsix, 0, &not_eventfd, 1), -EINVAL);
  ::close(not_eventfd);
  if (h_->mode() == Mode::kSocket) h_->stop();  // look at the server from this thread
  EXPECT_TRUE(h_->server().irq_has_eventfd(vu::irq::kMsix, 1));
  EXPECT_TRUE(h_->server().irq_has_eventfd(vu::irq::kMsix, 2));
  EXPECT_EQ(h_->server().trigger_irq(vu::irq::kMsix, 2), 0);
  uint64_t n = 0;
  EXPECT_EQ(::read(efd[1], &n, sizeof n), static_cast<ssize_t>(sizeof n));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(h_->server().trigger_irq(vu::irq::kMsix, 0), -ENOENT);
  if (h_->mode() == Mode::kSocket) h_->start();
  EXPECT_EQ(dev_->disable_irqs(vu::irq::kMsix), 0);
  if (h_->mode() == Mode::kSocket) h_->stop();
  EXPECT_FALSE(h_->server().irq_has_eventfd(vu::irq::kMsix, 1));
  ::close(efd[0]);
  ::close(efd[1]);
}

INSTANTIATE_TEST_SUITE_P(Transports, VfioUserLoopback,
                         ::testing::Values(Mode::kInProcess, Mode::kSocket),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kInProcess ? "InProcess" : "Socket";
                         });

// ---- socket-only behaviour: disconnects ----

TEST(VfioUserSocket, ServerGoneMeansRemovedAndAllOnes) {
  MemoryRegistry registry;
  auto mem = DmaRegion::create(registry, 16 * 1024);
  ASSERT_TRUE(mem.ok());
  Harness h(Mode::kSocket);
  ASSERT_EQ(h.listen_rc(), 0);
  auto dev = h.open(registry);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  EXPECT_EQ((*dev)->read32(0, ToyDevice::kRegId), ToyDevice::kIdValue);
  EXPECT_FALSE((*dev)->removed());

  h.stop();
  EXPECT_EQ(h.server().dma_map_count(), 1u);
  h.server().disconnect();  // the server drops the client
  EXPECT_EQ(h.server().dma_map_count(), 0u);
  EXPECT_EQ(h.device().unmaps(), 1u);

  EXPECT_TRUE((*dev)->probe_removed());  // the control path's active check sees the hang-up
  EXPECT_TRUE((*dev)->removed());
  EXPECT_EQ((*dev)->read32(0, ToyDevice::kRegId), ~0u);
  EXPECT_EQ((*dev)->read64(0, 0x1000), ~0ull);
  uint32_t v = 0;
  EXPECT_EQ((*dev)->bar_read(0, 0, &v, 4), -ENODEV);
  EXPECT_EQ(v, ~0u);
  EXPECT_EQ((*dev)->write32(0, ToyDevice::kRegScratch, 1), -ENODEV);
  EXPECT_EQ((*dev)->config_read(0, &v, 4), -ENODEV);
  EXPECT_EQ((*dev)->reset(), -ENODEV);
  // The registry still works and the (gone) device does not get in the way.
  auto more = DmaRegion::create(registry, 4096);
  EXPECT_TRUE(more.ok());
  dev.value().reset();  // nothing hangs
}

TEST(VfioUserSocket, ClientDisconnectDropsMappingsAndTheNextClientIsServed) {
  MemoryRegistry registry;
  auto mem = DmaRegion::create(registry, 16 * 1024);
  ASSERT_TRUE(mem.ok());
  Harness h(Mode::kSocket);
  ASSERT_EQ(h.listen_rc(), 0);
  {
    auto first = h.open(registry);
    ASSERT_TRUE(first.ok()) << first.error().message;
    ASSERT_EQ((*first)->write32(0, ToyDevice::kRegScratch, 42), 0);
    EXPECT_EQ((*first)->read32(0, ToyDevice::kRegDmaMaps), 1u);
  }  // closes the socket
  // The same IOVAs map again only if the server dropped the first client's mappings.
  auto second = h.open(registry);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ((*second)->read32(0, ToyDevice::kRegDmaMaps), 1u);
  EXPECT_EQ((*second)->read32(0, ToyDevice::kRegScratch), 42u);  // device state is kept
  second.value().reset();
  h.stop();
  EXPECT_EQ(h.server().stats().connections, 2u);
  EXPECT_GE(h.server().stats().disconnects, 1u);
}

TEST(VfioUserAddress, Parses) {
  EXPECT_EQ(*env::parse_vfio_user_address("vfio-user:/run/x.sock"), "/run/x.sock");
  EXPECT_EQ(*env::parse_vfio_user_address("trtype:vfio-user traddr:/run/y.sock"), "/run/y.sock");
  EXPECT_EQ(*env::parse_vfio_user_address("traddr:/run/z.sock trtype:VFIO-USER"), "/run/z.sock");
  EXPECT_FALSE(env::parse_vfio_user_address("pcie:0000:01:00.0").ok());
  EXPECT_FALSE(env::parse_vfio_user_address("vfio-user:").ok());
  auto twice = env::parse_vfio_user_address("trtype:vfio-user traddr:/run/a traddr:/run/b");
  ASSERT_FALSE(twice.ok());  // the last one won
  EXPECT_NE(twice.error().message.find("traddr given twice"), std::string::npos);
  MemoryRegistry registry;
  auto none = VfioUserDevice::connect("vfio-user:/nonexistent/dir/x.sock", registry);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, -ENOENT);
}

}  // namespace
}  // namespace pollux
