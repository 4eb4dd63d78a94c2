// Smoke test for //third_party:spdlog: a logger writing to an ostream sink, with a pattern and
// level filtering.
#include <memory>
#include <sstream>

#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace {

TEST(SpdlogSmokeTest, LogsToOstreamSink) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("smoke", sink);
  logger.set_pattern("[%n] %l: %v");
  logger.set_level(spdlog::level::info);

  logger.debug("filtered {}", 1);
  logger.info("queue {} depth {}", 3, 128);
  logger.warn("{:.1f}% full", 87.5);
  logger.flush();

  EXPECT_EQ(out.str(), "[smoke] info: queue 3 depth 128\n[smoke] warning: 87.5% full\n");
}

}  // namespace
