// Fault commands as text: one JSON object per command, the same for pollux-emu's control
// socket and for scenario files. Replies are one JSON object: {"ok":true,...} or
// {"ok":false,"error":"..."} naming the bad field.
//
//   {"cmd":"fault","action":"status","status":"unrecovered_read_error","opcode":2,
//    "nsid":1,"lba":[100,199],"count":3,"probability":0.5}
//   {"cmd":"fault","action":"delay","delay_us":200}          (timed devices)
//   {"cmd":"fault","action":"never_complete","count":1}
//   {"cmd":"fault","action":"duplicate_completion"|"unknown_cid"|"stale_phase"}
//   {"cmd":"fault","action":"drop_data","opcode":2}   (success, no data moved)
//   {"cmd":"fault","action":"misdirect","opcode":1,"shift":8}   (written 8 blocks away)
//   {"cmd":"fault","queue":"admin","opcode":8,"action":"status","status":"internal_error"}
//   {"cmd":"remove_fault","id":3}   {"cmd":"clear"}
//   {"cmd":"bad_block","nsid":1,"lba":42}
//   {"cmd":"fatal"}   {"cmd":"disable"}   {"cmd":"stats"}
#pragma once

#include <string>
#include <string_view>

#include "emulator/nvme/controller.h"

namespace pollux::emu::nvme {

// Applies one command to `ctrl`; returns the reply line (without a newline). Never throws,
// whatever the text: a control client must not be able to take the device down.
std::string apply_fault_command(Controller& ctrl, std::string_view json_text);

}  // namespace pollux::emu::nvme
