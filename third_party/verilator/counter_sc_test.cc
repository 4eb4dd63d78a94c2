// Smoke test for verilate(sc = True): the Verilated counter.sv as a SystemC module, clocked by an
// sc_clock. libsystemc.so owns main() and calls sc_main() below, which runs the tests.
// SystemC allows one elaboration per process, so this binary holds one design and one test.
#include <cstdint>

// Verilator headers before <systemc>.
#include "Vcounter.h"
#include "verilated.h"
// (A comment line, so include sorting cannot move <systemc> above them.)
#include <systemc>

#include "gtest/gtest.h"

namespace {

using sc_core::SC_NS;

TEST(CounterScTest, CountsSystemCClockEdges) {
  sc_core::sc_clock clk("clk", 10, SC_NS);  // Rising edges at 0, 10, 20, ... ns.
  sc_core::sc_signal<bool> rst("rst");
  sc_core::sc_signal<bool> en("en");
  sc_core::sc_signal<uint32_t> count("count");

  Vcounter dut("dut");
  dut.clk(clk);
  dut.rst(rst);
  dut.en(en);
  dut.count(count);

  rst.write(true);
  en.write(true);
  sc_core::sc_start(25, SC_NS);  // Edges at 0, 10, 20 ns: held in reset.
  EXPECT_EQ(count.read(), 0u);

  rst.write(false);
  sc_core::sc_start(100, SC_NS);  // Edges at 30 .. 120 ns: ten counts.
  EXPECT_EQ(count.read(), 10u);

  en.write(false);
  sc_core::sc_start(50, SC_NS);  // Disabled: holds.
  EXPECT_EQ(count.read(), 10u);

  rst.write(true);
  sc_core::sc_start(10, SC_NS);
  EXPECT_EQ(count.read(), 0u);
  EXPECT_EQ(sc_core::sc_time_stamp(), sc_core::sc_time(185, SC_NS));
}

}  // namespace

int sc_main(int argc, char* argv[]) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
