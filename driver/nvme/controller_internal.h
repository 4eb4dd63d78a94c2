// What controller.cc, controller_connect.cc, controller_fabrics.cc and controller_reset.cc
// share. Not for use outside nvme::Controller.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "driver/nvme/controller.h"

namespace pollux::nvme::detail {

// This process's host identifier (a random UUID, version 4), the same on every fabrics
// Connect: a target tells its hosts apart by it.
const std::array<uint8_t, 16>& host_id();

}  // namespace pollux::nvme::detail

namespace pollux::nvme {

// The asynchronous reset's state (controller_connect.cc): the step it is at, the admin
// command it waits for, the queues it connects.
struct Controller::ResetRun {
  enum class Step : uint8_t {
    kReadCc, kDisable, kWaitNotReady, kConnectAdmin, kEnable, kWaitReady, kSetQueues,
    kConnectIo, kAsyncEvents, kAsyncEventsNoticesOnly, kCheck
  };
  Step step = Step::kReadCc;
  bool started = false;  // the step's first turn has run
  // The admin command in flight (property access, Set Features).
  bool command_out = false, answered = false;
  sn::CompletionEntry cpl{};
  uint64_t command_deadline = 0;
  uint32_t cc = 0;
  InitState before = InitState::kReady;
  bool enabled = false;  // state_ moved to kEnable: a failure restores `before`
  std::vector<QueueConnect*> io;  // the queues' connect_states_
};

}  // namespace pollux::nvme
