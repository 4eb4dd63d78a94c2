// MemoryStore (declared in namespace_store.h): block-sparse memory with pattern seeds.
#include <algorithm>
#include <cstring>
#include <new>

#include "common/data_pattern.h"
#include "emulator/nvme/host_stores.h"
#include "emulator/nvme/namespace_store.h"

namespace pollux::emu::nvme {
namespace {

constexpr size_t kBlock = MemoryStore::kChunkSize;
const uint8_t kZeroBlock[kBlock] = {};

uint64_t word(const uint8_t* p, size_t i) {
  uint64_t w;
  std::memcpy(&w, p + i * 8, 8);
  return w;
}

// Which pattern, if any, `block` is exactly. The stream word after the header rejects almost
// every other block at once; a candidate is then checked in full.
BlockTable::Kind pattern_of(const uint8_t* block, uint64_t* lba, uint64_t* gen) {
  *lba = word(block, 0);
  *gen = word(block, 1);
  if (word(block, 2) != data_pattern::first_stream_word(*lba, *gen)) return BlockTable::kBytes;
  if (word(block, 64) == *lba + 1 && word(block, 65) == *gen) {  // 512 B pattern blocks
    for (uint32_t i = 0; i < kBlock / 512; ++i) {
      if (!data_pattern::matches(block + size_t{i} * 512, *lba + i, 512, *gen)) {
        return BlockTable::kBytes;
      }
    }
    return BlockTable::kPattern512;
  }
  return data_pattern::matches(block, *lba, kBlock, *gen) ? BlockTable::kPattern4096
                                                          : BlockTable::kBytes;
}

void regenerate(const BlockTable::Slot& s, uint8_t* out) {
  if (s.kind() == BlockTable::kPattern512) {
    data_pattern::fill(out, s.a, kBlock / 512, 512, s.b);
  } else {
    data_pattern::fill(out, s.a, 1, kBlock, s.b);
  }
}

}  // namespace

MemoryStore::MemoryStore(uint64_t size) : NamespaceStore(size) {}

MemoryStore::~MemoryStore() {
  erase_all();
}

void MemoryStore::drop(BlockTable::Slot* s) {
  if (s->kind() == BlockTable::kBytes) {
    delete[] s->bytes();
    --byte_blocks_;
  }
  table_.erase(s);
}

void MemoryStore::materialise(uint64_t idx, uint8_t* out) const {
  const BlockTable::Slot* s = table_.find(idx);
  if (!s) {
    std::memset(out, 0, kBlock);
  } else if (s->kind() == BlockTable::kBytes) {
    std::memcpy(out, s->bytes(), kBlock);
  } else {
    regenerate(*s, out);
  }
}

bool MemoryStore::store_block(uint64_t idx, const uint8_t* data) {
  BlockTable::Slot* s = table_.find(idx);
  if (std::memcmp(data, kZeroBlock, kBlock) == 0) {
    if (s) drop(s);
    return true;
  }
  uint64_t lba, gen;
  const BlockTable::Kind kind = pattern_of(data, &lba, &gen);
  if (kind != BlockTable::kBytes) {
    if (s && s->kind() == BlockTable::kBytes) {
      delete[] s->bytes();
      --byte_blocks_;
    }
    if (s) {
      *s = BlockTable::Slot{(idx + 1) | static_cast<uint64_t>(kind) << BlockTable::kKindShift, lba,
                            gen};
      return true;
    }
    return table_.insert(idx, kind, lba, gen) != nullptr;
  }
  if (s && s->kind() == BlockTable::kBytes) {
    if (s->bytes() != data) std::memcpy(s->bytes(), data, kBlock);
    return true;
  }
  auto* bytes = new (std::nothrow) uint8_t[kBlock];
  if (!bytes) return false;
  std::memcpy(bytes, data, kBlock);
  const auto a = reinterpret_cast<uint64_t>(bytes);
  if (s) {
    *s = BlockTable::Slot{(idx + 1) | uint64_t{BlockTable::kBytes} << BlockTable::kKindShift, a, 0};
  } else if (!table_.insert(idx, BlockTable::kBytes, a, 0)) {
    delete[] bytes;
    return false;
  }
  ++byte_blocks_;
  return true;
}

bool MemoryStore::read(uint64_t off, void* dst, size_t len, bool to_host) {
  auto* out = static_cast<uint8_t*>(dst);
  while (len) {
    const uint64_t idx = off >> kChunkShift;
    const size_t in = off & (kBlock - 1);
    const size_t n = std::min(len, kBlock - in);
    const BlockTable::Slot* s = table_.find(idx);
    const bool stream = to_host && n == kBlock && host_stores::streamable(out, n) &&
                        !host_stores::recently_written(out);
    if (!s) {
      if (stream) {
        host_stores::zero(out, n);
      } else {
        std::memset(out, 0, n);
      }
    } else if (s->kind() == BlockTable::kBytes) {
      if (stream) {
        host_stores::copy(out, s->bytes(), n);
      } else {
        std::memcpy(out, s->bytes() + in, n);
      }
    } else if (n == kBlock) {
      regenerate(*s, out);
    } else {
      regenerate(*s, scratch_.get());
      std::memcpy(out, scratch_.get() + in, n);
    }
    out += n;
    off += n;
    len -= n;
  }
  return true;
}

bool MemoryStore::write(uint64_t off, const void* src, size_t len) {
  auto* in_p = static_cast<const uint8_t*>(src);
  while (len) {
    const uint64_t idx = off >> kChunkShift;
    const size_t in = off & (kBlock - 1);
    const size_t n = std::min(len, kBlock - in);
    if (n == kBlock) {
      if (!store_block(idx, in_p)) return false;
    } else {
      materialise(idx, scratch_.get());
      std::memcpy(scratch_.get() + in, in_p, n);
      if (!store_block(idx, scratch_.get())) return false;
    }
    in_p += n;
    off += n;
    len -= n;
  }
  return true;
}

bool MemoryStore::compare(uint64_t off, const void* src, size_t len, bool* equal) {
  auto* in_p = static_cast<const uint8_t*>(src);
  *equal = true;
  while (len) {
    const uint64_t idx = off >> kChunkShift;
    const size_t in = off & (kBlock - 1);
    const size_t n = std::min(len, kBlock - in);
    materialise(idx, scratch_.get());
    if (std::memcmp(scratch_.get() + in, in_p, n) != 0) {
      *equal = false;
      return true;
    }
    in_p += n;
    off += n;
    len -= n;
  }
  return true;
}

bool MemoryStore::deallocate(uint64_t off, uint64_t len) {
  while (len) {
    const uint64_t idx = off >> kChunkShift;
    const size_t in = off & (kBlock - 1);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, kBlock - in));
    if (BlockTable::Slot* s = table_.find(idx)) {
      if (n == kBlock) {
        drop(s);
      } else {
        materialise(idx, scratch_.get());
        std::memset(scratch_.get() + in, 0, n);
        if (!store_block(idx, scratch_.get())) return false;
      }
    }
    off += n;
    len -= n;
  }
  return true;
}

bool MemoryStore::write_zeroes(uint64_t off, uint64_t len) {
  return deallocate(off, len);
}

bool MemoryStore::erase_all() {
  table_.for_each([](const BlockTable::Slot& s) {
    if (s.kind() == BlockTable::kBytes) delete[] s.bytes();
  });
  table_.clear();
  byte_blocks_ = 0;
  return true;
}

}  // namespace pollux::emu::nvme
