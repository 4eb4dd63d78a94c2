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

}  // namespace
}  // namespace pollux::emu::nvme::testing
