// Helpers for event-framework tests: a step-mode framework on a virtual clock.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "driver/env/clock.h"
#include "driver/event/framework.h"

namespace pollux::event::testing {

struct StepFramework {
  explicit StepFramework(const char* mask = "0x3") {
    FrameworkOptions o;
    o.core_mask = mask;
    o.step_mode = true;
    o.clock = &clock;
    auto r = Framework::create(o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    fw = std::move(r).value();
  }
  // Steps until nothing is busy (bounded, so a livelock fails instead of hanging).
  void settle(int max_steps = 10000) {
    for (int i = 0; i < max_steps; ++i)
      if (!fw->step()) return;
    ADD_FAILURE() << "framework still busy after " << max_steps << " steps";
  }
  env::VirtualClock clock{1'000'000'000};  // 1 tick = 1 ns
  std::unique_ptr<Framework> fw;
};

}  // namespace pollux::event::testing
