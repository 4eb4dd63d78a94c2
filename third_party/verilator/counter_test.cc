// Smoke test for verilate(): clocks the Verilated counter.sv from C++ and checks its count.
#include <cstdint>
#include <memory>

#include "Vcounter.h"
#include "gtest/gtest.h"
#include "verilated.h"

namespace {

class CounterTest : public ::testing::Test {
 protected:
  // One full clock period: rising edge (state updates), then falling edge.
  void Tick() {
    dut_->clk = 1;
    dut_->eval();
    dut_->clk = 0;
    dut_->eval();
  }

  void Reset() {
    dut_->rst = 1;
    Tick();
    dut_->rst = 0;
  }

  std::unique_ptr<VerilatedContext> context_ = std::make_unique<VerilatedContext>();
  std::unique_ptr<Vcounter> dut_ = std::make_unique<Vcounter>(context_.get(), "dut");
};

TEST_F(CounterTest, CountsEnabledCyclesAndResets) {
  dut_->clk = 0;
  dut_->en = 0;
  dut_->eval();
  Reset();
  EXPECT_EQ(dut_->count, 0);

  dut_->en = 1;
  for (int i = 0; i < 10; ++i) Tick();
  EXPECT_EQ(dut_->count, 10);

  // Disabled: holds its value.
  dut_->en = 0;
  for (int i = 0; i < 5; ++i) Tick();
  EXPECT_EQ(dut_->count, 10);

  // Synchronous reset wins over enable.
  dut_->en = 1;
  Reset();
  EXPECT_EQ(dut_->count, 0);
  Tick();
  EXPECT_EQ(dut_->count, 1);
}

TEST_F(CounterTest, WrapsAroundAt256) {
  dut_->clk = 0;
  dut_->eval();
  Reset();
  dut_->en = 1;
  for (int i = 0; i < 300; ++i) Tick();
  EXPECT_EQ(dut_->count, 300 % 256);
}

}  // namespace
