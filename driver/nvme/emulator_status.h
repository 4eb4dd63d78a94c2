// A Pollux emulator's log page C0h (spec::nvme::PolluxEmulatorStatus): whether its realtime
// model kept up with the wall clock. A tool that measured latency or IOPS against it says so
// when it did not: those figures are then the machine's, not the device profile's.
#pragma once

#include <optional>
#include <string>

#include "driver/nvme/controller.h"
#include "spec/nvme.h"

namespace pollux::nvme {

// Asked of vfio-user devices only (emulators); nullopt when the device does not answer it. A
// synchronous admin command (Controller::admin_sync): set-up and end-of-run paths, on the
// thread that drives the controller's admin queue.
std::optional<spec::nvme::PolluxEmulatorStatus> emulator_status(Controller& ctrl);

// "TOOL: WARNING: ADDRESS: the emulator's model fell up to ... behind ..." when it fell behind,
// else "".
std::string emulator_lag_warning(const std::string& tool, const std::string& address,
                                 const spec::nvme::PolluxEmulatorStatus& st);

}  // namespace pollux::nvme
