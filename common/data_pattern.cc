#include "common/data_pattern.h"

#include <cstring>

namespace pollux::data_pattern {
namespace {

inline uint64_t seed(uint64_t lba, uint64_t gen) {
  return lba * 0x9e3779b97f4a7c15ull ^ gen;
}

inline uint64_t next(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

}  // namespace

void fill(uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t block_size, uint64_t gen) {
  for (uint32_t b = 0; b < blocks; ++b) {
    uint8_t* blk = buf + std::size_t{b} * block_size;
    uint64_t x = seed(lba + b, gen);
    const uint64_t head[2] = {lba + b, gen};
    std::memcpy(blk, head, sizeof head);
    for (uint32_t i = 2; i < block_size / 8; ++i) {
      const uint64_t w = next(x);
      std::memcpy(blk + size_t{i} * 8, &w, 8);
    }
  }
}

bool matches(const uint8_t* block, uint64_t lba, uint32_t block_size, uint64_t gen) {
  uint64_t w;
  std::memcpy(&w, block, 8);
  if (w != lba) return false;
  std::memcpy(&w, block + 8, 8);
  if (w != gen) return false;
  uint64_t x = seed(lba, gen);
  for (uint32_t i = 2; i < block_size / 8; ++i) {
    std::memcpy(&w, block + size_t{i} * 8, 8);
    if (w != next(x)) return false;
  }
  return true;
}

uint64_t first_stream_word(uint64_t lba, uint64_t gen) {
  uint64_t x = seed(lba, gen);
  return next(x);
}

}  // namespace pollux::data_pattern
