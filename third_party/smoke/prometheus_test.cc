// Smoke test for //third_party:prometheus_cpp: a counter family in a Registry, serialised with
// TextSerializer, then scraped over HTTP from an Exposer bound to an ephemeral loopback port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace {

std::shared_ptr<prometheus::Registry> MakeRegistry() {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("pollux_smoke_commands_total")
                     .Help("Commands completed by the smoke test")
                     .Register(*registry);
  family.Add({{"queue", "0"}}).Increment(3);
  family.Add({{"queue", "1"}}).Increment();
  return registry;
}

// Minimal HTTP/1.0 GET against 127.0.0.1:port; returns the whole response ("" on error).
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response;
}

TEST(PrometheusSmokeTest, SerializesCounterFamily) {
  auto registry = MakeRegistry();
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("# TYPE pollux_smoke_commands_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("pollux_smoke_commands_total{queue=\"0\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("pollux_smoke_commands_total{queue=\"1\"} 1"), std::string::npos) << text;
}

// Note: ~Exposer takes about 2 s here (measured: stopping the civetweb server).
TEST(PrometheusSmokeTest, ExposerServesMetricsOverHttp) {
  auto registry = MakeRegistry();
  prometheus::Exposer exposer("127.0.0.1:0");  // Port 0: the kernel picks a free port.
  exposer.RegisterCollectable(registry);
  const std::vector<int> ports = exposer.GetListeningPorts();
  ASSERT_EQ(ports.size(), 1u);
  ASSERT_GT(ports[0], 0);

  const std::string response = HttpGet(ports[0], "/metrics");
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
  EXPECT_NE(response.find("pollux_smoke_commands_total{queue=\"0\"} 3"), std::string::npos)
      << response;
}

}  // namespace
