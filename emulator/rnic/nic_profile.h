// A NIC timing profile: everything that makes the emulated RNIC and its network behave like
// one named adapter on one named testbed. Loaded from YAML (emulator/profiles/*.yaml, the NIC
// ones listed in NIC_PROFILES there); every field is checked and an error names it.
//
// Times are timing::SimTime (picoseconds), as in the SSD's profiles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/nvme/result.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"

namespace pollux::emu::rnic {

using timing::SimTime;

// The NIC's own pipelines (between the PCIe link and the MAC).
struct NicPipeline {
  SimTime wqe_latency = 0;      // a fetched send WQE checked and segmented
  SimTime tx_latency = 0;       // a packet's way from its data (or header) to the MAC
  SimTime rx_latency = 0;       // a packet's way from the MAC to the DMA engine / transport
  SimTime packet_interval = 0;  // each pipeline's time per packet (1 / message rate)
  uint32_t tx_window = 8;       // packets between the scheduler and the wire (payload reads in
                                // flight included): how far the NIC works ahead of its port
};

// One Ethernet port and its cable (every port of the testbed is alike).
struct PortProfile {
  uint32_t rate_gbps = 100;      // MAC data rate: 10, 25, 40, 50, 100, 200, 400
  uint32_t frame_overhead = 66;  // bytes per RoCEv2 packet besides BTH..ICRC: preamble+SFD 8,
                                 // Ethernet 14, IPv4 20, UDP 8, FCS 4, inter-frame gap 12
  SimTime propagation = 0;       // one cable, end to end (about 5 ns per metre)
};

// The switch between the ports (absent: the NICs are cabled to each other directly).
struct SwitchProfile {
  bool present = false;
  SimTime port_latency = 0;    // first bit in (cut-through) or last bit in, to first bit out
  bool cut_through = true;
  uint64_t buffer_bytes = 0;   // per ingress port
  bool pfc = false;            // 802.1Qbb: pause the sender instead of dropping
  uint64_t xoff_bytes = 0;     // ingress occupancy that sends XOFF ...
  uint64_t xon_bytes = 0;      // ... and that sends XON again
};

struct NicProfile {
  std::string name;
  std::string description;
  std::vector<std::string> sources;  // where the figures come from
  timing::PcieProfile pcie;
  NicPipeline nic;
  PortProfile port;
  SwitchProfile sw;
};

// Frame size on the wire of a packet of `packet_bytes` (BTH..ICRC), padded to Ethernet's
// 64-byte minimum frame.
uint64_t wire_bytes(const PortProfile& p, uint64_t packet_bytes);
// Serialisation time of such a packet at the port's rate.
SimTime serialisation_time(const PortProfile& p, uint64_t packet_bytes);
// Bytes a paused port can still put into the switch's buffer after the switch decides to
// send XOFF: the pause frame's way back, the frame the port is sending, the cable's contents
// both ways (IEEE 802.1Qbb headroom).
uint64_t pfc_headroom_bytes(const NicProfile& p, uint32_t max_packet_bytes);

nvme::Result<NicProfile> parse_nic_profile(std::string_view yaml_text);
nvme::Result<NicProfile> load_nic_profile_file(const std::string& path);
// A NIC profile shipped in emulator/profiles by name ("cx5-100g", ...) or a path to YAML.
nvme::Result<NicProfile> load_nic_profile(const std::string& name_or_path);
std::string builtin_nic_profile_names();
nvme::Status validate(const NicProfile& p);

}  // namespace pollux::emu::rnic
