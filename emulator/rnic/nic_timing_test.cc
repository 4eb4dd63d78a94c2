// The NIC timing model's parts, each against hand-computed arithmetic: profiles (loading,
// errors that name the field), frame sizes and serialisation at 25/100/200 Gb/s, the PCIe
// DMA the NIC does (the SSD's link model), the pipelines' latency and message rate, PFC
// headroom, and each built-in profile against the latency its adapter's brief publishes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "emulator/rnic/nic_profile.h"
#include "emulator/rnic/nic_timing.h"
#include "spec/rnic.h"

namespace pollux::emu::rnic {
namespace {

using timing::kNs;

NicProfile builtin(const char* name) {
  auto p = load_nic_profile(name);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error());
  return p.ok() ? p.value() : NicProfile{};
}

std::string error_of(const std::string& yaml) {
  auto p = parse_nic_profile(yaml);
  return p.ok() ? "" : p.error();
}

// ------------------------------------------------------------------------------ profiles ---

TEST(NicProfile, BuiltinsLoadWithTheirSetUps) {
  const NicProfile cx5 = builtin("cx5-100g");
  EXPECT_EQ(cx5.port.rate_gbps, 100u);
  EXPECT_TRUE(cx5.sw.present);
  EXPECT_TRUE(cx5.sw.pfc);
  EXPECT_EQ(cx5.pcie.lanes, 16u);
  EXPECT_FALSE(cx5.sources.empty());
  const NicProfile paper = builtin("cx4lx-25g");
  EXPECT_EQ(paper.port.rate_gbps, 25u);
  EXPECT_FALSE(paper.sw.present) << "the SPDK paper's hosts are cabled back to back";
  EXPECT_EQ(paper.pcie.lanes, 8u);
  EXPECT_NE(builtin_nic_profile_names().find("cx5-100g"), std::string::npos);
}

TEST(NicProfile, UnknownNameListsTheBuiltins) {
  auto p = load_nic_profile("cx9");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("cx5-100g"), std::string::npos) << p.error();
}

TEST(NicProfile, ErrorsNameTheField) {
  EXPECT_NE(error_of("name: x\nport: {rate_gbps: 30}\n").find("port.rate_gbps"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nnic: {tx_latncy: 1ns}\n").find("nic.tx_latncy: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\nnic: {rx_latency: fast}\n").find("nic.rx_latency"),
            std::string::npos);
  EXPECT_NE(error_of("name: x\npcie: {lanes: 3}\n").find("pcie.lanes"), std::string::npos);
  EXPECT_NE(error_of("name: x\nswitch: {pfc: true}\n").find("present: true"), std::string::npos);
  EXPECT_NE(error_of("port: {rate_gbps: 25}\n").find("name: required"), std::string::npos);
  EXPECT_NE(error_of("name: x\nname: y\n").find("given twice"), std::string::npos);
}

TEST(NicProfile, PfcWithoutEnoughHeadroomIsRefused) {
  const std::string base =
      "name: x\nport: {rate_gbps: 100, propagation: 1us}\n"
      "switch: {present: true, port_latency: 300ns, buffer_bytes: 64KiB, pfc: true, ";
  // 100 Gb/s with 1 us cables: 2 us + 300 ns + the pause frame's 6.72 ns of exposure is
  // 28,834 bytes in flight, plus two full frames of 4,198: 37,230 bytes above XOFF.
  EXPECT_NE(error_of(base + "xoff_bytes: 40KiB, xon_bytes: 20KiB}\n").find("PFC needs 37230"),
            std::string::npos)
      << error_of(base + "xoff_bytes: 40KiB, xon_bytes: 20KiB}\n");
  EXPECT_EQ(error_of(base + "xoff_bytes: 24KiB, xon_bytes: 20KiB}\n"), "");
  EXPECT_NE(error_of(base + "xoff_bytes: 20KiB, xon_bytes: 20KiB}\n").find("xon_bytes < xoff"),
            std::string::npos);
}

// --------------------------------------------------------------------- the port's arithmetic ---

TEST(PortArithmetic, FrameSizeAddsRoceFramingAndPadsToTheMinimum) {
  PortProfile p;  // 66 bytes of framing
  // A full SEND at MTU 4096: BTH 12 + payload + ICRC 4 = 4,112; on the wire 4,178.
  EXPECT_EQ(wire_bytes(p, 4112), 4178u);
  // An ACK (BTH + AETH + ICRC = 20) makes an 86-byte frame; nothing is shorter than 64 + 20.
  EXPECT_EQ(wire_bytes(p, 20), 86u);
  EXPECT_EQ(wire_bytes(p, 0), 84u);
}

TEST(PortArithmetic, SerialisationOfAnMtuAt25_100_200Gbps) {
  PortProfile p;
  p.rate_gbps = 100;
  // 4,178 bytes * 8 / 100 Gb/s = 334.24 ns.
  EXPECT_EQ(serialisation_time(p, 4112), 334'240u);
  p.rate_gbps = 25;
  EXPECT_EQ(serialisation_time(p, 4112), 1'336'960u);  // 1.33696 us
  p.rate_gbps = 200;
  EXPECT_EQ(serialisation_time(p, 4112), 167'120u);
  // Goodput of 4 KiB payloads at 100 Gb/s: 4096 / 4178 of the line = 98.04 Gb/s.
  p.rate_gbps = 100;
  const double gbps = 4096.0 * 8 / (static_cast<double>(serialisation_time(p, 4112)) / 1000);
  EXPECT_NEAR(gbps, 98.04, 0.01);
}

TEST(PortArithmetic, PfcHeadroomIsTheExposureTimesTheRatePlusTwoFrames) {
  NicProfile p;
  p.port.rate_gbps = 100;
  p.port.propagation = 10 * kNs;
  p.sw.port_latency = 300 * kNs;
  // (2 * 10 + 300 + 6.72) ns * 12.5 B/ns = 4,084 bytes; two 4,132-byte packets' frames 8,396.
  EXPECT_EQ(pfc_headroom_bytes(p, 4132), 4084u + 2 * 4198);
}

// ---------------------------------------------------------------------- the NIC's timing ---

NicProfile cx5_like() {
  NicProfile p;
  p.pcie.generation = 3;
  p.pcie.lanes = 16;  // 15,753,846,153 bytes/s after 128b/130b
  p.pcie.max_payload = 256;
  p.pcie.max_read_request = 512;
  p.pcie.tlp_overhead = 24;
  p.pcie.mmio_write_latency = 150 * kNs;
  p.pcie.dma_read_latency = 500 * kNs;
  p.pcie.dma_write_latency = 150 * kNs;
  p.nic.wqe_latency = 50 * kNs;
  p.nic.tx_latency = 100 * kNs;
  p.nic.rx_latency = 100 * kNs;
  p.nic.packet_interval = 5 * kNs;
  return p;
}

TEST(NicTiming, DoorbellCrossesTheLinkAsAnMmioWrite) {
  NicTiming t(cx5_like());
  EXPECT_EQ(t.doorbell(1000 * kNs), 1150 * kNs);
}

TEST(NicTiming, WqeFetchIsAReadRoundTripThenTheWqeStage) {
  NicTiming t(cx5_like());
  // Request up: 24 B = 1,524 ps; 500 ns; completion down: 128 + 24 B = 9,649 ps; 50 ns.
  EXPECT_EQ(t.fetch_wqe(0, 0), 1'524u + 500'000 + 9'649 + 50'000);
}

TEST(NicTiming, APushedWqeComesWithItsDoorbellWithoutAReadRoundTrip) {
  NicTiming t(cx5_like());
  // The doorbell's MMIO write (150 ns), its 128 bytes in two TLPs of 24 B overhead, 50 ns.
  const SimTime wc = timing::transfer_time(128 + 2 * 24, t.pcie().raw_bytes_per_second());
  EXPECT_GT(wc, 0u);
  EXPECT_EQ(t.pushed_wqe(0), 150'000 + wc + 50'000);
  EXPECT_LT(t.pushed_wqe(0) + 400'000, t.fetch_wqe(0, t.doorbell(0))) << "a read round trip less";
}

TEST(NicTiming, PayloadReadIsSplitIntoReadRequestsAndCompletions) {
  NicTiming t(cx5_like());
  // 4 KiB: 8 requests of 512 B (8 * 24 B up = 12,188 ps), 500 ns, then 4,096 B in 16
  // completions of 256 B (+16 * 24 B) down = 284,376 ps.
  const SimTime first = t.read_payload(0, 0, 4096);
  EXPECT_EQ(first, 12'188u + 500'000 + 284'376);
  // A second read right after shares the link: its requests go up behind the first's, and
  // its data come down after the first's.
  EXPECT_EQ(t.read_payload(0, 0, 4096), first + 284'376);
  EXPECT_EQ(t.read_payload(0, 7, 0), 7u) << "nothing to read costs nothing";
}

TEST(NicTiming, WritesArePostedAndQueueOnTheUpstreamLink) {
  NicTiming t(cx5_like());
  // 64 B + one TLP header: 5,586 ps on the link, visible 150 ns later.
  EXPECT_EQ(t.write(0, 64), 5'586u + 150'000);
  // The CQE after it waits for the link (3,555 ps for 32 + 24 B).
  EXPECT_EQ(t.write(0, 32), 5'586u + 3'555 + 150'000);
}

TEST(NicTiming, PipelinesAddTheirLatencyAndTakeOnePacketPerInterval) {
  NicTiming t(cx5_like());
  EXPECT_EQ(t.transmit(0), 100 * kNs);
  EXPECT_EQ(t.transmit(0), 105 * kNs);  // 200 M packets/s: 5 ns behind the first
  EXPECT_EQ(t.transmit(0), 110 * kNs);
  EXPECT_EQ(t.transmit(1000 * kNs), 1100 * kNs);  // idle again
  EXPECT_EQ(t.receive(0), 100 * kNs);
  EXPECT_EQ(t.receive(2 * kNs), 105 * kNs);  // receive has its own pipeline
}

// The adapters' briefs publish one latency: a small message from the host's doorbell to the
// remote host's memory, NICs cabled back to back. Each profile's parts must add up to it.
SimTime published_path(const NicProfile& p) {
  NicTiming tx(p), rx(p);
  const SimTime at_nic = tx.doorbell(0) + p.nic.wqe_latency;  // WQE written by MMIO (inline)
  const SimTime at_mac = tx.transmit(at_nic);
  const SimTime arrived = at_mac + serialisation_time(p.port, 12 + 64 + 4) + p.port.propagation;
  const SimTime in_nic = rx.receive(arrived);
  rx.write(in_nic, 64);
  return rx.write(in_nic, sizeof(spec::rnic::Cqe));  // the CQE the host polls, after the data
}

TEST(NicProfile, Cx5IsSubSixHundredNanoseconds) {
  const SimTime t = published_path(builtin("cx5-100g"));
  std::printf("[figure] cx5-100g doorbell to remote host memory, 64 B, back to back: %.1f ns\n",
              static_cast<double>(t) / kNs);
  EXPECT_LT(t, 600 * kNs) << t;
  EXPECT_GT(t, 450 * kNs) << t;  // and not much less: the brief's figure is the whole path
}

TEST(NicProfile, Cx4LxIsSubMicrosecond) {
  const SimTime t = published_path(builtin("cx4lx-25g"));
  std::printf("[figure] cx4lx-25g doorbell to remote host memory, 64 B, back to back: %.1f ns\n",
              static_cast<double>(t) / kNs);
  EXPECT_LT(t, 1000 * kNs) << t;
  EXPECT_GT(t, 800 * kNs) << t;
}

}  // namespace
}  // namespace pollux::emu::rnic
