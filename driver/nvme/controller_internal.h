// What controller.cc, controller_fabrics.cc and controller_reset.cc share. Not for use
// outside nvme::Controller.
#pragma once

#include <array>
#include <cstdint>

namespace pollux::nvme::detail {

// This process's host identifier (a random UUID, version 4), the same on every fabrics
// Connect: a target tells its hosts apart by it.
const std::array<uint8_t, 16>& host_id();

}  // namespace pollux::nvme::detail
