// A PciDevice served by a vfio-user server (QEMU docs/interop/vfio-user.rst, version 0.1):
// over a UNIX socket ("vfio-user:/path.sock"), or in-process through direct calls to a
// spec::vfio_user::MessageEndpoint (same messages; fds passed as ints, no socket).
//
// At attach the client negotiates the version, reads device, region and IRQ information and
// mmaps every mappable part of the BARs (for NVMe: the doorbell page of BAR0 at 0x1000, a
// sparse-mmap area), so bar_map() hands out direct pointers there. Other BAR accesses become
// REGION_READ/WRITE messages; config space is the config region (index 7); reset() is
// DEVICE_RESET.
//
// DMA: the device listens to a MemoryRegistry. Every region in it (already there at attach or
// added later) is sent as DMA_MAP with the region's fd + offset and IOVA = region.iova; a
// removed region is DMA_UNMAPped before the registry lets it go.
//
// Messages are synchronous request/reply on the caller's thread, serialised by a mutex: this
// is the set-up/admin path. The I/O hot path uses bar_map() pointers only. Nothing throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver/env/memory_registry.h"
#include "driver/env/pci_device.h"
#include "driver/env/result.h"
#include "spec/vfio_user.h"

namespace pollux::env {

struct VfioUserOptions {
  uint32_t max_msg_fds = 8;                // fds we accept in one reply
  uint32_t max_data_xfer_size = 1u << 20;  // largest data transfer we accept
  // Socket mode: connect() and every message until attach returns must be done within this.
  // A server serves one client at a time and leaves others in its listen backlog, where the
  // connection is made (or blocks, once the backlog is full) and no reply ever comes.
  uint32_t handshake_timeout_ms = 5000;
};

// What the server said about one region.
struct VfioUserRegion {
  uint32_t flags = 0;  // spec::vfio_user::kRegionFlag*
  uint64_t size = 0;
  uint64_t offset = 0;  // mmap offset in the region fd
  std::vector<spec::vfio_user::SparseMmapArea> sparse;  // from the sparse-mmap capability
};

// The server's capabilities from its VERSION reply (spec defaults where it stated none).
struct VfioUserServerCaps {
  uint16_t major = 0;
  uint16_t minor = 0;
  uint32_t max_msg_fds = spec::vfio_user::kDefaultMaxMsgFds;
  uint32_t max_data_xfer_size = spec::vfio_user::kDefaultMaxDataXferSize;
  uint32_t max_dma_maps = spec::vfio_user::kDefaultMaxDmaMaps;
  uint64_t pgsizes = spec::vfio_user::kDefaultPgsizes;
};

class VfioUserDevice final : public PciDevice, private RegionListener {
 public:
  // `address`: "vfio-user:/path.sock" or "trtype:vfio-user traddr:/path.sock".
  static Result<std::unique_ptr<VfioUserDevice>> connect(const std::string& address,
                                                         MemoryRegistry& registry,
                                                         VfioUserOptions options = {});
  // In-process: `endpoint` must outlive the device.
  static Result<std::unique_ptr<VfioUserDevice>> attach(
      spec::vfio_user::MessageEndpoint* endpoint, MemoryRegistry& registry,
      VfioUserOptions options = {});
  // In-process over a connection of its own (a server's in-process connection): owned, and
  // dropped when the device is (after its DMA_UNMAPs), as a socket is closed.
  static Result<std::unique_ptr<VfioUserDevice>> attach(
      std::unique_ptr<spec::vfio_user::MessageEndpoint> connection, MemoryRegistry& registry,
      VfioUserOptions options = {});
  // Stops listening to the registry, DMA_UNMAPs what it mapped, unmaps the BARs, closes.
  ~VfioUserDevice() override;
  VfioUserDevice(const VfioUserDevice&) = delete;
  VfioUserDevice& operator=(const VfioUserDevice&) = delete;

  // ---- PciDevice ----
  int config_read(uint32_t offset, void* buf, std::size_t len) override;
  int config_write(uint32_t offset, const void* buf, std::size_t len) override;
  int bar_read(int bar, uint64_t offset, void* buf, std::size_t len) override;
  int bar_write(int bar, uint64_t offset, const void* buf, std::size_t len) override;
  volatile void* bar_map(int bar, uint64_t offset, std::size_t len) override;
  int reset() override;
  // True once the connection broke: seen by a failed message, or by a hang-up, which this
  // checks without blocking (a poll() on the socket; the in-process connection's state).
  bool probe_removed() override;
  std::string address() const override { return address_; }

  // ---- vfio-user specifics ----
  const VfioUserServerCaps& server_caps() const { return caps_; }
  const spec::vfio_user::DeviceInfo& device_info() const { return info_; }
  const VfioUserRegion& region(uint32_t index) const { return regions_.at(index); }
  std::size_t num_regions() const { return regions_.size(); }
  // DEVICE_GET_IRQ_INFO for one interrupt type.
  Result<spec::vfio_user::IrqInfo> irq_info(uint32_t index);
  // DEVICE_SET_IRQS with DATA_EVENTFD|ACTION_TRIGGER for [start, start + n): the fds are
  // borrowed (duplicates are sent); eventfds == nullptr de-assigns that range.
  int set_irq_eventfds(uint32_t index, uint32_t start, const int* eventfds, std::size_t n);
  // DEVICE_SET_IRQS DATA_NONE|ACTION_TRIGGER with count 0: disable every interrupt of index.
  int disable_irqs(uint32_t index);
  // DMA mappings currently held by the server on our behalf, and DMA_MAPs that failed.
  std::size_t dma_map_count() const;
  uint64_t dma_map_failures() const { return dma_map_failures_.load(std::memory_order_relaxed); }
  int last_dma_error() const { return last_dma_error_.load(std::memory_order_relaxed); }

 private:
  struct Mapped {
    int bar;
    uint64_t offset;  // within the BAR
    uint64_t len;
    uint8_t* ptr;
    std::size_t map_len;
  };

  VfioUserDevice(MemoryRegistry& registry, VfioUserOptions options);
  Error init();
  Error negotiate_version();
  Error read_region_info(uint32_t index);

  // One request/reply. `fds` are borrowed. The reply payload goes to *reply (if not null) and
  // its fds to *reply_fds (the caller owns them; closed if reply_fds is null).
  // 0 or a negative errno (the server's error, -ENODEV when the connection is gone, -EPROTO).
  int transact(uint16_t command, const void* payload, std::size_t plen, const int* fds,
               std::size_t nfds, std::vector<uint8_t>* reply, std::vector<int>* reply_fds);
  int transact_socket(const std::vector<uint8_t>& msg, const int* fds, std::size_t nfds,
                      uint16_t msg_id, std::vector<uint8_t>& reply, std::vector<int>& rfds);
  int send_all(const uint8_t* data, std::size_t len, const int* fds, std::size_t nfds);
  int recv_exact(uint8_t* data, std::size_t len, std::vector<int>& fds);

  int region_rw(uint32_t index, uint64_t offset, void* buf, std::size_t len, bool write);
  const Mapped* find_mapping(int bar, uint64_t offset, std::size_t len) const;

  std::string on_region_added(const MemoryRegion& region) override;
  void on_region_removed(const MemoryRegion& region) override;

  MemoryRegistry& registry_;
  VfioUserOptions opt_;
  std::string address_;
  int sock_ = -1;
  spec::vfio_user::MessageEndpoint* endpoint_ = nullptr;
  std::unique_ptr<spec::vfio_user::MessageEndpoint> connection_;  // endpoint_, when owned
  bool listening_ = false;

  std::mutex io_mu_;  // one request/reply at a time
  uint16_t next_msg_id_ = 1;

  VfioUserServerCaps caps_;
  spec::vfio_user::DeviceInfo info_{};
  std::vector<VfioUserRegion> regions_;
  std::vector<Mapped> mapped_;

  mutable std::mutex maps_mu_;  // lock order: registry writer lock -> maps_mu_ -> io_mu_
  std::vector<std::pair<uint64_t, uint64_t>> dma_maps_;  // (iova, size) the server holds
  std::atomic<uint64_t> dma_map_failures_{0};
  std::atomic<int> last_dma_error_{0};
};

// Parses "vfio-user:/path" or "trtype:vfio-user traddr:/path" into the socket path.
Result<std::string> parse_vfio_user_address(const std::string& address);

}  // namespace pollux::env
