#include "driver/env/pattern.h"

#include <gtest/gtest.h>

#include <vector>

namespace pollux::env {
namespace {

TEST(Pattern, DetectsMisdirectedStaleAndTornBlocks) {
  std::vector<uint8_t> buf(4 * 512);
  fill_pattern(buf.data(), 100, 4, 512, 7);
  std::string why;
  EXPECT_TRUE(check_pattern(buf.data(), 100, 4, 512, 7, &why));
  EXPECT_FALSE(check_pattern(buf.data(), 101, 4, 512, 7, &why));  // misdirected
  EXPECT_NE(why.find("LBA 101"), std::string::npos);
  EXPECT_FALSE(check_pattern(buf.data(), 100, 4, 512, 8, &why));  // stale generation
  EXPECT_NE(why.find("gen 7"), std::string::npos);
  buf[3 * 512 + 300] ^= 1;                                         // torn inside block 103
  EXPECT_FALSE(check_pattern(buf.data(), 100, 4, 512, 7, &why));
  EXPECT_NE(why.find("LBA 103"), std::string::npos);
  EXPECT_NE(why.find("torn"), std::string::npos);
}

TEST(Pattern, APoisonedBufferThatNoDataReachedIsNamed) {
  std::vector<uint8_t> buf(2 * 512);
  poison(buf.data(), buf.size());
  EXPECT_TRUE(is_poison(buf.data(), 512));
  std::string why;
  EXPECT_FALSE(check_pattern(buf.data(), 0xdbdbdbdbdbdbdbdbull, 2, 512, 0xdbdbdbdbdbdbdbdbull, &why))
      << "the poison matches no pattern, even one with its own LBA and generation";
  EXPECT_FALSE(check_pattern(buf.data(), 5, 2, 512, 9, &why));
  EXPECT_NE(why.find("no data transferred"), std::string::npos) << why;
  EXPECT_FALSE(is_poison(std::vector<uint8_t>(512, 0).data(), 512)) << "zeroes are data";
  fill_pattern(buf.data(), 5, 1, 512, 9);  // the first block arrived, the second did not
  EXPECT_FALSE(check_pattern(buf.data(), 5, 2, 512, 9, &why));
  EXPECT_NE(why.find("LBA 6: no data"), std::string::npos) << why;
}

}  // namespace
}  // namespace pollux::env
