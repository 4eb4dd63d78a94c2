#include "emulator/nvme/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace pollux::emu::nvme {
namespace {

std::string tmpfile(const std::string& name, const std::string& text) {
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(d ? d : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Config, ExampleFileLoads) {
  auto r = load_config_file("emulator/nvme/examples/default.yaml");
  ASSERT_TRUE(r) << r.error();
  const ControllerConfig& c = r.value();
  ASSERT_EQ(c.namespaces.size(), 2u);
  EXPECT_EQ(c.namespaces[0].size_bytes, 1ull << 30);
  EXPECT_EQ(c.namespaces[0].lba_size, 512u);
  EXPECT_EQ(c.namespaces[1].size_bytes, 1ull << 30);
  EXPECT_EQ(c.namespaces[1].lba_size, 4096u);
  EXPECT_EQ(c.namespaces[1].backing, "memory");
  EXPECT_EQ(c.serial, "POLLUX00000001");
  EXPECT_EQ(c.firmware, "0.1");
  EXPECT_EQ(c.max_queue_entries, 1024u);
  EXPECT_EQ(c.mdts, 5u);
  EXPECT_TRUE(c.volatile_write_cache);
}

TEST(Config, AllFieldsAndSizeForms) {
  auto r = parse_config(R"(
controller:
  serial: S1
  model: M
  firmware: F
  max_queue_entries: 64
  max_io_queue_pairs: 4
  mdts: 0
  doorbell_stride: 3
  volatile_write_cache: false
  ready_delay_polls: 7
namespaces:
  - {size_bytes: 1048576}
  - {blocks: 100, lba_size: 4096, backing: "file:/tmp/x.img"}
  - {size: 64KiB}
)");
  ASSERT_TRUE(r) << r.error();
  const ControllerConfig& c = r.value();
  EXPECT_EQ(c.serial, "S1");
  EXPECT_EQ(c.max_queue_entries, 64u);
  EXPECT_EQ(c.max_io_queue_pairs, 4u);
  EXPECT_EQ(c.mdts, 0u);
  EXPECT_EQ(c.doorbell_stride, 3u);
  EXPECT_FALSE(c.volatile_write_cache);
  EXPECT_EQ(c.ready_delay_polls, 7u);
  EXPECT_EQ(c.namespaces[0].size_bytes, 1048576u);
  EXPECT_EQ(c.namespaces[0].lba_size, 512u);
  EXPECT_EQ(c.namespaces[1].size_bytes, 409600u);
  EXPECT_EQ(c.namespaces[1].backing, "file:/tmp/x.img");
  EXPECT_EQ(c.namespaces[2].size_bytes, 65536u);
  EXPECT_EQ(c.doorbell_bytes(), 5u * 2 * 32);
}

TEST(Config, ParseSize) {
  EXPECT_EQ(parse_size("4096").value(), 4096u);
  EXPECT_EQ(parse_size("1GiB").value(), 1ull << 30);
  EXPECT_EQ(parse_size("2T").value(), 2ull << 40);
  EXPECT_EQ(parse_size("512M").value(), 512ull << 20);
  EXPECT_FALSE(parse_size("1XB"));
  EXPECT_FALSE(parse_size("GiB"));
  EXPECT_FALSE(parse_size("0"));
  EXPECT_FALSE(parse_size("99999999999999999999"));
  EXPECT_FALSE(parse_size("17000000000TiB"));
}

struct Bad {
  const char* yaml;
  const char* expect_in_error;
};

class BadConfig : public ::testing::TestWithParam<Bad> {};

TEST_P(BadConfig, ErrorNamesTheField) {
  auto r = parse_config(GetParam().yaml);
  ASSERT_FALSE(r) << GetParam().yaml;
  EXPECT_NE(r.error().find(GetParam().expect_in_error), std::string::npos) << r.error();
}

INSTANTIATE_TEST_SUITE_P(
    All, BadConfig,
    ::testing::Values(
        Bad{"controller: [1, 2]\nnamespaces: [{size: 1MiB}]", "controller: expected a mapping"},
        Bad{"namespaces: [{size: 1MiB}]\nextra: 1", "extra: unknown key"},
        Bad{"controller: {mqes: 5}\nnamespaces: [{size: 1MiB}]", "controller.mqes: unknown key"},
        Bad{"controller: {max_queue_entries: 1}\nnamespaces: [{size: 1MiB}]",
            "controller.max_queue_entries"},
        Bad{"controller: {max_queue_entries: 70000}\nnamespaces: [{size: 1MiB}]",
            "controller.max_queue_entries"},
        Bad{"controller: {max_queue_entries: -3}\nnamespaces: [{size: 1MiB}]",
            "controller.max_queue_entries"},
        Bad{"controller: {max_io_queue_pairs: 0}\nnamespaces: [{size: 1MiB}]",
            "controller.max_io_queue_pairs"},
        Bad{"controller: {mdts: 16}\nnamespaces: [{size: 1MiB}]", "controller.mdts"},
        Bad{"controller: {mdts: abc}\nnamespaces: [{size: 1MiB}]", "controller.mdts"},
        Bad{"controller: {doorbell_stride: 20}\nnamespaces: [{size: 1MiB}]", "controller.doorbell_stride"},
        Bad{"controller: {doorbell_stride: 15, max_io_queue_pairs: 65535}\nnamespaces: [{size: 1MiB}]",
            "controller.doorbell_stride"},
        Bad{"controller: {volatile_write_cache: maybe}\nnamespaces: [{size: 1MiB}]",
            "controller.volatile_write_cache"},
        Bad{"controller: {serial: \"123456789012345678901\"}\nnamespaces: [{size: 1MiB}]",
            "controller.serial"},
        Bad{"controller: {model: \"\"}\nnamespaces: [{size: 1MiB}]", "controller.model"},
        Bad{"controller: {firmware: \"123456789\"}\nnamespaces: [{size: 1MiB}]", "controller.firmware"},
        Bad{"controller: {serial: [a]}\nnamespaces: [{size: 1MiB}]", "controller.serial"},
        Bad{"controller: {}", "namespaces: missing"},
        Bad{"namespaces: {size: 1MiB}", "namespaces: expected a list"},
        Bad{"namespaces: []", "namespaces: at least one"},
        Bad{"namespaces: [5]", "namespaces[0]: expected a mapping"},
        Bad{"namespaces: [{lba_size: 512}]", "namespaces[0].size"},
        Bad{"namespaces: [{size: 1MiB, blocks: 5}]", "namespaces[0].size"},
        Bad{"namespaces: [{size: 1MiB}, {size: 1ZiB}]", "namespaces[1].size"},
        Bad{"namespaces: [{size: 1000}]", "namespaces[0].size"},
        Bad{"namespaces: [{size: 1MiB, lba_size: 1024}]", "namespaces[0].lba_size"},
        Bad{"namespaces: [{size_bytes: 0}]", "namespaces[0].size_bytes"},
        Bad{"namespaces: [{blocks: 10, lba_size: 4096, backing: disk}]", "namespaces[0].backing"},
        Bad{"namespaces: [{size: 1MiB, backing: \"file:\"}]", "namespaces[0].backing"},
        Bad{"namespaces: [{size: 1MiB, colour: red}]", "namespaces[0].colour: unknown key"},
        Bad{"namespaces: [{size: 1MiB}\n", "YAML syntax error"},
        Bad{"- just\n- a list\n", "config: the document must be a mapping"}));

TEST(Config, FileErrors) {
  auto missing = load_config_file("/nonexistent/pollux.yaml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos);
  const std::string path = tmpfile("bad.yaml", "controller:\n  mdts: 99\nnamespaces: [{size: 1MiB}]\n");
  auto bad = load_config_file(path);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find(path), std::string::npos);
  EXPECT_NE(bad.error().find("controller.mdts"), std::string::npos);
  EXPECT_NE(bad.error().find("line 2"), std::string::npos) << bad.error();
}

TEST(Config, ValidateCatchesProgrammaticMistakes) {
  ControllerConfig c;
  EXPECT_NE(validate(c).error().find("namespaces"), std::string::npos);
  c.namespaces.push_back(NamespaceConfig{4096, 4096, "memory"});
  EXPECT_TRUE(validate(c));
  c.namespaces[0].size_bytes = 4097;
  EXPECT_NE(validate(c).error().find("namespaces[0].size"), std::string::npos);
}

}  // namespace
}  // namespace pollux::emu::nvme
