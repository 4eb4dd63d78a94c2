// The exporter serves what its sources build, over real HTTP; histograms are cumulative in
// seconds; the event and queue-pair sources report the counters the stack keeps.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "driver/event/test_util.h"
#include "driver/metrics/event_source.h"
#include "driver/metrics/exporter.h"
#include "driver/metrics/nvme_source.h"
#include "driver/nvme/scripted_device.h"

namespace pollux::metrics {
namespace {

// One HTTP/1.0 GET on loopback; the whole response.
std::string http_get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Exporter, ServesWhatTheSourcesBuildOverHttp) {
  auto e = Exporter::start("127.0.0.1:0");
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_GT(e.value()->port(), 0);
  EXPECT_EQ(e.value()->url(), "http://127.0.0.1:" + std::to_string(e.value()->port()) + "/metrics");
  int scrapes = 0;
  e.value()->add_source([&scrapes](Builder& b) {
    ++scrapes;
    b.counter("pollux_test_events_total", "Events", {{"kind", "a"}}, 3);
    b.counter("pollux_test_events_total", "Events", {{"kind", "b"}}, 4);
    b.gauge("pollux_test_level", "Level", {}, 2.5);
  });
  const std::string body = http_get(e.value()->port(), "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_TRUE(has_line(body, "pollux_test_events_total{kind=\"a\"} 3")) << body;
  EXPECT_TRUE(has_line(body, "pollux_test_events_total{kind=\"b\"} 4")) << body;
  EXPECT_TRUE(has_line(body, "# TYPE pollux_test_events_total counter")) << body;
  EXPECT_TRUE(has_line(body, "pollux_test_level 2.5")) << body;
  EXPECT_EQ(scrapes, 1);
  // Every endpoint names its program and when it started (pollux-top's header).
  EXPECT_TRUE(has_line(body, "pollux_process_info{program=\"metrics_test\"} 1")) << body;
  const auto at = body.find("\nprocess_start_time_seconds ");
  ASSERT_NE(at, std::string::npos) << body;
  const double start = std::stod(body.substr(at + 28));
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
}

TEST(Exporter, RefusesABadAddress) {
  auto e = Exporter::start("9464");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("host:port"), std::string::npos);
}

TEST(Builder, HistogramIsCumulativeInSeconds) {
  env::LatencyHistogram h;
  h.record(800);        // 0.8 us
  h.record(30'000);     // 30 us
  h.record(2'000'000);  // 2 ms
  Builder b;
  b.histogram("pollux_test_latency_seconds", "Latency", {}, h, 1e-9, {1e-6, 50e-6, 1e-3, 10e-3});
  auto f = b.take();
  ASSERT_EQ(f.size(), 1u);
  const auto& hist = f[0].metric.at(0).histogram;
  EXPECT_EQ(hist.sample_count, 3u);
  EXPECT_NEAR(hist.sample_sum, 800e-9 + 30e-6 + 2e-3, 1e-9);
  ASSERT_EQ(hist.bucket.size(), 5u);
  EXPECT_EQ(hist.bucket[0].cumulative_count, 1u);  // <= 1 us
  EXPECT_EQ(hist.bucket[1].cumulative_count, 2u);  // <= 50 us
  EXPECT_EQ(hist.bucket[2].cumulative_count, 2u);  // <= 1 ms
  EXPECT_EQ(hist.bucket[3].cumulative_count, 3u);  // <= 10 ms
  EXPECT_EQ(hist.bucket[4].cumulative_count, 3u);  // +Inf
}

TEST(EventSource, ReportsPollerRunsAndBusyTime) {
  event::testing::StepFramework sf("0x1");
  event::Thread* t = sf.fw->create_thread("app", 0);
  ASSERT_NE(t, nullptr);
  int n = 0;
  event::Poller* p = t->register_poller(
      [](void* c) {
        auto* k = static_cast<int*>(c);
        return ++*k % 2 ? event::PollStatus::kBusy : event::PollStatus::kIdle;
      },
      &n, 0, "every_other");
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 10; ++i) {
    sf.fw->step();
    sf.clock.advance(1000);
  }
  Exporter e;
  e.add_source(event_source(*sf.fw));
  const std::string text = e.render();
  EXPECT_TRUE(has_line(text, "pollux_poller_runs_total{reactor=\"0\",thread=\"app\",poller=\"every_other\"} 10"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_poller_busy_runs_total{reactor=\"0\",thread=\"app\",poller=\"every_other\"} 5"))
      << text;
  EXPECT_NE(text.find("pollux_reactor_iterations_total{reactor=\"0\",core=\"0\"} 10"), std::string::npos)
      << text;
  EXPECT_TRUE(has_line(text, "pollux_thread_info{reactor=\"0\",thread=\"app\",cpumask=\"0x1\"} 1"))
      << text;
  t->unregister_poller(p);
  t->exit();
  sf.settle();
}

using QpairMetrics = nvme::testing::Harness;

TEST_F(QpairMetrics, CountersPerQpairAndRetiredIntoTheController) {
  QpairRegistry reg;
  Exporter e;
  e.add_source(reg.source());
  auto qp = make();
  reg.add(qp.get(), "nvme0");
  nvme::testing::Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 8, nvme::testing::Done::cb, &d), 0);
  ASSERT_EQ(qp->read(ns, buf(4096), 8, 8, nvme::testing::Done::cb, &d), 0);
  qp->flush_doorbell();
  post(fetch().cid);
  qp->process_completions();
  std::string text = e.render();
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_submitted_total{controller=\"nvme0\",qid=\"1\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_completed_total{controller=\"nvme0\",qid=\"1\"} 1"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_outstanding{controller=\"nvme0\",qid=\"1\"} 1"))
      << text;
  post(fetch().cid, /*status=*/0x0002 << 1);  // an error status
  qp->process_completions();
  reg.remove(qp.get());
  qp.reset();
  text = e.render();
  EXPECT_EQ(text.find("pollux_nvme_qpair_submitted_total"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_controller_io_completed_total{controller=\"nvme0\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_controller_io_errors_total{controller=\"nvme0\"} 1"))
      << text;
  EXPECT_TRUE(has_line(
      text, "pollux_nvme_controller_io_errors_by_type_total{controller=\"nvme0\",type=\"generic\"} 1"))
      << text;
  EXPECT_TRUE(has_line(
      text, "pollux_nvme_controller_io_errors_by_type_total{controller=\"nvme0\",type=\"media\"} 0"))
      << text;
}

TEST_F(QpairMetrics, LatencyHistogramInPowerOfTwoBucketsWhenTracked) {
  QpairRegistry reg;
  Exporter e;
  e.add_source(reg.source());
  nvme::QpairOptions o;
  o.track_latency = true;
  auto qp = make(o);
  reg.add(qp.get(), "nvme0");
  nvme::testing::Done d;
  ASSERT_EQ(qp->read(ns, buf(), 0, 8, nvme::testing::Done::cb, &d), 0);
  clock.advance(1'000'000);  // before the doorbell: not the device's time, not counted
  qp->flush_doorbell();
  clock.advance(3000);  // 3 us: in the bucket below 4096 ns
  post(fetch().cid);
  qp->process_completions();
  ASSERT_EQ(qp->read(ns, buf(), 0, 8, nvme::testing::Done::cb, &d), 0);
  qp->flush_doorbell();
  clock.advance(100'000);  // 100 us: below 131072 ns
  post(fetch().cid);
  qp->process_completions();
  const std::string text = e.render();
  const std::string l = "{controller=\"nvme0\",qid=\"1\",";
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_latency_seconds_count{controller=\"nvme0\",qid=\"1\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_latency_seconds_bucket" + l + "le=\"2.048e-06\"} 0"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_latency_seconds_bucket" + l + "le=\"4.096e-06\"} 1"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_latency_seconds_bucket" + l + "le=\"0.000131072\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "pollux_nvme_qpair_latency_seconds_sum{controller=\"nvme0\",qid=\"1\"} 0.000103"))
      << text;
  reg.remove(qp.get());
  qp.reset();
  EXPECT_TRUE(has_line(e.render(), "pollux_nvme_controller_io_latency_seconds_count{controller=\"nvme0\"} 2"))
      << e.render();
}

}  // namespace
}  // namespace pollux::metrics
