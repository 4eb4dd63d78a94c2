// A device profile: everything that makes the timed emulator behave like one named SSD.
// Loaded from YAML (emulator/profiles/*.yaml); every field is checked and an error names it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/nvme/config.h"
#include "emulator/nvme/result.h"
#include "emulator/timing/datapath.h"
#include "emulator/timing/nand.h"
#include "emulator/timing/sim_time.h"

namespace YAML {
class Node;
}

namespace pollux::emu::timing {

enum class Fidelity { kFunctional, kTimed, kRtl };
enum class MediaKind { kNone, kOptane, kNand };

struct PcieProfile {
  uint32_t generation = 3;          // 1..5 (2.5, 5, 8, 16, 32 GT/s); 0 = ideal (no link cost)
  uint32_t lanes = 4;               // 1, 2, 4, 8, 16
  uint32_t max_payload = 256;       // bytes per write / completion TLP (MPS)
  uint32_t max_read_request = 512;  // bytes per read request (MRRS)
  uint32_t tlp_overhead = 24;       // framing + sequence + header + LCRC bytes per TLP
  SimTime mmio_write_latency = 0;   // host doorbell write to the device register
  SimTime dma_read_latency = 0;     // device read request to first completion data
  SimTime dma_write_latency = 0;    // device posted write to visible in host memory
};

struct FirmwareProfile {
  uint32_t cores = 1;  // commands are processed on the first free core
  SimTime read = 0;    // per command, by type
  SimTime write = 0;
  SimTime flush = 0;
  SimTime admin = 0;
  SimTime other = 0;     // write zeroes, DSM, compare, unknown
  SimTime per_unit = 0;  // extra per 4 KiB mapping unit (splitting, FTL lookup)
  // Extra per read or write command when its core's previous command went the other way
  // (read after write or write after read): what mixed workloads cost beyond the mix of the
  // pure ones.
  SimTime turnaround = 0;
  // Variation of the per-command time: a fraction `jitter` of it is exponentially distributed
  // (same mean), so queues behind a busy core build tails (0: every command costs exactly its
  // time).
  double jitter = 0;
  // Fixed latency of every read / write that does not hold a core (it overlaps with other
  // commands): a read's data leaves this much after the media returned it, a write completes
  // this long after its data is buffered.
  SimTime read_latency = 0;
  SimTime write_latency = 0;
  uint64_t seed = 1;  // of the jitter (set from the simulation's generator)
};

struct OptaneProfile {
  uint32_t units = 8;  // independently busy media partitions (address-interleaved)
  uint32_t interleave_bytes = 4096;
  SimTime read = 0;         // mean service time per 4 KiB
  SimTime read_stddev = 0;  // normal jitter around it (clipped at 25% of the mean)
  SimTime write = 0;
  SimTime write_stddev = 0;
};

struct CacheProfile {
  uint64_t bytes = 0;                 // DRAM write buffer; 0 = writes go straight to media
  bool power_loss_protection = true;  // buffered writes survive power loss (Identify VWC = 0)
};

struct Profile {
  std::string name;
  std::string description;
  std::vector<std::string> sources;   // where the figures come from
  nvme::ControllerConfig controller;  // Identify strings, queues, MDTS, namespaces
  uint32_t frontend_clock_mhz = 500;  // queue engine clock
  uint32_t max_outstanding = 1024;    // commands the device holds at once (fetch window)
  PcieProfile pcie;
  FirmwareProfile firmware;
  DataPathProfile datapath;
  MediaKind media = MediaKind::kNone;
  OptaneProfile optane;
  NandGeometry nand_geometry;
  NandTiming nand_timing;
  FtlConfig ftl;  // logical_bytes is set from the namespace size
  CacheProfile cache;
  Fidelity fidelity = Fidelity::kTimed;
};

// YAML layout: see emulator/profiles/README.md. Unknown keys are errors.
nvme::Result<Profile> parse_profile(std::string_view yaml_text);
nvme::Result<Profile> load_profile_file(const std::string& path);
// A profile shipped in emulator/profiles by name ("p4800x", ...) or a path to a YAML file.
nvme::Result<Profile> load_profile(const std::string& name_or_path);
// "p4800x, p3700, gen4-tlc, null": the built-in profiles' names.
std::string builtin_profile_names();
nvme::Status validate(const Profile& p);
// Reads a `pcie` mapping (absent: the defaults stay); shared with the NIC profiles
// (emulator/rnic/nic_profile.h).
nvme::Status parse_pcie_section(const YAML::Node& node, PcieProfile* out);

// A smaller drive with the same channels, dies, planes, timing and spare ratio: NAND blocks
// per plane (and pages per block, if non-zero) change and the namespace shrinks in
// proportion (whole 4 KiB units). For runs that must fill the drive (write cliff, GC) in
// reasonable host time. tBERS shrinks with the block so an erase costs the same per unit
// written; smaller blocks lower greedy GC's write amplification a little.
nvme::Status scale_capacity(Profile& p, uint32_t blocks_per_plane, uint32_t pages_per_block = 0);

const char* to_string(Fidelity f);
nvme::Result<Fidelity> parse_fidelity(std::string_view s);

}  // namespace pollux::emu::timing
