// pollux-rnic's fault commands on an in-process cluster: each changes what it says and
// nothing else, a link taken down comes back by itself, and bad commands are refused with the
// field named — never a crash, whatever the text.
#include "emulator/rnic/control.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace pollux::emu::rnic {
namespace {

using json = nlohmann::json;

json reply(RnicControl& c, const std::string& line, uint64_t now = 0) {
  return json::parse(c.apply(line, now));
}

TEST(RnicControl, ALinkGoesDownAndComesBackByItself) {
  Cluster cluster(1);
  ASSERT_NE(cluster.add_nic(), nullptr);
  ASSERT_NE(cluster.add_nic(), nullptr);
  RnicControl c(cluster, {});
  const uint64_t port = cluster.nic(1).nic().port_address();
  EXPECT_EQ(reply(c, R"({"cmd":"link_down","nic":1,"duration_us":5})", 1000)["ok"], true);
  EXPECT_FALSE(cluster.wire().link_up(port));
  EXPECT_TRUE(cluster.wire().link_up(cluster.nic(0).nic().port_address()));
  c.tick(5999);
  EXPECT_FALSE(cluster.wire().link_up(port));
  c.tick(6000);
  EXPECT_TRUE(cluster.wire().link_up(port));
  EXPECT_EQ(reply(c, R"({"cmd":"link_down","nic":0,"duration_us":100})")["ok"], true);
  EXPECT_EQ(reply(c, R"({"cmd":"link_up","nic":0})")["ok"], true);
  EXPECT_TRUE(cluster.wire().link_up(cluster.nic(0).nic().port_address()));
}

TEST(RnicControl, ResetsStatsAndWireFaults) {
  Cluster cluster(1);
  ASSERT_NE(cluster.add_nic(), nullptr);
  RnicControl c(cluster, {});
  const json s = reply(c, R"({"cmd":"stats"})");
  ASSERT_EQ(s["ok"], true);
  ASSERT_EQ(s["nics"].size(), 1u);
  EXPECT_EQ(s["nics"][0]["enabled"], false);  // no driver has enabled it
  EXPECT_EQ(s["wire"]["sent"], 0u);
  EXPECT_EQ(reply(c, R"({"cmd":"nic_reset","nic":0})")["ok"], true);
  EXPECT_EQ(reply(c, R"({"cmd":"loss","rate":0.5})")["ok"], true);
  EXPECT_EQ(reply(c, R"({"cmd":"corrupt","rate":0})")["ok"], true);
  // No QP to fail: said so.
  const json q = reply(c, R"({"cmd":"qp_error","nic":0,"qpn":2})");
  EXPECT_EQ(q["ok"], false);
  EXPECT_NE(q["error"].get<std::string>().find("qpn: no QP 2"), std::string::npos);
}

TEST(RnicControl, BadCommandsNameTheField) {
  Cluster cluster(1);
  ASSERT_NE(cluster.add_nic(), nullptr);
  RnicControl c(cluster, {});
  auto error = [&](const std::string& line) {
    const json r = reply(c, line);
    EXPECT_EQ(r["ok"], false) << line;
    return r.value("error", std::string());
  };
  EXPECT_NE(error("nonsense").find("not JSON"), std::string::npos);
  EXPECT_NE(error(R"({"cmd":"explode"})").find("cmd: 'explode'"), std::string::npos);
  EXPECT_NE(error(R"({"cmd":"link_down","nic":1,"duration_us":5})").find("nic:"), std::string::npos);
  EXPECT_NE(error(R"({"cmd":"link_down","nic":0})").find("duration_us: required"),
            std::string::npos);
  EXPECT_NE(error(R"({"cmd":"link_down","nic":0,"duration_us":0})").find("duration_us"),
            std::string::npos);
  EXPECT_NE(error(R"({"cmd":"loss","rate":1.5})").find("rate:"), std::string::npos);
  EXPECT_NE(error(R"({"cmd":"loss","rate":0.1,"for":3})").find("for: unknown field"),
            std::string::npos);
  EXPECT_NE(error(R"({"cmd":"qp_error","nic":0,"qpn":-1})").find("qpn:"), std::string::npos);
  EXPECT_NE(error(R"([1,2])").find("cmd:"), std::string::npos);
  // Random bytes and mangled commands: a reply every time, never a throw.
  std::mt19937_64 rng(7);
  const std::string base = R"({"cmd":"link_down","nic":0,"duration_us":5})";
  for (int i = 0; i < 2000; ++i) {
    std::string s = base;
    for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    const std::string r = c.apply(s, 0);
    const json parsed = json::parse(r, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << r;
    ASSERT_TRUE(parsed.contains("ok")) << r;
  }
}

}  // namespace
}  // namespace pollux::emu::rnic
