#include "emulator/timing/profile.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "emulator/timing/yaml_section.h"

namespace pollux::emu::timing {
namespace {

using nvme::Error;
using nvme::Result;
using nvme::Status;
using yaml::err;
using yaml::Section;
using yaml::where;

}  // namespace

Status parse_pcie_section(const YAML::Node& node, PcieProfile* out) {
  PcieProfile& p = *out;
  Section pc(node, "pcie");
  POLLUX_TRY(pc.check_is_map());
  POLLUX_TRY(pc.uint("generation", 0, 5, &p.generation));
  POLLUX_TRY(pc.uint("lanes", 1, 16, &p.lanes));
  POLLUX_TRY(pc.uint("max_payload", 128, 4096, &p.max_payload));
  POLLUX_TRY(pc.uint("max_read_request", 128, 4096, &p.max_read_request));
  POLLUX_TRY(pc.uint("tlp_overhead", 0, 64, &p.tlp_overhead));
  POLLUX_TRY(pc.duration("mmio_write_latency", &p.mmio_write_latency, kMs));
  POLLUX_TRY(pc.duration("dma_read_latency", &p.dma_read_latency, kMs));
  POLLUX_TRY(pc.duration("dma_write_latency", &p.dma_write_latency, kMs));
  POLLUX_TRY(pc.unknown_keys());
  for (uint32_t v : {p.max_payload, p.max_read_request}) {
    if (v & (v - 1)) return err("pcie: max_payload and max_read_request must be powers of two");
  }
  if (p.lanes & (p.lanes - 1)) return err("pcie.lanes: must be 1, 2, 4, 8 or 16");
  return {};
}

namespace {

Result<Profile> parse_root(const YAML::Node& root) {
  if (!root.IsMap()) return err("profile: the document must be a mapping");
  Profile p;
  Section top(root, "");
  POLLUX_TRY(top.string("name", &p.name));
  POLLUX_TRY(top.string("description", &p.description));
  if (YAML::Node s = top.take("sources")) {
    if (!s.IsSequence()) return err("sources: expected a list of strings" + where(s));
    for (const auto& e : s) p.sources.push_back(e.as<std::string>());
  }
  std::string fidelity = "timed";
  POLLUX_TRY(top.string("fidelity", &fidelity));
  auto f = parse_fidelity(fidelity);
  if (!f) return err("fidelity: " + f.error());
  p.fidelity = f.value();

  // The functional controller's own keys, checked by its parser.
  {
    YAML::Node functional(YAML::NodeType::Map);
    if (YAML::Node c = top.take("controller")) functional["controller"] = c;
    if (YAML::Node n = top.take("namespaces")) functional["namespaces"] = n;
    YAML::Emitter out;
    out << functional;
    auto c = nvme::parse_config(out.c_str());
    if (!c) return err(c.error());
    p.controller = c.value();
  }

  Section fe(top.take("frontend"), "frontend");
  POLLUX_TRY(fe.check_is_map());
  POLLUX_TRY(fe.uint("clock_mhz", 1, 10000, &p.frontend_clock_mhz));
  POLLUX_TRY(fe.uint("max_outstanding", 1, 65536, &p.max_outstanding));
  POLLUX_TRY(fe.unknown_keys());

  POLLUX_TRY(parse_pcie_section(top.take("pcie"), &p.pcie));

  Section fw(top.take("firmware"), "firmware");
  POLLUX_TRY(fw.check_is_map());
  POLLUX_TRY(fw.uint("cores", 1, 64, &p.firmware.cores));
  POLLUX_TRY(fw.duration("read", &p.firmware.read));
  POLLUX_TRY(fw.duration("write", &p.firmware.write));
  POLLUX_TRY(fw.duration("flush", &p.firmware.flush));
  POLLUX_TRY(fw.duration("admin", &p.firmware.admin));
  POLLUX_TRY(fw.duration("other", &p.firmware.other));
  POLLUX_TRY(fw.duration("per_unit", &p.firmware.per_unit));
  POLLUX_TRY(fw.duration("turnaround", &p.firmware.turnaround));
  POLLUX_TRY(fw.number("jitter", 0, 1, &p.firmware.jitter));
  POLLUX_TRY(fw.duration("read_latency", &p.firmware.read_latency, kMs));
  POLLUX_TRY(fw.duration("write_latency", &p.firmware.write_latency, kMs));
  POLLUX_TRY(fw.unknown_keys());

  Section dp(top.take("datapath"), "datapath");
  POLLUX_TRY(dp.check_is_map());
  uint64_t read_mb_s = 0, write_mb_s = 0;
  POLLUX_TRY(dp.uint("read_mb_s", 1, 1000000, &read_mb_s));
  POLLUX_TRY(dp.uint("write_mb_s", 1, 1000000, &write_mb_s));
  POLLUX_TRY(dp.unknown_keys());
  p.datapath.read_bytes_per_second = read_mb_s * 1'000'000;
  p.datapath.write_bytes_per_second = write_mb_s * 1'000'000;

  std::string media = "none";
  POLLUX_TRY(top.string("media", &media));
  if (media == "none")
    p.media = MediaKind::kNone;
  else if (media == "optane")
    p.media = MediaKind::kOptane;
  else if (media == "nand")
    p.media = MediaKind::kNand;
  else
    return err("media: '" + media + "' is not one of none, optane, nand");

  Section op(top.take("optane"), "optane");
  POLLUX_TRY(op.check_is_map());
  POLLUX_TRY(op.uint("units", 1, 4096, &p.optane.units));
  POLLUX_TRY(op.uint("interleave_bytes", 512, 1 << 20, &p.optane.interleave_bytes));
  POLLUX_TRY(op.duration("read", &p.optane.read));
  POLLUX_TRY(op.duration("read_stddev", &p.optane.read_stddev));
  POLLUX_TRY(op.duration("write", &p.optane.write));
  POLLUX_TRY(op.duration("write_stddev", &p.optane.write_stddev));
  POLLUX_TRY(op.unknown_keys());

  Section nd(top.take("nand"), "nand");
  POLLUX_TRY(nd.check_is_map());
  NandGeometry& g = p.nand_geometry;
  NandTiming& t = p.nand_timing;
  POLLUX_TRY(nd.uint("channels", 1, 64, &g.channels));
  POLLUX_TRY(nd.uint("dies_per_channel", 1, 64, &g.dies_per_channel));
  POLLUX_TRY(nd.uint("planes_per_die", 1, 8, &g.planes_per_die));
  POLLUX_TRY(nd.uint("blocks_per_plane", 2, 1 << 20, &g.blocks_per_plane));
  POLLUX_TRY(nd.uint("pages_per_block", 1, 1 << 16, &g.pages_per_block));
  POLLUX_TRY(nd.uint("page_bytes", 4096, 1 << 20, &g.page_bytes));
  POLLUX_TRY(nd.duration("t_read", &t.t_read));
  POLLUX_TRY(nd.duration("t_prog", &t.t_prog));
  POLLUX_TRY(nd.duration("t_erase", &t.t_erase));
  uint64_t mb_s = t.channel_bytes_per_second / 1'000'000;
  POLLUX_TRY(nd.uint("channel_mb_s", 1, 100000, &mb_s));
  t.channel_bytes_per_second = mb_s * 1'000'000;
  POLLUX_TRY(nd.duration("command_overhead", &t.command_overhead, kMs));
  POLLUX_TRY(nd.number("t_read_die_spread", 0, 0.5, &t.t_read_die_spread));
  POLLUX_TRY(nd.duration("t_read_jitter", &t.t_read_jitter, kMs));
  POLLUX_TRY(nd.number("read_retry_rate", 0, 1, &t.read_retry_rate));
  POLLUX_TRY(nd.uint("read_retry_steps", 1, 16, &t.read_retry_steps));
  POLLUX_TRY(nd.boolean("register_hits", &t.register_hits));
  POLLUX_TRY(nd.boolean("suspend", &t.suspend));
  POLLUX_TRY(nd.duration("t_suspend", &t.t_suspend, kMs));
  POLLUX_TRY(nd.duration("t_resume", &t.t_resume, kMs));
  POLLUX_TRY(nd.duration("t_prog_slc", &t.t_prog_slc));
  POLLUX_TRY(nd.uint("read_ahead_groups", 0, 64, &p.ftl.read_ahead_groups));
  POLLUX_TRY(nd.size("slc_bytes", &p.ftl.slc_bytes));
  POLLUX_TRY(nd.duration("slc_fold_after_idle", &p.ftl.slc_fold_after_idle));
  POLLUX_TRY(nd.uint("gc_free_blocks_low", 1, 1 << 20, &p.ftl.gc_free_blocks_low));
  std::string pre = "none";
  POLLUX_TRY(nd.string("precondition", &pre));
  if (pre == "none")
    p.ftl.precondition = Precondition::kNone;
  else if (pre == "sequential")
    p.ftl.precondition = Precondition::kSequential;
  else if (pre == "steady")
    p.ftl.precondition = Precondition::kSteady;
  else
    return err("nand.precondition: '" + pre + "' is not one of none, sequential, steady");
  POLLUX_TRY(nd.uint("seed", 0, ~uint64_t{0}, &p.ftl.seed));
  POLLUX_TRY(nd.unknown_keys());
  t.seed = p.ftl.seed;

  Section ca(top.take("cache"), "cache");
  POLLUX_TRY(ca.check_is_map());
  POLLUX_TRY(ca.size("bytes", &p.cache.bytes));
  POLLUX_TRY(ca.boolean("power_loss_protection", &p.cache.power_loss_protection));
  POLLUX_TRY(ca.unknown_keys());

  POLLUX_TRY(top.unknown_keys());
  if (p.name.empty()) return err("name: required");
  if (!p.controller.namespaces.empty()) p.ftl.logical_bytes = p.controller.namespaces[0].size_bytes;
  POLLUX_TRY(validate(p));
  return p;
}

}  // namespace

nvme::Status scale_capacity(Profile& p, uint32_t blocks_per_plane, uint32_t pages_per_block) {
  if (p.media != MediaKind::kNand) return Error{"scale_capacity: only NAND profiles have blocks"};
  if (blocks_per_plane < 2) return Error{"scale_capacity: at least 2 blocks per plane"};
  auto& ns = p.controller.namespaces.at(0);
  if (pages_per_block == 0) pages_per_block = p.nand_geometry.pages_per_block;
  const double ratio = double(blocks_per_plane) * pages_per_block /
                       (double(p.nand_geometry.blocks_per_plane) * p.nand_geometry.pages_per_block);
  const uint64_t units = static_cast<uint64_t>(double(ns.size_bytes / 4096) * ratio);
  ns.size_bytes = units * 4096;
  // Smaller blocks are erased more often per unit written: scale tBERS with the block size so
  // an erase costs the same per unit as on the full-size drive.
  p.nand_timing.t_erase = p.nand_timing.t_erase * pages_per_block / p.nand_geometry.pages_per_block;
  // The SLC cache is a share of the blocks: it shrinks with them.
  p.ftl.slc_bytes = static_cast<uint64_t>(double(p.ftl.slc_bytes) * ratio) / 4096 * 4096;
  p.nand_geometry.blocks_per_plane = blocks_per_plane;
  p.nand_geometry.pages_per_block = pages_per_block;
  p.ftl.logical_bytes = ns.size_bytes;
  return validate(p);
}

const char* to_string(Fidelity f) {
  switch (f) {
    case Fidelity::kFunctional:
      return "functional";
    case Fidelity::kTimed:
      return "timed";
    case Fidelity::kRtl:
      return "rtl";
  }
  return "?";
}

Result<Fidelity> parse_fidelity(std::string_view s) {
  if (s == "functional") return Fidelity::kFunctional;
  if (s == "timed") return Fidelity::kTimed;
  if (s == "rtl") return Fidelity::kRtl;
  return err("'" + std::string(s) + "' is not one of functional, timed, rtl");
}

Status validate(const Profile& p) {
  if (Status s = nvme::validate(p.controller); !s) return s;
  if (p.controller.namespaces.size() != 1) {
    return err("namespaces: a timed device models one namespace (got " +
               std::to_string(p.controller.namespaces.size()) + ")");
  }
  if (p.controller.max_io_queue_pairs > 31) {
    return err("controller.max_io_queue_pairs: the queue engine has 31 I/O queue pairs (got " +
               std::to_string(p.controller.max_io_queue_pairs) + ")");
  }
  if (p.controller.doorbell_stride != 0)
    return err("controller.doorbell_stride: must be 0 for a timed device");
  if (p.media == MediaKind::kNand) {
    FtlConfig c = p.ftl;
    c.logical_bytes = p.controller.namespaces[0].size_bytes;
    if (std::string e = Ftl::validate(c, p.nand_geometry); !e.empty()) return err("nand: " + e);
    if (p.nand_timing.t_read == 0 || p.nand_timing.t_prog == 0 || p.nand_timing.t_erase == 0) {
      return err("nand: t_read, t_prog and t_erase must be set");
    }
    if (p.ftl.slc_bytes != 0 && p.nand_timing.t_prog_slc == 0)
      return err("nand.slc_bytes: an SLC cache needs nand.t_prog_slc (its program time)");
    if (p.ftl.slc_bytes % p.ftl.mapping_unit != 0)
      return err("nand.slc_bytes: must be a multiple of 4 KiB");
  }
  if (p.media == MediaKind::kOptane && p.optane.read == 0) return err("optane.read: must be set");
  if (p.cache.bytes % 4096) return err("cache.bytes: must be a multiple of 4 KiB");
  if (p.controller.volatile_write_cache != (p.cache.bytes && !p.cache.power_loss_protection)) {
    return err(
        "controller.volatile_write_cache: must be true exactly when the cache has bytes and no "
        "power_loss_protection (Identify VWC tells the host whether Flush is needed)");
  }
  return {};
}

Result<Profile> parse_profile(std::string_view yaml_text) {
  if (Status s = yaml::check_utf8(yaml_text); !s) return err("profile: " + s.error());
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (Status s = yaml::unique_keys(root); !s) return err("profile: " + s.error());
    return parse_root(root);
  } catch (const YAML::Exception& e) {
    return err(std::string("profile: YAML syntax error: ") + e.what());
  }
}

Result<Profile> load_profile_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return err(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_profile(ss.str());
  if (!r) return err(path + ": " + r.error());
  return r;
}

}  // namespace pollux::emu::timing

#include "emulator/profiles/builtin_profiles.h"

namespace pollux::emu::timing {

std::string builtin_profile_names() {
  std::string names;
  for (unsigned i = 0; i < kBuiltinProfileCount; ++i)
    names += std::string(names.empty() ? "" : ", ") + kBuiltinProfiles[i].name;
  return names;
}

nvme::Result<Profile> load_profile(const std::string& name_or_path) {
  for (unsigned i = 0; i < kBuiltinProfileCount; ++i) {
    if (name_or_path == kBuiltinProfiles[i].name) {
      auto r = parse_profile(kBuiltinProfiles[i].yaml);
      if (!r) return nvme::Error{"profile " + name_or_path + ": " + r.error()};
      return r;
    }
  }
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".yaml") == std::string::npos) {
    return nvme::Error{"profile '" + name_or_path + "': no such built-in profile (" +
                       builtin_profile_names() + ") and not a path to a .yaml file"};
  }
  return load_profile_file(name_or_path);
}

}  // namespace pollux::emu::timing
