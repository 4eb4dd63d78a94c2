#include "emulator/rnic/nic_profile.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "emulator/profiles/builtin_nic_profiles.h"
#include "emulator/timing/yaml_section.h"

namespace pollux::emu::rnic {
namespace {

using nvme::Error;
using nvme::Result;
using nvme::Status;
using timing::kMs;
using timing::kNs;
using timing::kSec;
using timing::yaml::err;
using timing::yaml::Section;
using timing::yaml::where;

constexpr uint32_t kRates[] = {10, 25, 40, 50, 100, 200, 400};
constexpr uint64_t kMinFrame = 64;  // Ethernet header to FCS
constexpr uint64_t kPauseFrame = 64 + 20;  // a PFC frame with preamble and gap
// Largest RoCEv2 packet at MTU 4096: BTH 12, RETH 16, ImmDt 4, payload, ICRC 4.
constexpr uint32_t kMaxPacket = 12 + 16 + 4 + 4096 + 4;

Result<NicProfile> parse_root(const YAML::Node& root) {
  if (!root.IsMap()) return err("nic profile: the document must be a mapping");
  NicProfile p;
  Section top(root, "");
  POLLUX_TRY(top.string("name", &p.name));
  POLLUX_TRY(top.string("description", &p.description));
  if (YAML::Node s = top.take("sources")) {
    if (!s.IsSequence()) return err("sources: expected a list of strings" + where(s));
    for (const auto& e : s) p.sources.push_back(e.as<std::string>());
  }
  POLLUX_TRY(timing::parse_pcie_section(top.take("pcie"), &p.pcie));

  Section nic(top.take("nic"), "nic");
  POLLUX_TRY(nic.check_is_map());
  POLLUX_TRY(nic.duration("wqe_latency", &p.nic.wqe_latency, kMs));
  POLLUX_TRY(nic.duration("tx_latency", &p.nic.tx_latency, kMs));
  POLLUX_TRY(nic.duration("rx_latency", &p.nic.rx_latency, kMs));
  POLLUX_TRY(nic.duration("packet_interval", &p.nic.packet_interval, kMs));
  POLLUX_TRY(nic.uint("tx_window", 1, 4096, &p.nic.tx_window));
  POLLUX_TRY(nic.unknown_keys());

  Section port(top.take("port"), "port");
  POLLUX_TRY(port.check_is_map());
  POLLUX_TRY(port.uint("rate_gbps", 1, 400, &p.port.rate_gbps));
  POLLUX_TRY(port.uint("frame_overhead", 0, 256, &p.port.frame_overhead));
  POLLUX_TRY(port.duration("propagation", &p.port.propagation, kMs));
  POLLUX_TRY(port.unknown_keys());

  Section sw(top.take("switch"), "switch");
  POLLUX_TRY(sw.check_is_map());
  POLLUX_TRY(sw.boolean("present", &p.sw.present));
  POLLUX_TRY(sw.duration("port_latency", &p.sw.port_latency, kMs));
  POLLUX_TRY(sw.boolean("cut_through", &p.sw.cut_through));
  POLLUX_TRY(sw.size("buffer_bytes", &p.sw.buffer_bytes));
  POLLUX_TRY(sw.boolean("pfc", &p.sw.pfc));
  POLLUX_TRY(sw.size("xoff_bytes", &p.sw.xoff_bytes));
  POLLUX_TRY(sw.size("xon_bytes", &p.sw.xon_bytes));
  POLLUX_TRY(sw.unknown_keys());

  POLLUX_TRY(top.unknown_keys());
  if (p.name.empty()) return err("name: required");
  POLLUX_TRY(validate(p));
  return p;
}

}  // namespace

uint64_t wire_bytes(const PortProfile& p, uint64_t packet_bytes) {
  // The frame from Ethernet header to FCS is at least 64 bytes; preamble and gap come on top.
  constexpr uint64_t kPreambleAndGap = 8 + 12;
  const uint64_t frame = packet_bytes + p.frame_overhead;
  const uint64_t min = kMinFrame + std::min<uint64_t>(kPreambleAndGap, p.frame_overhead);
  return std::max(frame, min);
}

SimTime serialisation_time(const PortProfile& p, uint64_t packet_bytes) {
  return timing::transfer_time(wire_bytes(p, packet_bytes), uint64_t{p.rate_gbps} * 125'000'000);
}

uint64_t pfc_headroom_bytes(const NicProfile& p, uint32_t max_packet_bytes) {
  // After the switch decides XOFF: its pause frame crosses the cable, the port finishes the
  // frame it is sending and every bit already on the cable (and any it started meanwhile)
  // still arrives; with cut-through the port latency is counted as buffered time too.
  const uint64_t bytes_per_second = uint64_t{p.port.rate_gbps} * 125'000'000;
  const SimTime exposure = 2 * p.port.propagation + p.sw.port_latency +
                           timing::transfer_time(kPauseFrame, bytes_per_second);
  const uint64_t in_flight =
      static_cast<uint64_t>((static_cast<unsigned __int128>(exposure) * bytes_per_second +
                             kSec - 1) / kSec);
  return in_flight + 2 * wire_bytes(p.port, max_packet_bytes);
}

Status validate(const NicProfile& p) {
  bool rate_ok = false;
  for (uint32_t r : kRates) rate_ok |= p.port.rate_gbps == r;
  if (!rate_ok)
    return err("port.rate_gbps: " + std::to_string(p.port.rate_gbps) +
               " is not an Ethernet rate (10, 25, 40, 50, 100, 200, 400)");
  if (p.pcie.generation == 0 && (p.pcie.dma_read_latency || p.pcie.dma_write_latency))
    return err("pcie: an ideal link (generation 0) has no DMA latencies");
  if (!p.sw.present) {
    if (p.sw.pfc || p.sw.buffer_bytes || p.sw.port_latency)
      return err("switch: pfc, buffer_bytes and port_latency need present: true");
    return {};
  }
  if (p.sw.buffer_bytes < wire_bytes(p.port, kMaxPacket))
    return err("switch.buffer_bytes: must hold at least one full-size frame (" +
               std::to_string(wire_bytes(p.port, kMaxPacket)) + " bytes)");
  if (!p.sw.pfc) {
    if (p.sw.xoff_bytes || p.sw.xon_bytes)
      return err("switch: xoff_bytes and xon_bytes need pfc: true");
    return {};
  }
  if (p.sw.xoff_bytes == 0 || p.sw.xon_bytes >= p.sw.xoff_bytes)
    return err("switch: PFC needs 0 < xon_bytes < xoff_bytes");
  const uint64_t headroom = pfc_headroom_bytes(p, kMaxPacket);
  if (p.sw.xoff_bytes > p.sw.buffer_bytes || p.sw.buffer_bytes - p.sw.xoff_bytes < headroom)
    return err("switch.xoff_bytes: leaves " +
               std::to_string(p.sw.xoff_bytes > p.sw.buffer_bytes
                                  ? 0
                                  : p.sw.buffer_bytes - p.sw.xoff_bytes) +
               " bytes above XOFF; PFC needs " + std::to_string(headroom) +
               " (pause frame's trip, cable contents, two full frames) to be lossless");
  return {};
}

Result<NicProfile> parse_nic_profile(std::string_view yaml_text) {
  if (Status s = timing::yaml::check_utf8(yaml_text); !s) return err("nic profile: " + s.error());
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (Status s = timing::yaml::unique_keys(root); !s) return err("nic profile: " + s.error());
    return parse_root(root);
  } catch (const YAML::Exception& e) {
    return err(std::string("nic profile: YAML syntax error: ") + e.what());
  }
}

Result<NicProfile> load_nic_profile_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return err(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_nic_profile(ss.str());
  if (!r) return err(path + ": " + r.error());
  return r;
}

std::string builtin_nic_profile_names() {
  std::string names;
  for (unsigned i = 0; i < timing::kBuiltinNicProfileCount; ++i)
    names += std::string(names.empty() ? "" : ", ") + timing::kBuiltinNicProfiles[i].name;
  return names;
}

Result<NicProfile> load_nic_profile(const std::string& name_or_path) {
  for (unsigned i = 0; i < timing::kBuiltinNicProfileCount; ++i) {
    if (name_or_path == timing::kBuiltinNicProfiles[i].name) {
      auto r = parse_nic_profile(timing::kBuiltinNicProfiles[i].yaml);
      if (!r) return Error{"nic profile " + name_or_path + ": " + r.error()};
      return r;
    }
  }
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".yaml") == std::string::npos)
    return Error{"nic profile '" + name_or_path + "': no such built-in profile (" +
                 builtin_nic_profile_names() + ") and not a path to a .yaml file"};
  return load_nic_profile_file(name_or_path);
}

}  // namespace pollux::emu::rnic
