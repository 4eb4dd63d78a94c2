#include "scenarios/runner/device_profile.h"

namespace pollux::scenarios {

emu::nvme::Result<emu::timing::Profile> device_profile(const DeviceSpec& d) {
  using emu::nvme::Error;
  auto p = emu::timing::load_profile(d.profile);
  if (!p) return Error{"device " + d.name + ": " + p.error()};
  auto f = emu::timing::parse_fidelity(d.fidelity);
  if (!f) return Error{"device " + d.name + ": " + f.error()};
  p.value().fidelity = f.value();
  if (d.scale_blocks) {
    if (auto s = emu::timing::scale_capacity(p.value(), d.scale_blocks, d.scale_pages); !s) {
      return Error{"device " + d.name + ": scale_blocks: " + s.error()};
    }
  }
  if (!d.precondition.empty()) {
    using emu::timing::Precondition;
    if (p.value().media != emu::timing::MediaKind::kNand) {
      return Error{"device " + d.name + ": precondition: profile " + d.profile + " has no NAND"};
    }
    p.value().ftl.precondition = d.precondition == "steady"       ? Precondition::kSteady
                                 : d.precondition == "sequential" ? Precondition::kSequential
                                                                  : Precondition::kNone;
  }
  return p;
}

}  // namespace pollux::scenarios
