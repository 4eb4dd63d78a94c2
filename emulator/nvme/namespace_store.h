// Backing stores for namespaces: sparse memory and a file. Byte addressed; the controller
// turns LBAs into byte offsets and checks ranges before calling (callers guarantee
// off + len <= size()). Every method returns false on a media (host I/O) error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emulator/nvme/block_table.h"
#include "emulator/nvme/result.h"

namespace pollux::emu::nvme {

class NamespaceStore {
 public:
  explicit NamespaceStore(uint64_t size) : size_(size) {}
  virtual ~NamespaceStore();
  NamespaceStore(const NamespaceStore&) = delete;
  NamespaceStore& operator=(const NamespaceStore&) = delete;

  uint64_t size() const { return size_; }

  virtual bool read(uint64_t off, void* dst, size_t len) = 0;
  // The same into host memory read on this thread only: it may bypass the CPU's caches
  // (host_stores.h).
  virtual bool read_to_host(uint64_t off, void* dst, size_t len) { return read(off, dst, len); }
  virtual bool write(uint64_t off, const void* src, size_t len) = 0;
  // *equal = (stored bytes == src bytes).
  virtual bool compare(uint64_t off, const void* src, size_t len, bool* equal) = 0;
  // The range reads back as zeroes afterwards.
  virtual bool write_zeroes(uint64_t off, uint64_t len) = 0;
  // Releases the range; it reads back as zeroes (Identify Namespace DLFEAT = 001b).
  virtual bool deallocate(uint64_t off, uint64_t len) = 0;
  virtual bool flush() = 0;
  // Everything reads back as zeroes (Format NVM).
  virtual bool erase_all() = 0;
  // Bytes actually holding data (sparse chunks, file blocks).
  virtual uint64_t allocated_bytes() const = 0;

 private:
  uint64_t size_;
};

// Sparse memory at 4 KiB block ("chunk") granularity: a hash table keyed by block index
// (block_table.h). A block that is all zeroes is not kept (unwritten, deallocated and
// zero-written blocks read as zeroes); a block whose bytes are exactly the verification data
// pattern (common/data_pattern.h, 512 B or 4 KiB pattern blocks) keeps only its seed (LBA,
// generation) and is regenerated on read; any other block keeps its 4 KiB of bytes. Every
// write re-examines the whole block it touches, so a partial write over a pattern block
// stores bytes (or zeroes, or a pattern again) exactly as the block now reads.
class MemoryStore final : public NamespaceStore {
 public:
  static constexpr unsigned kChunkShift = 12;
  static constexpr size_t kChunkSize = size_t{1} << kChunkShift;

  explicit MemoryStore(uint64_t size);
  ~MemoryStore() override;

  bool read(uint64_t off, void* dst, size_t len) override { return read(off, dst, len, false); }
  // Whole blocks of zeroes or bytes go to host memory with streaming stores.
  bool read_to_host(uint64_t off, void* dst, size_t len) override {
    return read(off, dst, len, true);
  }
  bool write(uint64_t off, const void* src, size_t len) override;
  bool compare(uint64_t off, const void* src, size_t len, bool* equal) override;
  bool write_zeroes(uint64_t off, uint64_t len) override;
  bool deallocate(uint64_t off, uint64_t len) override;
  bool flush() override { return true; }
  bool erase_all() override;
  // Blocks holding data (bytes or a pattern seed), as if each held its 4 KiB.
  uint64_t allocated_bytes() const override { return chunks_allocated() * kChunkSize; }
  uint64_t chunks_allocated() const { return table_.size(); }
  uint64_t pattern_blocks() const { return table_.size() - byte_blocks_; }
  uint64_t byte_blocks() const { return byte_blocks_; }
  // Host memory the store holds: the table and the byte blocks (not the allocator's overhead).
  uint64_t memory_bytes() const { return table_.memory_bytes() + byte_blocks_ * kChunkSize; }

 private:
  bool read(uint64_t off, void* dst, size_t len, bool to_host);
  // The bytes of block `idx` as they read now, into `out` (kChunkSize bytes).
  void materialise(uint64_t idx, uint8_t* out) const;
  // Keeps `data` (a whole block) as block `idx`: nothing, a pattern seed or bytes.
  bool store_block(uint64_t idx, const uint8_t* data);
  void drop(BlockTable::Slot* s);

  BlockTable table_;
  uint64_t byte_blocks_ = 0;
  std::unique_ptr<uint8_t[]> scratch_{new uint8_t[kChunkSize]};
};

// A file, created if missing and extended to the namespace size (sparse where the file
// system allows). pread/pwrite; flush = fdatasync; deallocate punches holes when possible.
class FileStore final : public NamespaceStore {
 public:
  static Result<std::unique_ptr<FileStore>> open(const std::string& path, uint64_t size);
  ~FileStore() override;

  bool read(uint64_t off, void* dst, size_t len) override;
  bool write(uint64_t off, const void* src, size_t len) override;
  bool compare(uint64_t off, const void* src, size_t len, bool* equal) override;
  bool write_zeroes(uint64_t off, uint64_t len) override;
  bool deallocate(uint64_t off, uint64_t len) override;
  bool flush() override;
  bool erase_all() override;
  uint64_t allocated_bytes() const override;

 private:
  FileStore(int fd, uint64_t size) : NamespaceStore(size), fd_(fd) {}
  bool write_zero_bytes(uint64_t off, uint64_t len);
  int fd_;
  std::unique_ptr<uint8_t[]> scratch_{new uint8_t[kScratch]};
  static constexpr size_t kScratch = 64 * 1024;
};

// "memory" or "file:<path>".
Result<std::unique_ptr<NamespaceStore>> open_store(const std::string& backing, uint64_t size);

}  // namespace pollux::emu::nvme
