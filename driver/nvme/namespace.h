// An active namespace as the driver sees it (from Identify Namespace).
#pragma once

#include <cstdint>

#include "spec/nvme.h"

namespace pollux::nvme {

struct Namespace {
  uint32_t id = 0;
  uint32_t block_size = 0;   // bytes, from the current LBA format
  uint64_t num_blocks = 0;   // NSZE
  uint32_t max_io_blocks = 0;  // MDTS in blocks (0 = no limit)
  spec::nvme::IdentifyNamespace data{};
};

}  // namespace pollux::nvme
