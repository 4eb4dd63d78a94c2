// The device boundary as the host stack sees it: a PCI function with config space and BARs.
// Backends: vfio-user (a device in another process, or in-process over direct calls) and,
// later, vfio-pci (real hardware). The NVMe driver above is the same for all of them.
//
// DMA: a backend makes every region of the MemoryRegistry it was opened with visible to the
// device (and follows regions added later), so any buffer from driver/env is DMA-able.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pollux::env {

class PciDevice {
 public:
  virtual ~PciDevice() = default;

  // Config space. 0 or a negative errno.
  virtual int config_read(uint32_t offset, void* buf, std::size_t len) = 0;
  virtual int config_write(uint32_t offset, const void* buf, std::size_t len) = 0;

  // BAR access that always works (MMIO or a message). Register accesses are 4 or 8 bytes.
  // 0 or a negative errno (-ENODEV once the device is gone).
  virtual int bar_read(int bar, uint64_t offset, void* buf, std::size_t len) = 0;
  virtual int bar_write(int bar, uint64_t offset, const void* buf, std::size_t len) = 0;

  // A direct mapping of [offset, offset + len) of a BAR, or nullptr if that range can only be
  // reached through bar_read/bar_write. NVMe doorbells use it: stores, no syscalls.
  virtual volatile void* bar_map(int bar, uint64_t offset, std::size_t len) = 0;

  // Function-level reset. 0 or a negative errno.
  virtual int reset() = 0;

  // True once the backend knows the device is gone (surprise removal, disconnect). A flag
  // load, not a virtual call: queue pairs read it on every submit and poll.
  bool removed() const { return removed_.load(std::memory_order_acquire); }
  // The flag itself, for a layer above that reads it on its hot path.
  const std::atomic<bool>& removed_flag() const { return removed_; }
  // Looks actively for removal (may make a syscall); for control paths such as the admin
  // poller. Returns removed() afterwards.
  virtual bool probe_removed() { return removed(); }
  // The platform asks for the device back while it still works (vfio-pci's request eventfd,
  // seen by probe_removed()): the device may still DMA into and out of the buffers of the
  // commands it holds. The driver stops it first, then calls finish_removal(); only then is
  // the device removed() and its commands ended.
  bool removal_requested() const { return removal_requested_.load(std::memory_order_acquire); }
  void finish_removal() { mark_removed(); }

  // "vfio-user:/path/to.sock", "pcie:0000:01:00.0", ...
  virtual std::string address() const = 0;

  uint32_t read32(int bar, uint64_t off) {
    uint32_t v = ~0u;
    return bar_read(bar, off, &v, 4) == 0 ? v : ~0u;  // a gone device reads all ones
  }
  uint64_t read64(int bar, uint64_t off) {
    uint64_t v = ~0ull;
    return bar_read(bar, off, &v, 8) == 0 ? v : ~0ull;
  }
  int write32(int bar, uint64_t off, uint32_t v) { return bar_write(bar, off, &v, 4); }
  int write64(int bar, uint64_t off, uint64_t v) { return bar_write(bar, off, &v, 8); }

 protected:
  // Backends call this when they learn the device is gone.
  void mark_removed() { removed_.store(true, std::memory_order_release); }
  // ... or that it is wanted back while still working (see removal_requested()).
  void request_removal() { removal_requested_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> removed_{false};
  std::atomic<bool> removal_requested_{false};
};

}  // namespace pollux::env
