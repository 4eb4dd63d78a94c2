// main() of the timed SSD's test binaries: libsystemc.so brings its own main(); this one wins
// and runs the tests.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
