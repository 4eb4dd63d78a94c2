// Timed-emulator profiles: the built-in ones load and validate with their figures, YAML
// parsing names every error, capacity scaling keeps the spare ratio and the erase time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "emulator/timing/media.h"
#include "emulator/timing/pcie_link.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/sim_time.h"
#include "emulator/timing/timeline.h"

namespace pollux::emu::timing {
namespace {

using ::testing::HasSubstr;

// -------------------------------------------------------------------------------- profiles ---

TEST(Profile, EveryBuiltinLoadsAndValidates) {
  for (const char* name : {"p4800x", "p3700", "gen4-tlc", "null"}) {
    auto p = load_profile(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.error();
    EXPECT_EQ(p.value().name, name);
    EXPECT_TRUE(validate(p.value()).ok()) << name << ": " << validate(p.value()).error();
    EXPECT_EQ(p.value().fidelity, Fidelity::kTimed) << name;
    EXPECT_FALSE(p.value().description.empty()) << name;
    EXPECT_FALSE(p.value().sources.empty()) << name;
    ASSERT_EQ(p.value().controller.namespaces.size(), 1u) << name;
  }
}

TEST(Profile, BuiltinFigures) {
  auto p = load_profile("p4800x");
  ASSERT_TRUE(p.ok()) << p.error();
  const Profile& o = p.value();
  EXPECT_EQ(o.media, MediaKind::kOptane);
  EXPECT_EQ(o.pcie.generation, 3u);
  EXPECT_EQ(o.pcie.lanes, 4u);
  EXPECT_EQ(o.pcie.dma_read_latency, 700 * kNs);
  EXPECT_EQ(o.firmware.read, 1720 * kNs);
  EXPECT_EQ(o.optane.read, 2150 * kNs);
  EXPECT_EQ(o.optane.units, 16u);
  EXPECT_EQ(o.firmware.turnaround, 470 * kNs);
  EXPECT_EQ(o.datapath.read_bytes_per_second, 2'400'000'000u);
  EXPECT_EQ(o.datapath.write_bytes_per_second, 2'020'000'000u);
  EXPECT_EQ(o.controller.namespaces[0].size_bytes, uint64_t{732585168} * 512);
  EXPECT_FALSE(o.controller.volatile_write_cache);

  auto t = load_profile("gen4-tlc");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t.value().media, MediaKind::kNand);
  EXPECT_EQ(t.value().cache.bytes, uint64_t{64} << 20);
  EXPECT_FALSE(t.value().cache.power_loss_protection);
  EXPECT_TRUE(t.value().controller.volatile_write_cache);
  EXPECT_EQ(t.value().nand_timing.t_erase, 3500 * kUs);
  EXPECT_EQ(t.value().nand_timing.channel_bytes_per_second, 1'200'000'000u);
  EXPECT_EQ(t.value().ftl.logical_bytes, t.value().controller.namespaces[0].size_bytes);
  EXPECT_EQ(t.value().ftl.precondition, Precondition::kSequential);
  EXPECT_EQ(t.value().ftl.slc_bytes, uint64_t{108719} << 20);
  EXPECT_EQ(t.value().nand_timing.t_prog_slc, 400 * kUs);
  EXPECT_TRUE(t.value().nand_timing.suspend);

  auto m = load_profile("p3700");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.value().nand_timing.t_read_jitter, 5300 * kNs);
  EXPECT_DOUBLE_EQ(m.value().nand_timing.t_read_die_spread, 0.03);
  EXPECT_DOUBLE_EQ(m.value().nand_timing.read_retry_rate, 0.001);
  EXPECT_TRUE(m.value().nand_timing.register_hits);
  EXPECT_FALSE(m.value().nand_timing.suspend);
  EXPECT_EQ(m.value().ftl.read_ahead_groups, 4u);
  EXPECT_EQ(m.value().firmware.read_latency, 2800 * kNs);

  auto n = load_profile("null");
  ASSERT_TRUE(n.ok()) << n.error();
  EXPECT_EQ(n.value().media, MediaKind::kNone);
  EXPECT_EQ(n.value().pcie.generation, 0u);
}

// A minimal valid profile; `extra` is appended (top-level keys).
std::string base_yaml(const std::string& extra = "") {
  return "name: t\n"
         "controller: {max_io_queue_pairs: 8, volatile_write_cache: false}\n"
         "namespaces:\n"
         "  - {size: 1MiB, lba_size: 512}\n" +
         extra;
}

std::string parse_error(const std::string& yaml) {
  auto r = parse_profile(yaml);
  if (r.ok()) return "(parsed)";
  return r.error();
}

TEST(Profile, MinimalProfileParses) {
  auto r = parse_profile(base_yaml());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().name, "t");
  EXPECT_EQ(r.value().media, MediaKind::kNone);
  EXPECT_EQ(r.value().fidelity, Fidelity::kTimed);
  // Durations in every unit.
  auto d = parse_profile(base_yaml(
      "firmware: {read: 8.9us, write: 70 us, flush: 3ms, admin: 250ns, other: 0, per_unit: 12ps}\n"));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().firmware.read, 8900 * kNs);
  EXPECT_EQ(d.value().firmware.write, 70 * kUs);
  EXPECT_EQ(d.value().firmware.flush, 3 * kMs);
  EXPECT_EQ(d.value().firmware.admin, 250 * kNs);
  EXPECT_EQ(d.value().firmware.other, 0u);
  EXPECT_EQ(d.value().firmware.per_unit, 12u);
}

TEST(Profile, UnknownKeysAreNamed) {
  std::string e = parse_error(base_yaml("nmae: x\n"));
  EXPECT_THAT(e, HasSubstr("nmae"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
  e = parse_error(base_yaml("pcie: {lanez: 4}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.lanez"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
  EXPECT_THAT(e, HasSubstr("lanes"));  // the expected keys are listed
  for (const char* section : {"frontend", "firmware", "optane", "nand", "cache"}) {
    e = parse_error(base_yaml(std::string(section) + ": {bogus_key: 1}\n"));
    EXPECT_THAT(e, HasSubstr(std::string(section) + ".bogus_key")) << section;
  }
  // The functional controller's own keys are checked by its parser.
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: false, serail: x}\n"
      "namespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("serail"));
  // A section that is not a mapping.
  e = parse_error(base_yaml("pcie: 4\n"));
  EXPECT_THAT(e, HasSubstr("pcie: expected a mapping"));
}

TEST(Profile, BadDurations) {
  std::string e = parse_error(base_yaml("firmware: {read: 5 parsecs}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.read"));
  EXPECT_THAT(e, HasSubstr("5 parsecs"));
  EXPECT_THAT(e, HasSubstr("not a duration"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: 5}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: -1us}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: us}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: [1us]}\n")), HasSubstr("firmware.read"));
  // Above the field's maximum (10 s; 1 ms for link latencies).
  EXPECT_THAT(parse_error(base_yaml("firmware: {read: 11s}\n")), HasSubstr("firmware.read"));
  EXPECT_THAT(parse_error(base_yaml("pcie: {dma_read_latency: 2ms}\n")),
              HasSubstr("pcie.dma_read_latency"));
  EXPECT_TRUE(parse_profile(base_yaml("pcie: {dma_read_latency: 1ms}\n")).ok());
}

TEST(Profile, BadIntegers) {
  std::string e = parse_error(base_yaml("pcie: {lanes: 32}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.lanes"));
  EXPECT_THAT(e, HasSubstr("out of range"));
  e = parse_error(base_yaml("pcie: {generation: 6}\n"));
  EXPECT_THAT(e, HasSubstr("pcie.generation"));
  EXPECT_THAT(e, HasSubstr("out of range [0, 5]"));
  e = parse_error(base_yaml("frontend: {clock_mhz: 0}\n"));
  EXPECT_THAT(e, HasSubstr("frontend.clock_mhz"));
  e = parse_error(base_yaml("frontend: {max_outstanding: -1}\n"));
  EXPECT_THAT(e, HasSubstr("frontend.max_outstanding"));
  EXPECT_THAT(e, HasSubstr("not an integer"));
  e = parse_error(base_yaml("firmware: {cores: two}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.cores"));
  EXPECT_THAT(e, HasSubstr("not an integer"));
  e = parse_error(base_yaml("firmware: {cores: 1.5}\n"));
  EXPECT_THAT(e, HasSubstr("firmware.cores"));
  // Powers of two.
  EXPECT_THAT(parse_error(base_yaml("pcie: {lanes: 3}\n")), HasSubstr("pcie.lanes"));
  EXPECT_THAT(parse_error(base_yaml("pcie: {max_payload: 384}\n")), HasSubstr("max_payload"));
  // The timed device's own limits.
  EXPECT_THAT(parse_error("name: t\ncontroller: {volatile_write_cache: false, max_io_queue_pairs: 32}\n"
                          "namespaces:\n  - {size: 1MiB}\n"),
              HasSubstr("controller.max_io_queue_pairs"));
  EXPECT_THAT(parse_error("name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: false}\n"
                          "namespaces:\n  - {size: 1MiB}\n  - {size: 1MiB}\n"),
              HasSubstr("one namespace"));
}

TEST(Profile, BadMedia) {
  std::string e = parse_error(base_yaml("media: tape\n"));
  EXPECT_THAT(e, HasSubstr("media"));
  EXPECT_THAT(e, HasSubstr("'tape'"));
  // Optane needs its read time; NAND its timings.
  EXPECT_THAT(parse_error(base_yaml("media: optane\n")), HasSubstr("optane.read"));
  EXPECT_TRUE(parse_profile(base_yaml("media: optane\noptane: {read: 4us}\n")).ok());
  EXPECT_THAT(parse_error(base_yaml("media: nand\nnand: {precondition: full}\n")),
              HasSubstr("nand.precondition"));
}

// The ledger's model keys: parsed, and checked.
TEST(Profile, ModelKeys) {
  const std::string nand =
      "media: nand\nnand: {channels: 2, dies_per_channel: 2, planes_per_die: 1, "
      "blocks_per_plane: 64, pages_per_block: 16, t_read: 50us, t_prog: 600us, t_erase: 3ms, ";
  auto r = parse_profile(base_yaml(
      "firmware: {read: 2us, turnaround: 0.5us, jitter: 0.25, read_latency: 3us, write_latency: 15us}\n"
      "datapath: {read_mb_s: 2800, write_mb_s: 1900}\n" +
      nand +
      "t_read_die_spread: 0.03, t_read_jitter: 5us, read_retry_rate: 1e-3, read_retry_steps: 2, "
      "register_hits: true, read_ahead_groups: 4, suspend: true, t_suspend: 20us, t_resume: 10us, "
      "t_prog_slc: 150us, slc_bytes: 64KiB, slc_fold_after_idle: 2ms}\n"));
  ASSERT_TRUE(r.ok()) << r.error();
  const Profile& p = r.value();
  EXPECT_EQ(p.firmware.turnaround, 500 * kNs);
  EXPECT_DOUBLE_EQ(p.firmware.jitter, 0.25);
  EXPECT_EQ(p.firmware.read_latency, 3 * kUs);
  EXPECT_EQ(p.firmware.write_latency, 15 * kUs);
  EXPECT_EQ(p.datapath.read_bytes_per_second, 2'800'000'000u);
  EXPECT_EQ(p.datapath.write_bytes_per_second, 1'900'000'000u);
  EXPECT_DOUBLE_EQ(p.nand_timing.t_read_die_spread, 0.03);
  EXPECT_EQ(p.nand_timing.t_read_jitter, 5 * kUs);
  EXPECT_DOUBLE_EQ(p.nand_timing.read_retry_rate, 0.001);
  EXPECT_EQ(p.nand_timing.read_retry_steps, 2u);
  EXPECT_TRUE(p.nand_timing.register_hits);
  EXPECT_EQ(p.ftl.read_ahead_groups, 4u);
  EXPECT_TRUE(p.nand_timing.suspend);
  EXPECT_EQ(p.nand_timing.t_suspend, 20 * kUs);
  EXPECT_EQ(p.nand_timing.t_resume, 10 * kUs);
  EXPECT_EQ(p.nand_timing.t_prog_slc, 150 * kUs);
  EXPECT_EQ(p.ftl.slc_bytes, 65536u);
  EXPECT_EQ(p.ftl.slc_fold_after_idle, 2 * kMs);
  // Without the keys: off.
  auto off = parse_profile(base_yaml());
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.value().datapath.read_bytes_per_second, 0u);
  EXPECT_EQ(off.value().firmware.turnaround, 0u);
  // Errors name the field.
  EXPECT_THAT(parse_error(base_yaml(nand + "t_read_die_spread: 0.9}\n")),
              HasSubstr("nand.t_read_die_spread: 0.9 is out of range"));
  EXPECT_THAT(parse_error(base_yaml(nand + "read_retry_rate: often}\n")),
              HasSubstr("nand.read_retry_rate: 'often' is not a number"));
  EXPECT_THAT(parse_error(base_yaml(nand + "slc_bytes: 1MiB}\n")), HasSubstr("t_prog_slc"));
  EXPECT_THAT(parse_error(base_yaml("firmware: {jitter: 2}\n")), HasSubstr("firmware.jitter"));
  EXPECT_THAT(parse_error(base_yaml("datapath: {read_mb_s: 0}\n")), HasSubstr("datapath.read_mb_s"));
  EXPECT_THAT(parse_error(base_yaml("datapath: {rate: 1}\n")), HasSubstr("datapath.rate: unknown key"));
}

TEST(Profile, ScaleCapacityScalesTheSlcCache) {
  auto p = load_profile("gen4-tlc");
  ASSERT_TRUE(p.ok());
  Profile q = p.value();
  const double before = double(q.controller.namespaces[0].size_bytes);
  const uint64_t slc = q.ftl.slc_bytes;
  ASSERT_TRUE(scale_capacity(q, 64, 48).ok());
  const double ratio = double(q.controller.namespaces[0].size_bytes) / before;
  EXPECT_NEAR(double(q.ftl.slc_bytes) / double(slc), ratio, 0.001);
  EXPECT_EQ(q.ftl.slc_bytes % 4096, 0u);
}

TEST(Profile, NameIsRequired) {
  const std::string e = parse_error(
      "controller: {max_io_queue_pairs: 8, volatile_write_cache: false}\nnamespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("name: required"));
  EXPECT_THAT(parse_error("- a\n- b\n"), HasSubstr("mapping"));
  EXPECT_THAT(parse_error("name: [unclosed\n"), HasSubstr("YAML"));
}

TEST(Profile, VolatileWriteCacheMustMatchTheCache) {
  // A DRAM cache without power-loss protection is volatile: Identify VWC must say so.
  std::string e = parse_error(base_yaml("cache: {bytes: 1MiB, power_loss_protection: false}\n"));
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  auto ok = parse_profile(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n"
      "cache: {bytes: 1MiB, power_loss_protection: false}\n");
  EXPECT_TRUE(ok.ok()) << ok.error();
  // Protected cache, or no cache: not volatile.
  EXPECT_TRUE(parse_profile(base_yaml("cache: {bytes: 1MiB, power_loss_protection: true}\n")).ok());
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n");
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  e = parse_error(
      "name: t\ncontroller: {max_io_queue_pairs: 8, volatile_write_cache: true}\nnamespaces:\n  - {size: 1MiB}\n"
      "cache: {bytes: 1MiB, power_loss_protection: true}\n");
  EXPECT_THAT(e, HasSubstr("controller.volatile_write_cache"));
  // validate() checks a profile changed in code the same way.
  Profile p = parse_profile(base_yaml()).value();
  p.cache.bytes = 4096;
  p.cache.power_loss_protection = false;
  EXPECT_THAT(validate(p).error(), HasSubstr("controller.volatile_write_cache"));
  p.controller.volatile_write_cache = true;
  EXPECT_TRUE(validate(p).ok()) << validate(p).error();
  p.cache.bytes = 4097;
  EXPECT_THAT(validate(p).error(), HasSubstr("cache.bytes"));
  EXPECT_THAT(parse_error(base_yaml("cache: {bytes: 3 apples}\n")), HasSubstr("cache.bytes"));
  EXPECT_THAT(parse_error(base_yaml("cache: {power_loss_protection: maybe}\n")),
              HasSubstr("cache.power_loss_protection"));
}

TEST(Profile, Fidelity) {
  EXPECT_EQ(parse_fidelity("functional").value(), Fidelity::kFunctional);
  EXPECT_EQ(parse_fidelity("timed").value(), Fidelity::kTimed);
  EXPECT_EQ(parse_fidelity("rtl").value(), Fidelity::kRtl);
  auto bad = parse_fidelity("exact");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("'exact'"));
  EXPECT_THAT(bad.error(), HasSubstr("functional, timed, rtl"));
  for (Fidelity f : {Fidelity::kFunctional, Fidelity::kTimed, Fidelity::kRtl}) {
    EXPECT_EQ(parse_fidelity(to_string(f)).value(), f);
  }
  EXPECT_EQ(parse_profile(base_yaml("fidelity: rtl\n")).value().fidelity, Fidelity::kRtl);
  EXPECT_EQ(parse_profile(base_yaml("fidelity: functional\n")).value().fidelity,
            Fidelity::kFunctional);
  const std::string e = parse_error(base_yaml("fidelity: exact\n"));
  EXPECT_THAT(e, HasSubstr("fidelity"));
  EXPECT_THAT(e, HasSubstr("'exact'"));
}

std::string temp_dir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

TEST(Profile, LoadFromPath) {
  const std::string path = temp_dir() + "/timing_test_profile.yaml";
  {
    std::ofstream out(path);
    out << base_yaml("media: optane\noptane: {read: 4us}\n");
  }
  auto r = load_profile(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().media, MediaKind::kOptane);
  EXPECT_EQ(r.value().optane.read, 4 * kUs);
  // Errors inside the file name the file.
  {
    std::ofstream out(path);
    out << base_yaml("pcie: {lanez: 4}\n");
  }
  r = load_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr(path));
  EXPECT_THAT(r.error(), HasSubstr("pcie.lanez"));
  std::remove(path.c_str());
}

TEST(Profile, MissingPathIsNamed) {
  const std::string path = temp_dir() + "/no/such/dir/profile.yaml";
  auto r = load_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr(path));
  auto f = load_profile_file("missing.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error(), HasSubstr("missing.yaml"));
  // A bare name ending in .yaml is taken as a path too.
  r = load_profile("missing.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("missing.yaml"));
  EXPECT_THAT(r.error(), HasSubstr("cannot open"));
}

TEST(Profile, UnknownBuiltinListsTheBuiltins) {
  auto r = load_profile("p4800");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("'p4800'"));
  for (const char* name : {"p4800x", "p3700", "gen4-tlc", "null"}) {
    EXPECT_THAT(r.error(), HasSubstr(name));
  }
}

// Raw NAND bytes over logical bytes.
double spare_ratio(const Profile& p) {
  const NandGeometry& g = p.nand_geometry;
  const double raw = double(g.channels) * g.dies_per_channel * g.planes_per_die *
                     g.blocks_per_plane * g.pages_per_block * g.page_bytes;
  return raw / double(p.controller.namespaces[0].size_bytes);
}

TEST(Profile, ScaleCapacityKeepsTheSpareRatio) {
  for (const char* name : {"p3700", "gen4-tlc"}) {
    Profile p = load_profile(name).value();
    const Profile full = p;
    const double ratio = spare_ratio(p);
    {
      const auto s = scale_capacity(p, 128);
      ASSERT_TRUE(s.ok()) << name << ": " << s.error();
    }
    EXPECT_EQ(p.nand_geometry.blocks_per_plane, 128u);
    EXPECT_EQ(p.nand_geometry.pages_per_block, full.nand_geometry.pages_per_block);
    EXPECT_EQ(p.nand_geometry.channels, full.nand_geometry.channels);
    EXPECT_EQ(p.nand_geometry.dies_per_channel, full.nand_geometry.dies_per_channel);
    EXPECT_EQ(p.nand_geometry.planes_per_die, full.nand_geometry.planes_per_die);
    EXPECT_EQ(p.nand_timing.t_erase, full.nand_timing.t_erase);  // same block size
    EXPECT_EQ(p.nand_timing.t_read, full.nand_timing.t_read);
    EXPECT_EQ(p.nand_timing.t_prog, full.nand_timing.t_prog);
    const uint64_t ns = p.controller.namespaces[0].size_bytes;
    EXPECT_EQ(ns % 4096, 0u);
    EXPECT_EQ(p.ftl.logical_bytes, ns);
    // The namespace shrinks in proportion, in whole 4 KiB units.
    EXPECT_NEAR(double(ns),
                double(full.controller.namespaces[0].size_bytes) * 128 /
                    full.nand_geometry.blocks_per_plane,
                4096.0);
    EXPECT_NEAR(spare_ratio(p), ratio, ratio * 1e-3) << name;
    EXPECT_TRUE(validate(p).ok()) << validate(p).error();
  }
}

TEST(Profile, ScaleCapacityScalesEraseTimeWithTheBlock) {
  Profile p = load_profile("p3700").value();
  const double ratio = spare_ratio(p);
  ASSERT_EQ(p.nand_geometry.pages_per_block, 256u);
  ASSERT_EQ(p.nand_timing.t_erase, 3 * kMs);
  {
    const auto s = scale_capacity(p, 128, 64);
    ASSERT_TRUE(s.ok()) << s.error();
  }
  EXPECT_EQ(p.nand_geometry.blocks_per_plane, 128u);
  EXPECT_EQ(p.nand_geometry.pages_per_block, 64u);
  EXPECT_EQ(p.nand_timing.t_erase, 3 * kMs / 4);  // a quarter of the block, a quarter of tBERS
  EXPECT_NEAR(spare_ratio(p), ratio, ratio * 1e-3);
}

TEST(Profile, ScaleCapacityErrors) {
  Profile o = load_profile("p4800x").value();
  EXPECT_THAT(scale_capacity(o, 16).error(), HasSubstr("NAND"));
  Profile n = load_profile("p3700").value();
  EXPECT_THAT(scale_capacity(n, 1).error(), HasSubstr("2 blocks"));
  // So few blocks that GC's reserve eats the spare area: validation says so.
  EXPECT_THAT(scale_capacity(n, 16).error(), HasSubstr("over-provisioning"));
}

}  // namespace
}  // namespace pollux::emu::timing
