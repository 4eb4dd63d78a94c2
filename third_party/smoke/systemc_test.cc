// Smoke test for //third_party:systemc: an SC_MODULE whose SC_METHOD counts rising clock edges.
//
// libsystemc.so defines main() and calls sc_main() (below), which runs the tests; so this test
// links //third_party:gtest, not gtest_main. SystemC allows one elaboration per process: this
// binary builds one design, in one test.
#include <systemc>

#include "gtest/gtest.h"

namespace {

using sc_core::SC_NS;

SC_MODULE(EdgeCounter) {
  sc_core::sc_in<bool> clk{"clk"};
  sc_core::sc_out<int> count{"count"};
  int edges = 0;

  SC_CTOR(EdgeCounter) {
    SC_METHOD(OnRisingEdge);
    sensitive << clk.pos();
    dont_initialize();
  }

  void OnRisingEdge() { count.write(++edges); }
};

TEST(SystemcSmokeTest, MethodRunsOnEveryRisingEdge) {
  sc_core::sc_clock clk("clk", 10, SC_NS);  // Rising edges at 0, 10, 20, ... ns.
  sc_core::sc_signal<int> count("count");
  EdgeCounter counter("counter");
  counter.clk(clk);
  counter.count(count);

  sc_core::sc_start(95, SC_NS);  // Edges at 0 .. 90 ns.
  EXPECT_EQ(counter.edges, 10);
  EXPECT_EQ(count.read(), 10);
  EXPECT_EQ(sc_core::sc_time_stamp(), sc_core::sc_time(95, SC_NS));

  sc_core::sc_start(50, SC_NS);  // Edges at 100 .. 140 ns.
  EXPECT_EQ(counter.edges, 15);
  EXPECT_EQ(count.read(), 15);
  EXPECT_GT(sc_core::sc_delta_count(), 0u);
}

}  // namespace

int sc_main(int argc, char* argv[]) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
