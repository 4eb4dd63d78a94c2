// Backing stores for namespaces: sparse memory and a file. Byte addressed; the controller
// turns LBAs into byte offsets and checks ranges before calling (callers guarantee
// off + len <= size()). Every method returns false on a media (host I/O) error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// Sparse memory: 64 KiB chunks allocated on first write; unwritten ranges read as zeroes;
// deallocate / write zeroes free whole chunks and zero partial ones.
class MemoryStore final : public NamespaceStore {
 public:
  static constexpr unsigned kChunkShift = 16;
  static constexpr size_t kChunkSize = size_t{1} << kChunkShift;

  explicit MemoryStore(uint64_t size);
  ~MemoryStore() override;

  bool read(uint64_t off, void* dst, size_t len) override;
  bool write(uint64_t off, const void* src, size_t len) override;
  bool compare(uint64_t off, const void* src, size_t len, bool* equal) override;
  bool write_zeroes(uint64_t off, uint64_t len) override;
  bool deallocate(uint64_t off, uint64_t len) override;
  bool flush() override { return true; }
  bool erase_all() override;
  uint64_t allocated_bytes() const override { return chunks_allocated_ * kChunkSize; }
  uint64_t chunks_allocated() const { return chunks_allocated_; }

 private:
  static constexpr unsigned kL2Shift = 9;  // 512 chunk pointers per second-level table
  using L2 = std::unique_ptr<uint8_t[]>[];
  uint8_t* chunk(uint64_t idx) const {
    const auto& t = l1_[idx >> kL2Shift];
    return t ? t[idx & ((1u << kL2Shift) - 1)].get() : nullptr;
  }
  uint8_t* chunk_for_write(uint64_t idx);
  void drop_chunk(uint64_t idx);

  std::vector<std::unique_ptr<L2>> l1_;
  uint64_t chunks_allocated_ = 0;
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
