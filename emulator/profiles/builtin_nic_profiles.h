// The NIC timing profiles in this folder (NIC_PROFILES in BUILD), compiled in.
#pragma once

#include "emulator/profiles/builtin_profiles.h"

namespace pollux::emu::timing {

extern const BuiltinProfile kBuiltinNicProfiles[];
extern const unsigned kBuiltinNicProfileCount;

}  // namespace pollux::emu::timing
