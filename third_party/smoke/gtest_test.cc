// Smoke test for //third_party:gtest_main: assertions pass and, more to the point, really fail.
#include <string>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace {

TEST(GtestSmokeTest, AssertionsCompareValues) {
  EXPECT_EQ(2 + 2, 4);
  EXPECT_STREQ("pollux", std::string("pollux").c_str());
  EXPECT_NEAR(0.1 + 0.2, 0.3, 1e-12);
}

TEST(GtestSmokeTest, FailingAssertionIsReported) {
  EXPECT_NONFATAL_FAILURE(EXPECT_EQ(1, 2), "Expected equality");
  EXPECT_FATAL_FAILURE(FAIL() << "boom", "boom");
}

class SquareTest : public ::testing::TestWithParam<int> {};

TEST_P(SquareTest, IsNonNegative) { EXPECT_GE(GetParam() * GetParam(), 0); }

INSTANTIATE_TEST_SUITE_P(Values, SquareTest, ::testing::Values(-3, 0, 7));

}  // namespace
