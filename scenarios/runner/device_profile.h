// What an emulated device of a scenario is: its profile (built-in or a YAML file) with the
// device's fidelity, scaling and preconditioning applied. validate() reads the capacity from
// it and the emulated target builds the drive from it: one resolution, so `pollux-scenario
// check` refuses whatever `run` would.
#pragma once

#include "emulator/nvme/result.h"
#include "emulator/timing/profile.h"
#include "scenarios/runner/scenario.h"

namespace pollux::scenarios {

// Errors name the device ("device nvme0: ...").
emu::nvme::Result<emu::timing::Profile> device_profile(const DeviceSpec& d);

}  // namespace pollux::scenarios
