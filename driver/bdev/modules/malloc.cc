#include "driver/bdev/modules/malloc.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "driver/env/dma_memory.h"

namespace pollux::bdev {
namespace {

class MallocBackend final : public Backend {
 public:
  MallocBackend(event::Framework& fw, std::unique_ptr<env::DmaRegion> mem, uint32_t bs,
                CopyFn copy, void* copy_ctx)
      : fw_(fw), mem_(std::move(mem)), bs_(bs), copy_(copy), copy_ctx_(copy_ctx) {
    fw_.register_io_device(this, [](void*, void*) { return 0; }, [](void*, void*) {}, 0,
                           "bdev_malloc");
  }
  bool supports(IoType t) const override { return t != IoType::kNvmePassthru; }
  void* io_device() override { return this; }
  void destruct() override { fw_.unregister_io_device(this, nullptr, nullptr); }

  void submit(BdevIo& io, void*) override {
    uint8_t* base = static_cast<uint8_t*>(mem_->data()) + io.offset_blocks() * bs_;
    const std::size_t bytes = io.num_blocks() * bs_;
    switch (io.type()) {
      case IoType::kRead: gather(io.iovs(), io.iovcnt(), base, bytes, false); break;
      case IoType::kWrite: gather(io.iovs(), io.iovcnt(), base, bytes, true); break;
      case IoType::kWriteZeroes:
      case IoType::kUnmap: std::memset(base, 0, bytes); break;
      case IoType::kFlush:
      case IoType::kReset: break;
      case IoType::kCompare:
      case IoType::kCompareAndWrite:
        if (!same(io.iovs(), io.iovcnt(), base, bytes)) {
          io.complete(IoStatus::kMiscompare);
          return;
        }
        if (io.type() == IoType::kCompareAndWrite)
          gather(io.write_iovs(), io.write_iovcnt(), base, bytes, true);
        break;
      default: io.complete(IoStatus::kFailed); return;
    }
    io.complete(IoStatus::kSuccess);
  }

 private:
  void do_copy(void* dst, const void* src, std::size_t n) {
    if (copy_) copy_(dst, src, n, copy_ctx_); else std::memcpy(dst, src, n);
  }
  void gather(iovec* iov, int n, uint8_t* disk, std::size_t bytes, bool to_disk) {
    for (int i = 0; i < n && bytes; ++i) {
      const std::size_t len = std::min(iov[i].iov_len, bytes);
      if (to_disk) do_copy(disk, iov[i].iov_base, len); else do_copy(iov[i].iov_base, disk, len);
      disk += len;
      bytes -= len;
    }
  }
  static bool same(iovec* iov, int n, const uint8_t* disk, std::size_t bytes) {
    for (int i = 0; i < n && bytes; ++i) {
      const std::size_t len = std::min(iov[i].iov_len, bytes);
      if (std::memcmp(disk, iov[i].iov_base, len) != 0) return false;
      disk += len;
      bytes -= len;
    }
    return true;
  }
  event::Framework& fw_;
  std::unique_ptr<env::DmaRegion> mem_;
  uint32_t bs_;
  CopyFn copy_;
  void* copy_ctx_;
};

}  // namespace

Result<Bdev*> create_malloc_bdev(Manager& mgr, const MallocOptions& o) {
  if (o.num_blocks == 0 || o.block_size == 0) return make_error(EINVAL, "malloc bdev: size 0");
  const std::string what = "malloc bdev " + o.name + ": " + std::to_string(o.num_blocks) +
                           " blocks of " + std::to_string(o.block_size) + " bytes";
  if (o.num_blocks > SIZE_MAX / o.block_size) return make_error(ENOMEM, what + ": too large");
  // All of it is DMA memory, populated and locked now: DmaRegion refuses more than there is.
  auto mem = env::DmaRegion::create(env::MemoryRegistry::global(), o.num_blocks * o.block_size);
  if (!mem) return make_error(mem.error().code, what + ": " + mem.error().message);
  BdevProperties p;
  p.name = o.name;
  p.product = "Malloc disk";
  p.block_size = o.block_size;
  p.num_blocks = o.num_blocks;
  return mgr.register_bdev(std::move(p),
                           std::make_unique<MallocBackend>(mgr.framework(), std::move(mem).value(),
                                                           o.block_size, o.copy, o.copy_ctx),
                           "malloc");
}

}  // namespace pollux::bdev
