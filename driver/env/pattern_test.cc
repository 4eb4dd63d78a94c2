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

}  // namespace
}  // namespace pollux::env
