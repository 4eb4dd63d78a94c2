// Fault commands as a control client sends them: whatever the bytes, the reply is one JSON
// object and the device lives on.
#include "emulator/nvme/fault_commands.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

// The reply as JSON (it must parse), or a test failure.
nlohmann::json reply(Controller& ctrl, const std::string& line) {
  std::string text;
  EXPECT_NO_THROW(text = apply_fault_command(ctrl, line)) << line;
  return nlohmann::json::parse(text);
}

TEST(FaultCommands, BytesThatAreNotUtf8GetAnErrorReply) {
  TestHost host;
  for (const std::string line : {"\xbd", "{\"cmd\":\"\xbd\"}", "{\"cmd\":\"fault\",\"action\":\"\xff\"}",
                                 "\xc3({\"cmd\":\"stats\"}"}) {
    const nlohmann::json r = reply(host.ctrl(), line);
    EXPECT_EQ(r["ok"], false) << r;
    EXPECT_TRUE(r["error"].is_string()) << r;
  }
  EXPECT_EQ(reply(host.ctrl(), R"({"cmd":"stats"})")["ok"], true);  // still serving
}

// The error of a command that must be refused (and add no rule), or a test failure.
std::string refusal(Controller& ctrl, const std::string& line) {
  const nlohmann::json r = reply(ctrl, line);
  EXPECT_EQ(r["ok"], false) << line;
  return r.value("error", "");
}

TEST(FaultCommands, TargetsOutsideTheControllerAreRefused) {
  TestHost host;  // namespace 1: 32768 blocks of 512; namespace 2: 4096 blocks of 4 KiB
  Controller& c = host.ctrl();
  EXPECT_EQ(refusal(c, R"({"cmd":"fault","action":"never_complete","nsid":4294967295})"),
            "nsid: no namespace 4294967295 (0: any)");
  EXPECT_EQ(refusal(c, R"({"cmd":"fault","action":"never_complete","nsid":4294967296})"),
            "nsid: at most 4294967295");  // it was truncated to 0: any namespace
  EXPECT_EQ(refusal(c, R"({"cmd":"fault","action":"delay","delay_us":18446744073709551615})"),
            "delay_us: at most 3600000000 (an hour)");  // x1000 wrapped
  EXPECT_EQ(refusal(c, R"({"cmd":"fault","action":"never_complete","nsid":2,"lba":[0,4096]})"),
            "lba: 4096 is beyond the namespace (4096 blocks)");
  EXPECT_EQ(refusal(c, R"({"cmd":"fault","action":"never_complete","lba":[5,32768]})"),
            "lba: 32768 is beyond the namespace (32768 blocks)");  // any: the largest
  EXPECT_EQ(refusal(c, R"({"cmd":"bad_block","nsid":1,"lba":1000000})"),
            "lba: 1000000 is beyond the namespace (32768 blocks)");
  EXPECT_TRUE(c.faults().empty());
  // What fits is taken.
  EXPECT_EQ(reply(c, R"({"cmd":"fault","action":"never_complete","nsid":2,"lba":[0,4095]})")["ok"],
            true);
  EXPECT_EQ(reply(c, R"({"cmd":"fault","action":"delay","delay_us":3600000000})")["ok"], true);
  EXPECT_EQ(reply(c, R"({"cmd":"bad_block","nsid":1,"lba":32767})")["ok"], true);
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
