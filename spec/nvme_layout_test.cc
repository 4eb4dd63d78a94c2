// Field encodings of spec/nvme.h checked against values worked out from the NVMe base spec
// (offsets are checked at compile time by static_asserts in the header).
#include "spec/nvme.h"

#include <gtest/gtest.h>

namespace pollux::spec::nvme {
namespace {

TEST(NvmeSpec, CapRoundTrips) {
  const uint64_t c = cap::make(1023, true, 20, 0, true, cap::kCssNvm, 0, 4);
  EXPECT_EQ(cap::mqes(c), 1023u);
  EXPECT_TRUE(cap::cqr(c));
  EXPECT_EQ(cap::to(c), 20u);
  EXPECT_EQ(cap::dstrd(c), 0u);
  EXPECT_TRUE(cap::nssrs(c));
  EXPECT_EQ(cap::css(c), cap::kCssNvm);
  EXPECT_EQ(cap::mpsmax(c), 4u);
  // QEMU's NVMe device reports CAP=0x004018200f0107ff (ENVIRONMENT.md): decode it.
  const uint64_t qemu = 0x004018200f0107ffull;
  EXPECT_EQ(cap::mqes(qemu), 0x7ffu);
  EXPECT_TRUE(cap::cqr(qemu));
  EXPECT_EQ(cap::to(qemu), 0x0fu);
  EXPECT_EQ(cap::css(qemu) & cap::kCssNvm, 1u);
  EXPECT_EQ(cap::mpsmin(qemu), 0u);
  EXPECT_EQ(cap::mpsmax(qemu), 4u);
}

TEST(NvmeSpec, DoorbellOffsetsFollowTheStride) {
  EXPECT_EQ(reg::sq_tail_doorbell(0, 0), 0x1000u);
  EXPECT_EQ(reg::cq_head_doorbell(0, 0), 0x1004u);
  EXPECT_EQ(reg::sq_tail_doorbell(1, 0), 0x1008u);
  EXPECT_EQ(reg::cq_head_doorbell(3, 0), 0x101cu);
  EXPECT_EQ(reg::sq_tail_doorbell(1, 2), 0x1000u + 2 * 16);
}

TEST(NvmeSpec, CcAndStatusFields) {
  const uint32_t c = cc::make(true, 0, 0, cc::kAmsRoundRobin, cc::kShnNone, 6, 4);
  EXPECT_EQ(c, 0x00460001u);  // the value Linux and SPDK write for 4 KiB pages
  EXPECT_EQ(cc::iosqes(c), 6u);
  EXPECT_EQ(cc::iocqes(c), 4u);
  const uint16_t s = status::make(sct::kMediaError, sc_media::kUnrecoveredReadError, true);
  EXPECT_EQ(status::sct(s), 2);
  EXPECT_EQ(status::sc(s), 0x81);
  EXPECT_TRUE(status::dnr(s));
  EXPECT_FALSE(status::phase(s));
  EXPECT_FALSE(status::more(s));
}

TEST(NvmeSpec, EntryFieldsSitWhereTheSpecPutsThem) {
  SubmissionEntry e{};
  e.set_psdt(kPsdtSglMptrContiguous);
  EXPECT_EQ(e.flags, 0x40);
  EXPECT_EQ(e.psdt(), 1);
  e.dptr.sgl1.id = SglDescriptor::make_id(sgl::kTypeLastSegment, sgl::kSubtypeAddress);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(&e)[39], 0x30);  // byte 15 of the SGL descriptor
  EXPECT_EQ(aer::make_dw0(aer::kTypeNotice, 0, log::kChangedNamespaceList), 0x00040002u);
}

}  // namespace
}  // namespace pollux::spec::nvme
