#include "driver/env/pattern.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace pollux::env {
namespace {

inline uint64_t next(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

}  // namespace

void fill_pattern(uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t bs, uint64_t gen) {
  for (uint32_t b = 0; b < blocks; ++b) {
    auto* p = reinterpret_cast<uint64_t*>(buf + std::size_t{b} * bs);
    uint64_t x = (lba + b) * 0x9e3779b97f4a7c15ull ^ gen;
    p[0] = lba + b;
    p[1] = gen;
    for (uint32_t i = 2; i < bs / 8; ++i) p[i] = next(x);
  }
}

bool check_pattern(const uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t bs, uint64_t gen,
                   std::string* why) {
  for (uint32_t b = 0; b < blocks; ++b) {
    const auto* p = reinterpret_cast<const uint64_t*>(buf + std::size_t{b} * bs);
    uint64_t x = (lba + b) * 0x9e3779b97f4a7c15ull ^ gen;
    bool ok = p[0] == lba + b && p[1] == gen;
    for (uint32_t i = 2; ok && i < bs / 8; ++i) ok = p[i] == next(x);
    if (!ok && is_poison(buf + std::size_t{b} * bs, bs)) {
      if (why) *why = "LBA " + std::to_string(lba + b) +
                      ": no data transferred (the read buffer kept its poison)";
      return false;
    }
    if (!ok) {
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
  }
  return true;
}

namespace {
constexpr uint64_t kPoison = 0xdbdbdbdbdbdbdbdbull;
}  // namespace

void poison(uint8_t* buf, std::size_t bytes) { std::memset(buf, 0xdb, bytes); }

bool is_poison(const uint8_t* block, uint32_t bs) {
  const auto* p = reinterpret_cast<const uint64_t*>(block);
  for (uint32_t i = 0; i < bs / 8; ++i) {
    if (p[i] != kPoison) return false;
  }
  return true;
}

}  // namespace pollux::env
