#include "common/cli.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace pollux {
namespace {

// Runs cli::parse on `args` (after a program name) with a few typical options.
struct Parsed {
  std::optional<int> rc;
  uint64_t seed = 0;
  uint32_t qd = 1;
  double seconds = 1;
  std::string err;
};

Parsed parse(std::vector<std::string> args) {
  Parsed p;
  CLI::App app{"test"};
  app.add_option("--seed", p.seed);
  app.add_option("-q", p.qd)->check(CLI::Range(1, 64));
  app.add_option("-t", p.seconds)->check(CLI::PositiveNumber);
  CLI::App* sub = app.add_subcommand("sub");
  sub->add_option("--seed", p.seed);
  args.insert(args.begin(), "/some/dir/prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  p.rc = cli::parse(app, static_cast<int>(argv.size()), argv.data());
  p.err = testing::internal::GetCapturedStderr();
  return p;
}

TEST(Cli, GoodInputCarriesOn) {
  Parsed p = parse({"--seed", "18446744073709551615", "-q", "8", "-t", "0.5"});
  EXPECT_FALSE(p.rc.has_value());
  EXPECT_EQ(p.seed, UINT64_MAX);
  EXPECT_EQ(p.qd, 8u);
  EXPECT_EQ(p.seconds, 0.5);
  EXPECT_FALSE(parse({"sub", "--seed", "0x10"}).rc.has_value());
}

TEST(Cli, ErrorsExit2WithOneLineNamingTheProgram) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"-q", "abc"}, {"-q", "0"}, {"-t", "-1"}, {"extra"}}) {
    Parsed p = parse(args);
    ASSERT_TRUE(p.rc.has_value()) << args[0];
    EXPECT_EQ(*p.rc, 2) << args[0];
    EXPECT_EQ(p.err.rfind("prog: ", 0), 0u) << p.err;
    EXPECT_EQ(p.err.find('\n'), p.err.size() - 1) << p.err;
  }
}

TEST(Cli, UnsignedOptionsRefuseSignsAndOverflowInsteadOfWrapping) {
  for (const char* v : {"-1", " -5", "18446744073709551616", "99999999999999999999999"}) {
    Parsed p = parse({"--seed", v});
    ASSERT_TRUE(p.rc.has_value()) << v;
    EXPECT_EQ(*p.rc, 2) << v;
    EXPECT_NE(p.err.find("--seed"), std::string::npos) << p.err;
  }
  Parsed sub = parse({"sub", "--seed", "-1"});  // subcommands too
  ASSERT_TRUE(sub.rc.has_value());
  EXPECT_EQ(*sub.rc, 2);
}

TEST(Cli, FloatingPointOptionsRefuseNanAndInfinities) {
  for (const char* v : {"nan", "inf", "-inf", "infinity", "1e999"}) {
    Parsed p = parse({"-t", v});
    ASSERT_TRUE(p.rc.has_value()) << v;
    EXPECT_EQ(*p.rc, 2) << v;
  }
}

TEST(Cli, HelpExits0) {
  testing::internal::CaptureStdout();
  Parsed p = parse({"--help"});
  (void)testing::internal::GetCapturedStdout();
  ASSERT_TRUE(p.rc.has_value());
  EXPECT_EQ(*p.rc, 0);
}

}  // namespace
}  // namespace pollux
