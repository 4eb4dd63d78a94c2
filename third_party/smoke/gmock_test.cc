// Smoke test for //third_party:gmock_main: a mock with expectations, actions and sequencing.
#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace {

using ::testing::_;
using ::testing::InSequence;
using ::testing::Return;

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;
  virtual int Read(uint64_t lba, uint32_t blocks) = 0;
  virtual void Flush() = 0;
};

class MockBlockDevice : public BlockDevice {
 public:
  MOCK_METHOD(int, Read, (uint64_t lba, uint32_t blocks), (override));
  MOCK_METHOD(void, Flush, (), (override));
};

// Code under test: reads `count` single blocks, then flushes; returns the sum of results.
int ReadAllThenFlush(BlockDevice& dev, uint64_t first, uint32_t count) {
  int total = 0;
  for (uint32_t i = 0; i < count; ++i) total += dev.Read(first + i, 1);
  dev.Flush();
  return total;
}

TEST(GmockSmokeTest, ExpectationsAndActions) {
  MockBlockDevice dev;
  {
    InSequence in_order;
    EXPECT_CALL(dev, Read(100, 1)).WillOnce(Return(5));
    EXPECT_CALL(dev, Read(101, 1)).WillOnce(Return(7));
    EXPECT_CALL(dev, Flush()).Times(1);
  }
  EXPECT_EQ(ReadAllThenFlush(dev, 100, 2), 12);
}

TEST(GmockSmokeTest, UnmetExpectationFails) {
  EXPECT_NONFATAL_FAILURE(
      {
        MockBlockDevice dev;
        EXPECT_CALL(dev, Read(_, _)).Times(2).WillRepeatedly(Return(0));
        dev.Read(0, 1);
      },  // Destroying the mock verifies: called once, expected twice.
      "Actual: called once");
}

}  // namespace
