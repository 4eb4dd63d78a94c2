// NVMe completion status decoding with readable names ("MEDIA/UNRECOVERED READ ERROR").
#pragma once

#include <cstdint>
#include <string>

#include "spec/nvme.h"

namespace pollux::nvme {

struct Status {
  uint8_t sct = 0;
  uint8_t sc = 0;
  bool dnr = false;
  bool more = false;
  uint8_t crd = 0;

  static Status from_cqe(uint16_t status_field) {
    namespace s = spec::nvme::status;
    return {s::sct(status_field), s::sc(status_field), s::dnr(status_field),
            s::more(status_field), s::crd(status_field)};
  }
  bool ok() const { return sct == 0 && sc == 0; }
  // Worth retrying: an error the device did not mark Do Not Retry.
  bool retriable() const { return !ok() && !dnr; }
};

inline bool cpl_is_error(const spec::nvme::CompletionEntry& cpl) {
  return (cpl.status & 0xfffe) != 0;
}

// "GENERIC/LBA OUT OF RANGE", "COMMAND SPECIFIC/INVALID QUEUE SIZE", "VENDOR/0x12" ...
const char* status_type_name(uint8_t sct);
const char* status_code_name(uint8_t sct, uint8_t sc);  // nullptr when unknown
std::string describe(Status s);

}  // namespace pollux::nvme
