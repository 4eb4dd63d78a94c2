// Smoke test for //third_party:fmt: compile-time checked and runtime format strings.
#include <cstdint>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gtest/gtest.h"

namespace {

TEST(FmtSmokeTest, Formats) {
  EXPECT_EQ(fmt::format("{}:{:04x}", "nsid", 0x2a), "nsid:002a");
  EXPECT_EQ(fmt::format("{:>8.3f}|", 3.14159), "   3.142|");
  EXPECT_EQ(fmt::format("{}", std::vector<int>{1, 2, 3}), "[1, 2, 3]");
  EXPECT_EQ(fmt::format("{lba}+{n}", fmt::arg("lba", 4096), fmt::arg("n", 8)), "4096+8");
  EXPECT_EQ(fmt::to_string(UINT64_MAX), "18446744073709551615");

  // Runtime format strings are checked at run time.
  const std::string spec = "{:d}";
  EXPECT_EQ(fmt::format(fmt::runtime(spec), 7), "7");
  EXPECT_THROW(static_cast<void>(fmt::format(fmt::runtime("{:d}"), "text")), fmt::format_error);
}

}  // namespace
