// The profiles in this folder, compiled in (see BUILD).
#pragma once

namespace pollux::emu::timing {

struct BuiltinProfile {
  const char* name;
  const char* yaml;
};
extern const BuiltinProfile kBuiltinProfiles[];
extern const unsigned kBuiltinProfileCount;

}  // namespace pollux::emu::timing
