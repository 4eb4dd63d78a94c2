// Configuration of one emulated NVMe controller, loadable from YAML.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/nvme/result.h"

namespace pollux::emu::nvme {

struct NamespaceConfig {
  uint64_t size_bytes = 0;       // a multiple of lba_size
  uint32_t lba_size = 512;       // 512 or 4096 (the format in use at start; both are offered)
  std::string backing = "memory";  // "memory" (sparse, in RAM) or "file:<path>"
};

struct ControllerConfig {
  std::string serial = "POLLUX00000001";   // Identify SN, at most 20 characters
  std::string model = "Pollux NVMe emulator";  // Identify MN, at most 40
  std::string firmware = "0.1";             // Identify FR, at most 8
  uint32_t max_queue_entries = 1024;        // CAP.MQES + 1, 2..65536
  uint32_t max_io_queue_pairs = 64;         // I/O SQs = I/O CQs offered, 1..65535
  uint32_t mdts = 5;                        // log2 of 4 KiB pages per command; 0 = no limit
  uint32_t doorbell_stride = 0;             // CAP.DSTRD: doorbells 4 << n bytes apart, 0..15
  bool volatile_write_cache = true;         // Identify VWC
  uint32_t ready_delay_polls = 0;           // CC.EN 0->1: CSTS.RDY after this many poll()s
  bool weighted_round_robin = false;        // CAP.AMS bit 0: WRR with urgent priority class
  std::vector<NamespaceConfig> namespaces;  // NSID = index + 1, at least one

  // Bytes of the doorbell area (BAR0 offset 0x1000 on) for this configuration.
  size_t doorbell_bytes() const {
    return (size_t{max_io_queue_pairs} + 1) * 2 * (size_t{4} << doorbell_stride);
  }
};

// Checks every field; the error names the first bad one.
Status validate(const ControllerConfig& config);

// YAML layout (all controller keys optional; see examples/default.yaml):
//   controller: {serial, model, firmware, max_queue_entries, max_io_queue_pairs, mdts,
//                doorbell_stride, volatile_write_cache, ready_delay_polls, weighted_round_robin}
//   namespaces:
//     - {size: 1GiB | size_bytes: N | blocks: N, lba_size: 512|4096, backing: memory|file:<path>}
// Unknown keys are errors (they are usually typos).
Result<ControllerConfig> parse_config(std::string_view yaml_text);
Result<ControllerConfig> load_config_file(const std::string& path);

// "4096", "64KiB", "1GiB", "2TiB", "1G", "512M" (binary units) -> bytes. Errors on anything else.
Result<uint64_t> parse_size(std::string_view text);

}  // namespace pollux::emu::nvme
