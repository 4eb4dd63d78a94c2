// Smoke test for //third_party:yaml_cpp: parse a document, read typed fields, emit and re-parse.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace {

constexpr char kDocument[] = R"(
controller:
  name: pollux0
  queues: 4
  depth: 128
  polled: true
namespaces:
  - {nsid: 1, lba_bytes: 512}
  - {nsid: 2, lba_bytes: 4096}
)";

TEST(YamlCppSmokeTest, ParsesAndReadsFields) {
  const YAML::Node root = YAML::Load(kDocument);
  const YAML::Node controller = root["controller"];
  EXPECT_EQ(controller["name"].as<std::string>(), "pollux0");
  EXPECT_EQ(controller["queues"].as<int>(), 4);
  EXPECT_EQ(controller["depth"].as<unsigned>(), 128u);
  EXPECT_TRUE(controller["polled"].as<bool>());
  EXPECT_FALSE(controller["missing"].IsDefined());

  const YAML::Node namespaces = root["namespaces"];
  ASSERT_TRUE(namespaces.IsSequence());
  ASSERT_EQ(namespaces.size(), 2u);
  EXPECT_EQ(namespaces[1]["nsid"].as<int>(), 2);
  EXPECT_EQ(namespaces[1]["lba_bytes"].as<int>(), 4096);

  EXPECT_THROW(controller["name"].as<int>(), YAML::BadConversion);

  // Emit and parse again: same content.
  const YAML::Node again = YAML::Load(YAML::Dump(root));
  EXPECT_EQ(again["controller"]["depth"].as<int>(), 128);
  EXPECT_EQ(again["namespaces"][0]["lba_bytes"].as<int>(), 512);
}

}  // namespace
