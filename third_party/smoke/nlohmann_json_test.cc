// Smoke test for //third_party:nlohmann_json: parse, typed access, struct mapping, round trip.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

struct Namespace {
  uint32_t nsid = 0;
  uint64_t blocks = 0;
  std::string name;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Namespace, nsid, blocks, name)

TEST(NlohmannJsonSmokeTest, ParseDumpRoundTrip) {
  const std::string text = R"({"nsid": 3, "blocks": 8589934592, "name": "ns3", "tags": [1, 2]})";
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["nsid"].get<int>(), 3);
  EXPECT_EQ(j["blocks"].get<uint64_t>(), 8589934592ull);
  EXPECT_EQ(j["tags"].size(), 2u);

  const auto ns = j.get<Namespace>();
  EXPECT_EQ(ns.nsid, 3u);
  EXPECT_EQ(ns.name, "ns3");

  nlohmann::json back = ns;
  EXPECT_EQ(back.dump(), R"({"blocks":8589934592,"name":"ns3","nsid":3})");
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);

  // parse() is warn_unused_result, which a cast to void does not silence in GCC.
  nlohmann::json bad;
  EXPECT_THROW(bad = nlohmann::json::parse("{not json"), nlohmann::json::parse_error);
}

}  // namespace
