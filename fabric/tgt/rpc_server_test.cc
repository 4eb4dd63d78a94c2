#include "fabric/tgt/rpc_server.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "driver/event/test_util.h"

namespace pollux::fabric::tgt {
namespace {

using json = nlohmann::json;

TEST(JsonFramer, AValueThatTricklesInIsScannedOnce) {
  std::string value = R"({"method":"x","params":{"s":"a}\"{[","list":[)";
  for (int i = 0; i < 2000; ++i) value += "[1,{\"k\":\"]\"}],";
  value += "0]}}";
  JsonFramer f;
  std::string got;
  for (std::size_t i = 0; i + 1 < value.size(); ++i) {
    got += value[i];
    ASSERT_EQ(f.next(got), 0u) << "complete after " << i + 1 << " of " << value.size() << " bytes";
  }
  got += value.back();
  EXPECT_EQ(f.next(got), value.size());
  // Each byte once: re-scanning what arrived before would be ~value.size()^2 / 2.
  EXPECT_EQ(f.bytes_scanned(), value.size());
}

TEST(JsonFramer, SplitsBackToBackValuesAndRefusesWhatIsNotOne) {
  const std::string two = " \n{\"a\":\"}\"}[{}]  ";
  JsonFramer f;
  std::string_view rest = two;
  const std::size_t first = f.next(rest);
  ASSERT_EQ(first, two.find("}\"}") + 3);  // the brace in the string does not end it
  rest.remove_prefix(first);
  const std::size_t second = f.next(rest);
  EXPECT_EQ(rest.substr(0, second), "[{}]");
  rest.remove_prefix(second);
  EXPECT_EQ(f.next(rest), 0u);  // only whitespace: nothing yet
  EXPECT_EQ(JsonFramer{}.next("  \"a string\""), std::string::npos);
  EXPECT_EQ(JsonFramer{}.next("{\"a\":1}{"), 7u);
}

// An in-process server on a step-mode framework in virtual time (its poller is timed).
class RpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    thread_ = w_.fw->create_thread("rpc", 0);
    on([&] {
      auto s = RpcServer::in_process();
      ASSERT_TRUE(s.ok());
      rpc_ = std::move(s).value();
      rpc_->add("echo", [](const json& params, RpcServer::Reply reply) { reply(params); });
      client_ = rpc_->connect_local();
    });
  }
  void TearDown() override {
    on([&] { rpc_.reset(); });
    w_.fw->stop(0);
    for (int i = 0; i < 10000 && !w_.fw->finished(); ++i) w_.fw->step();
  }
  template <typename F>
  void on(F f) {
    event::CurrentThreadScope scope(thread_);
    f();
  }
  // Lets the server's poller run once (it is timed: 1 ms).
  void poll() {
    w_.clock.advance(1'000'000);
    w_.settle();
  }
  void deliver(const std::string& bytes) {
    on([&] { rpc_->deliver_local(client_, bytes); });
  }
  std::string output() {
    std::string out;
    on([&] { out = rpc_->take_local_output(client_); });
    return out;
  }

  event::testing::StepFramework w_{"0x1"};
  event::Thread* thread_ = nullptr;
  std::unique_ptr<RpcServer> rpc_;
  uint64_t client_ = 0;
};

TEST_F(RpcServerTest, ARequestDeliveredAByteAtATimeIsAnsweredOnceWhole) {
  const std::string req = R"({"jsonrpc":"2.0","id":7,"method":"echo","params":{"s":"}{"}})";
  for (char ch : req) {
    EXPECT_EQ(output(), "") << "answered before the request was whole";
    deliver(std::string(1, ch));
    poll();
  }
  const json resp = json::parse(output());
  EXPECT_EQ(resp["id"], 7);
  EXPECT_EQ(resp["result"]["s"], "}{");
  poll();
  EXPECT_EQ(output(), "");
}

TEST_F(RpcServerTest, PipelinedRequestsAreAnsweredInOrder) {
  std::string many;
  for (int i = 0; i < 3000; ++i)
    many += json{{"jsonrpc", "2.0"}, {"id", i}, {"method", "echo"}, {"params", {{"i", i}}}}.dump();
  // The last one split across two deliveries.
  const std::size_t cut = many.size() - 5;
  deliver(many.substr(0, cut));
  poll();
  deliver(many.substr(cut));
  poll();
  const std::string out = output();
  std::size_t at = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::size_t nl = out.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << "only " << i << " answers";
    const json resp = json::parse(out.substr(at, nl - at));
    ASSERT_EQ(resp["id"], i);
    ASSERT_EQ(resp["result"]["i"], i);
    at = nl + 1;
  }
  EXPECT_EQ(at, out.size());
}

TEST_F(RpcServerTest, WhatIsNotAnObjectGetsAParseErrorAndTheClientIsClosed) {
  deliver(R"({"jsonrpc":"2.0","id":1,"method":"echo"} nonsense {"id":2})");
  poll();
  const std::string out = output();
  const std::size_t nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_EQ(json::parse(out.substr(0, nl))["id"], 1);
  const json err = json::parse(out.substr(nl + 1));
  EXPECT_EQ(err["error"]["code"], -32700);
  bool closing = false;
  on([&] { closing = rpc_->local_closing(client_); });
  EXPECT_TRUE(closing);
}

}  // namespace
}  // namespace pollux::fabric::tgt
