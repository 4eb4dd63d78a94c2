// PosixNetwork: the kernel's TCP behind the seam — connect, accept, bytes both ways, the
// readiness group, end of stream and a refused connect.
#include "fabric/net/posix.h"

#include <gtest/gtest.h>

#include <cstring>

namespace pollux::fabric::net {
namespace {

TEST(PosixNetwork, BytesBothWaysReadinessAndEndOfStream) {
  Network& net = posix_network();
  auto l = net.listen("ipv4", "127.0.0.1", "0");
  ASSERT_TRUE(l.ok()) << l.error().message;
  auto c = net.connect("127.0.0.1", std::to_string(l.value()->port()));
  ASSERT_TRUE(c.ok()) << c.error().message;
  Socket& client = *c.value();
  const uint64_t deadline = net.now_ns() + 5'000'000'000;
  int err = 0;
  while (!client.connected(&err) && net.now_ns() < deadline) {
    ASSERT_EQ(err, 0);
    client.wait(true, deadline);
  }
  std::unique_ptr<Socket> server;
  while (!server && net.now_ns() < deadline) server = l.value()->accept();
  ASSERT_NE(server, nullptr);
  auto group = net.readiness_group();
  int ctx = 0;
  group->add(*server, &ctx);
  void* ready[4];
  EXPECT_EQ(group->poll(ready, 4), 0);
  const char msg[] = "hello";
  const iovec v{const_cast<char*>(msg), sizeof msg};
  ASSERT_EQ(client.send(&v, 1), static_cast<ssize_t>(sizeof msg));
  int n = 0;
  while ((n = group->poll(ready, 4)) == 0 && net.now_ns() < deadline) server->wait(false, deadline);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(ready[0], &ctx);
  char buf[16] = {};
  ASSERT_EQ(server->recv(buf, sizeof buf), static_cast<ssize_t>(sizeof msg));
  EXPECT_STREQ(buf, "hello");
  EXPECT_EQ(server->recv(buf, sizeof buf), kAgain);
  group->remove(*server);
  c.value().reset();
  ssize_t r = kAgain;
  while ((r = server->recv(buf, sizeof buf)) == kAgain && net.now_ns() < deadline)
    server->wait(false, deadline);
  EXPECT_EQ(r, kEof);
}

// send_more may leave a partial segment in the kernel; a push (or a plain send) sends it.
TEST(PosixNetwork, WhatSendMoreHeldLeavesOnPushOrSend) {
  Network& net = posix_network();
  auto l = net.listen("ipv4", "127.0.0.1", "0");
  ASSERT_TRUE(l.ok()) << l.error().message;
  auto c = net.connect("127.0.0.1", std::to_string(l.value()->port()));
  ASSERT_TRUE(c.ok()) << c.error().message;
  Socket& client = *c.value();
  const uint64_t deadline = net.now_ns() + 5'000'000'000;
  int err = 0;
  while (!client.connected(&err) && net.now_ns() < deadline) client.wait(true, deadline);
  std::unique_ptr<Socket> server;
  while (!server && net.now_ns() < deadline) server = l.value()->accept();
  ASSERT_NE(server, nullptr);
  auto expect_arrives = [&](const char* what) {
    char buf[16] = {};
    std::size_t got = 0;
    while (got < 4 && net.now_ns() < deadline) {
      const ssize_t r = client.recv(buf + got, sizeof buf - got);
      ASSERT_GE(r, 0);
      if (r == kAgain) client.wait(false, deadline);
      got += static_cast<std::size_t>(r);
    }
    ASSERT_EQ(got, 4u);
    EXPECT_STREQ(buf, what);
  };
  char a[] = "held", b[] = "more", d[] = "sent";
  iovec v{a, 4};
  ASSERT_EQ(server->send_more(&v, 1), 4);
  server->push();
  expect_arrives("held");
  v = iovec{b, 2};
  ASSERT_EQ(server->send_more(&v, 1), 2);
  v = iovec{b + 2, 2};
  ASSERT_EQ(server->send(&v, 1), 2);
  expect_arrives("more");
  v = iovec{d, 4};
  ASSERT_EQ(server->send(&v, 1), 4);
  expect_arrives("sent");
}

TEST(PosixNetwork, ARefusedConnectIsReported) {
  Network& net = posix_network();
  auto l = net.listen("ipv4", "127.0.0.1", "0");
  ASSERT_TRUE(l.ok());
  const std::string port = std::to_string(l.value()->port());
  l.value().reset();  // nobody listens there any more
  auto c = net.connect("127.0.0.1", port);
  if (!c.ok()) return;  // refused at once: fine too
  const uint64_t deadline = net.now_ns() + 5'000'000'000;
  int err = 0;
  while (!c.value()->connected(&err) && err == 0 && net.now_ns() < deadline)
    c.value()->wait(true, deadline);
  EXPECT_EQ(err, ECONNREFUSED);
}

}  // namespace
}  // namespace pollux::fabric::net
