#include "emulator/timing/sparse_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace pollux::emu::timing {
namespace {

TEST(SparseMap, AgreesWithAReferenceMapThroughSetsOverwritesAndZeroes) {
  SparseMap m;
  std::unordered_map<uint64_t, uint32_t> ref;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 400000; ++i) {
    const uint64_t key = rng() % 6000;  // dense keys: long probe runs, many backward shifts
    const uint32_t v = rng() % 3 == 0 ? 0 : static_cast<uint32_t>(rng());
    m[key] = v;
    if (v) {
      ref[key] = v;
    } else {
      ref.erase(key);
    }
    const uint64_t probe = rng() % 6000;
    const auto it = ref.find(probe);
    ASSERT_EQ(m.get(probe), it == ref.end() ? 0u : it->second) << i;
    ASSERT_EQ(m.size(), ref.size());
  }
  for (const auto& [k, v] : ref) ASSERT_EQ(m[k], v);
}

TEST(SparseMap, MemoryFollowsTheKeysSetNotTheirRange) {
  SparseMap m;
  EXPECT_EQ(m.memory_bytes(), 0u);
  EXPECT_EQ(m.get(123), 0u);
  m[7] = 0;  // a zero stores nothing
  EXPECT_EQ(m.size(), 0u);
  std::mt19937_64 rng(2);
  constexpr uint64_t kLpns = uint64_t{1} << 30;  // a 4 TB drive's 4 KiB units
  for (int i = 0; i < 100000; ++i) m[rng() % kLpns] = static_cast<uint32_t>(i + 1);
  EXPECT_GT(m.size(), 99000u);
  EXPECT_LE(m.memory_bytes() / m.size(), 48u);  // 16 B slots, at least 3/8 full
}

}  // namespace
}  // namespace pollux::emu::timing
