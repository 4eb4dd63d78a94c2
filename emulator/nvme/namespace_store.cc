#include "emulator/nvme/namespace_store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace pollux::emu::nvme {

NamespaceStore::~NamespaceStore() = default;

// -------------------------------------------------------------------------- FileStore ---

Result<std::unique_ptr<FileStore>> FileStore::open(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"cannot open '" + path + "': " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Error{"cannot stat '" + path + "': " + std::strerror(e)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{"'" + path + "' is not a regular file"};
  }
  if (static_cast<uint64_t>(st.st_size) < size && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int e = errno;
    ::close(fd);
    return Error{"cannot extend '" + path + "' to " + std::to_string(size) + " bytes: " + std::strerror(e)};
  }
  return std::unique_ptr<FileStore>(new FileStore(fd, size));
}

FileStore::~FileStore() { ::close(fd_); }

bool FileStore::read(uint64_t off, void* dst, size_t len) {
  auto* out = static_cast<uint8_t*>(dst);
  while (len) {
    const ssize_t r = ::pread(fd_, out, len, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {  // beyond end of file: zeroes
      std::memset(out, 0, len);
      return true;
    }
    out += r;
    off += static_cast<uint64_t>(r);
    len -= static_cast<size_t>(r);
  }
  return true;
}

bool FileStore::write(uint64_t off, const void* src, size_t len) {
  auto* in = static_cast<const uint8_t*>(src);
  while (len) {
    const ssize_t r = ::pwrite(fd_, in, len, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    in += r;
    off += static_cast<uint64_t>(r);
    len -= static_cast<size_t>(r);
  }
  return true;
}

bool FileStore::compare(uint64_t off, const void* src, size_t len, bool* equal) {
  auto* in = static_cast<const uint8_t*>(src);
  *equal = true;
  while (len) {
    const size_t n = std::min(len, kScratch);
    if (!read(off, scratch_.get(), n)) return false;
    if (std::memcmp(scratch_.get(), in, n) != 0) {
      *equal = false;
      return true;
    }
    in += n;
    off += n;
    len -= n;
  }
  return true;
}

bool FileStore::write_zero_bytes(uint64_t off, uint64_t len) {
  static const uint8_t kZero[64 * 1024] = {};
  while (len) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, sizeof kZero));
    if (!write(off, kZero, n)) return false;
    off += n;
    len -= n;
  }
  return true;
}

bool FileStore::write_zeroes(uint64_t off, uint64_t len) {
  if (len == 0) return true;
  if (fallocate(fd_, FALLOC_FL_ZERO_RANGE, static_cast<off_t>(off), static_cast<off_t>(len)) == 0) {
    return true;
  }
  return deallocate(off, len);
}

bool FileStore::deallocate(uint64_t off, uint64_t len) {
  if (len == 0) return true;
  if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                static_cast<off_t>(len)) == 0) {
    return true;
  }
  return write_zero_bytes(off, len);
}

bool FileStore::flush() { return fdatasync(fd_) == 0; }

bool FileStore::erase_all() {
  if (ftruncate(fd_, 0) != 0) return false;
  return ftruncate(fd_, static_cast<off_t>(size())) == 0;
}

uint64_t FileStore::allocated_bytes() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

Result<std::unique_ptr<NamespaceStore>> open_store(const std::string& backing, uint64_t size) {
  if (backing == "memory") return std::unique_ptr<NamespaceStore>(new MemoryStore(size));
  if (backing.rfind("file:", 0) == 0 && backing.size() > 5) {
    auto r = FileStore::open(backing.substr(5), size);
    if (!r) return Error{r.error()};
    return std::unique_ptr<NamespaceStore>(std::move(r).value());
  }
  return Error{"unknown backing '" + backing + "' (memory or file:<path>)"};
}

}  // namespace pollux::emu::nvme
