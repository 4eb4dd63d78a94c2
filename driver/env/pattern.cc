#include "driver/env/pattern.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "common/data_pattern.h"

namespace pollux::env {

void fill_pattern(uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t bs, uint64_t gen) {
  data_pattern::fill(buf, lba, blocks, bs, gen);
}

bool check_pattern(const uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t bs, uint64_t gen,
                   std::string* why) {
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = buf + std::size_t{b} * bs;
    if (data_pattern::matches(blk, lba + b, bs, gen)) continue;
    if (is_poison(blk, bs)) {
      if (why)
        *why = "LBA " + std::to_string(lba + b) +
               ": no data transferred (the read buffer kept its poison)";
      return false;
    }
    const auto* p = reinterpret_cast<const uint64_t*>(blk);
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "LBA %llu: expected (lba %llu, gen %llu), found (lba %llu, gen %llu)%s",
                  static_cast<unsigned long long>(lba + b),
                  static_cast<unsigned long long>(lba + b), static_cast<unsigned long long>(gen),
                  static_cast<unsigned long long>(p[0]), static_cast<unsigned long long>(p[1]),
                  p[0] == lba + b && p[1] == gen ? " but torn data" : "");
    if (why) *why = msg;
    return false;
  }
  return true;
}

namespace {
constexpr uint64_t kPoison = 0xdbdbdbdbdbdbdbdbull;
}  // namespace

void poison(uint8_t* buf, std::size_t bytes) {
  std::memset(buf, 0xdb, bytes);
}

bool is_poison(const uint8_t* block, uint32_t bs) {
  const auto* p = reinterpret_cast<const uint64_t*>(block);
  for (uint32_t i = 0; i < bs / 8; ++i) {
    if (p[i] != kPoison) return false;
  }
  return true;
}

}  // namespace pollux::env
