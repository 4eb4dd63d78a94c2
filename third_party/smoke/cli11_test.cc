// Smoke test for //third_party:cli11: parse an argv into options and flags; reject bad input.
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"

namespace {

TEST(Cli11SmokeTest, ParsesArgv) {
  CLI::App app{"pollux smoke"};
  int queues = 1;
  std::string device;
  bool polled = false;
  std::vector<int> cores;
  app.add_option("-q,--queues", queues)->check(CLI::Range(1, 64));
  app.add_option("device", device)->required();
  app.add_flag("--polled", polled);
  app.add_option("--cores", cores)->delimiter(',');

  const char* argv[] = {"pollux", "--queues", "8", "--polled", "--cores=0,2,3", "0000:01:00.0"};
  app.parse(static_cast<int>(std::size(argv)), argv);

  EXPECT_EQ(queues, 8);
  EXPECT_TRUE(polled);
  EXPECT_EQ(device, "0000:01:00.0");
  EXPECT_EQ(cores, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(app.count("--queues"), 1u);

  const char* bad[] = {"pollux", "--queues", "99", "dev"};
  EXPECT_THROW(app.parse(static_cast<int>(std::size(bad)), bad), CLI::ValidationError);
}

}  // namespace
