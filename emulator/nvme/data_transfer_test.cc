// PRP and SGL data transfer, DMA faults.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

class Dt : public ::testing::Test {
 protected:
  explicit Dt(ControllerConfig cfg = small_config()) : h(std::move(cfg)) {}
  void SetUp() override {
    ASSERT_TRUE(h.enable(32, mps));
    ASSERT_TRUE(h.create_io_queue_pair(1, 64));
  }
  sp::CompletionEntry io(const sp::SubmissionEntry& c) { return h.io(1, c); }
  // Writes `n` bytes of a pattern at ns 2 (4 KiB blocks) LBA 0 through a simple buffer.
  std::vector<uint8_t> seed(size_t n, uint8_t s = 1) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(s + i * 31 + (i >> 12));
    const size_t page = h.ctrl().memory_page_size();
    uint8_t* b = h.alloc(n, page);
    std::memcpy(b, v.data(), n);
    std::vector<uint64_t> pages;
    for (size_t o = page; o < n; o += page) pages.push_back(TestHost::iova(b) + o);
    auto c = TestHost::rw(sp::nvm::kWrite, 2, 0, static_cast<uint32_t>(n / 4096), TestHost::iova(b));
    if (pages.size() == 1) c.dptr.prp.prp2 = pages[0];
    if (pages.size() > 1) c.dptr.prp.prp2 = prp_list(pages);
    EXPECT_TRUE(ok(io(c)));
    return v;
  }
  // PRP list pages (one page each, page aligned), chained through their last entry.
  uint64_t prp_list(const std::vector<uint64_t>& pages) {
    const size_t page = h.ctrl().memory_page_size(), slots = page / 8;
    uint64_t first = 0;
    uint64_t* prev_chain = nullptr;
    size_t i = 0;
    while (i < pages.size()) {
      auto* l = reinterpret_cast<uint64_t*>(h.alloc(page, page));
      if (prev_chain) *prev_chain = TestHost::iova(l);
      if (!first) first = TestHost::iova(l);
      const size_t left = pages.size() - i;
      const size_t n = left <= slots ? left : slots - 1;
      for (size_t k = 0; k < n; ++k) l[k] = pages[i++];
      prev_chain = n == slots - 1 && left > slots - 1 ? &l[slots - 1] : nullptr;
    }
    return first;
  }
  static sp::SubmissionEntry read(uint32_t nlb) { return TestHost::rw(sp::nvm::kRead, 2, 0, nlb, 0); }
  void expect(const sp::CompletionEntry& c, uint8_t sc) {
    EXPECT_EQ(sct_of(c), sp::sct::kGeneric);
    EXPECT_EQ(sc_of(c), sc);
  }

  TestHost h;
  uint32_t mps = 0;
};

// ------------------------------------------------------------------------------ PRP ---

TEST_F(Dt, PageSizedTransferIgnoresPrp2) {
  auto data = seed(4096);
  uint8_t* b = h.alloc(4096);
  auto c = read(1);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = 0xdead0003;  // unused: must not be looked at
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b, data.data(), 4096), 0);
}

TEST_F(Dt, UnalignedPrp1SpillsIntoPrp2) {
  auto data = seed(4096);
  uint8_t* b = h.alloc(3 * 4096);
  auto c = read(1);
  c.dptr.prp.prp1 = TestHost::iova(b) + 0x204;  // dword aligned offset
  c.dptr.prp.prp2 = TestHost::iova(b) + 2 * 4096;  // the rest goes to a different page
  ASSERT_TRUE(ok(io(c)));
  const size_t first = 4096 - 0x204;
  EXPECT_EQ(std::memcmp(b + 0x204, data.data(), first), 0);
  EXPECT_EQ(std::memcmp(b + 2 * 4096, data.data() + first, 0x204), 0);
  EXPECT_EQ(b[0x203], 0);
  EXPECT_EQ(b[2 * 4096 + 0x204], 0);
  // PRP1 that is not dword aligned, PRP2 data pointer with an offset.
  c.dptr.prp.prp1 = TestHost::iova(b) + 0x202;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
  c.dptr.prp.prp1 = TestHost::iova(b) + 0x204;
  c.dptr.prp.prp2 = TestHost::iova(b) + 2 * 4096 + 8;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
}

TEST_F(Dt, PrpListWithinOnePageInReverseOrder) {
  auto data = seed(32 * 4096);  // 128 KiB = MDTS
  uint8_t* b = h.alloc(32 * 4096);
  auto* list = reinterpret_cast<uint64_t*>(h.alloc(4096));
  // Page i of the transfer goes to host page (32 - i): scattered, not contiguous.
  for (int i = 1; i < 32; ++i) list[i - 1] = TestHost::iova(b) + (32 - i) * 4096;
  auto c = read(32);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = TestHost::iova(list);
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b, data.data(), 4096), 0);
  for (int i = 1; i < 32; ++i) {
    ASSERT_EQ(std::memcmp(b + (32 - i) * 4096, data.data() + i * 4096, 4096), 0) << i;
  }
}

TEST_F(Dt, PrpListPointerWithOffsetAndBadEntries) {
  auto data = seed(4 * 4096);
  uint8_t* b = h.alloc(4 * 4096);
  uint8_t* lp = h.alloc(4096);
  auto* list = reinterpret_cast<uint64_t*>(lp + 0x100);  // list starts 256 bytes into its page
  for (int i = 1; i < 4; ++i) list[i - 1] = TestHost::iova(b) + i * 4096;
  auto c = read(4);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = TestHost::iova(list);
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b, data.data(), 4 * 4096), 0);
  // A list pointer that is not dword aligned.
  c.dptr.prp.prp2 = TestHost::iova(list) + 2;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
  // A list entry with a page offset.
  c.dptr.prp.prp2 = TestHost::iova(list);
  list[1] += 0x200;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
}

TEST_F(Dt, PrpListChainedAtPageEnd) {
  // The list pointer sits in the last two slots of its page: one data entry, then a chain
  // pointer to the next list page.
  auto data = seed(4 * 4096);
  uint8_t* b = h.alloc(4 * 4096);
  uint8_t* l1 = h.alloc(4096);
  auto* l2 = reinterpret_cast<uint64_t*>(h.alloc(4096));
  auto* tail = reinterpret_cast<uint64_t*>(l1 + 4096 - 16);
  tail[0] = TestHost::iova(b) + 4096;
  tail[1] = TestHost::iova(l2);
  l2[0] = TestHost::iova(b) + 2 * 4096;
  l2[1] = TestHost::iova(b) + 3 * 4096;
  auto c = read(4);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = TestHost::iova(tail);
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b, data.data(), 4 * 4096), 0);
  // A chain pointer with an offset is invalid.
  tail[1] = TestHost::iova(l2) + 8;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
}

// A list pointer in the last dword of its page (dword aligned, so its offset alone is valid)
// leaves no whole entry before the page ends: refused. The device used to loop on it for ever.
TEST_F(Dt, PrpListPointerInTheLastDwordOfItsPageIsRefused) {
  seed(4 * 4096);
  uint8_t* b = h.alloc(4 * 4096);
  uint8_t* lp = h.alloc(4096);
  auto c = read(4);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = TestHost::iova(lp) + 4096 - 4;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
  // The device goes on: the same read through a proper list works.
  auto* list = reinterpret_cast<uint64_t*>(lp);
  for (int i = 1; i < 4; ++i) list[i - 1] = TestHost::iova(b) + i * 4096;
  c.dptr.prp.prp2 = TestHost::iova(lp);
  EXPECT_TRUE(ok(io(c)));
}

class DtBig : public Dt {
 protected:
  static ControllerConfig cfg() {
    ControllerConfig c = small_config();
    c.mdts = 11;  // 8 MiB
    return c;
  }
  DtBig() : Dt(cfg()) {}
};

TEST_F(DtBig, PrpListSpanningThreeListPages) {
  constexpr size_t kPages = 1100;  // 1099 list entries: 511 + 511 + 77 (+2 chain pointers)
  auto data = seed(kPages * 4096, 7);
  uint8_t* b = h.alloc(kPages * 4096);
  auto* l = reinterpret_cast<uint64_t*>(h.alloc(3 * 4096));
  size_t page = 1;
  for (int lp = 0; lp < 3; ++lp) {
    uint64_t* entries = l + lp * 512;
    for (int i = 0; i < 512 && page < kPages; ++i) {
      if (i == 511) {
        entries[i] = TestHost::iova(l + (lp + 1) * 512);
      } else {
        entries[i] = TestHost::iova(b) + page++ * 4096;
      }
    }
  }
  auto c = read(kPages);
  c.dptr.prp.prp1 = TestHost::iova(b);
  c.dptr.prp.prp2 = TestHost::iova(l);
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b, data.data(), kPages * 4096), 0);
}

class Dt8k : public Dt {
 protected:
  Dt8k() { mps = 1; }
};

TEST_F(Dt8k, MemoryPageSizeFromCcMps) {
  EXPECT_EQ(h.ctrl().memory_page_size(), 8192u);
  auto data = seed(4 * 4096);
  uint8_t* b = h.alloc(3 * 8192, 8192);
  // 16 KiB from offset 4 KiB of an 8 KiB page: 4 KiB in PRP1's page, then 12 KiB = 2 pages.
  auto* list = reinterpret_cast<uint64_t*>(h.alloc(8192, 8192));
  list[0] = TestHost::iova(b) + 8192;
  list[1] = TestHost::iova(b) + 16384;
  auto c = read(4);
  c.dptr.prp.prp1 = TestHost::iova(b) + 4096;
  c.dptr.prp.prp2 = TestHost::iova(list);
  ASSERT_TRUE(ok(io(c)));
  EXPECT_EQ(std::memcmp(b + 4096, data.data(), 4 * 4096), 0);
  // A 4 KiB-aligned entry is not 8 KiB aligned.
  list[0] = TestHost::iova(b) + 4096;
  expect(io(c), sp::sc::kPrpOffsetInvalid);
}

// -------------------------------------------------------------------------- DMA faults ---

TEST_F(Dt, UnmappedAddressesFailWithDataTransferError) {
  auto data = seed(3 * 4096);
  NamespaceStore* store = h.ctrl().namespace_store(2);
  const uint64_t allocated = store->allocated_bytes();
  uint8_t* unmapped = h.alloc(3 * 4096, 4096, /*map=*/false);
  uint8_t* mapped = h.alloc(3 * 4096);
  const uint64_t faults = h.ctrl().counters().iommu_faults;
  // Write from unmapped PRP1 to fresh LBAs: nothing written.
  auto w = TestHost::rw(sp::nvm::kWrite, 2, 100, 1, TestHost::iova(unmapped));
  expect(io(w), sp::sc::kDataTransferError);
  EXPECT_EQ(h.ctrl().counters().iommu_faults, faults + 1);
  // Write where only the last page of a PRP list is unmapped: no page is written.
  auto* list = reinterpret_cast<uint64_t*>(h.alloc(4096));
  list[0] = TestHost::iova(mapped) + 4096;
  list[1] = TestHost::iova(unmapped) + 8192;
  std::memset(mapped, 0x77, 3 * 4096);
  w = TestHost::rw(sp::nvm::kWrite, 2, 200, 3, TestHost::iova(mapped), TestHost::iova(list));
  expect(io(w), sp::sc::kDataTransferError);
  EXPECT_EQ(h.ctrl().counters().iommu_faults, faults + 2);
  EXPECT_EQ(store->allocated_bytes(), allocated);
  // Read into an unmapped PRP list pointer.
  auto r = TestHost::rw(sp::nvm::kRead, 2, 0, 3, TestHost::iova(mapped), TestHost::iova(unmapped));
  expect(io(r), sp::sc::kDataTransferError);
  // Read to a wild address.
  r = TestHost::rw(sp::nvm::kRead, 2, 0, 1, 0xfff0000000ull);
  expect(io(r), sp::sc::kDataTransferError);
  EXPECT_EQ(h.ctrl().counters().iommu_faults, faults + 4);
  // The controller is fine afterwards and the data is intact.
  EXPECT_FALSE(h.ctrl().fatal());
  r = TestHost::rw(sp::nvm::kRead, 2, 0, 1, TestHost::iova(mapped));
  ASSERT_TRUE(ok(io(r)));
  EXPECT_EQ(std::memcmp(mapped, data.data(), 4096), 0);
  // A transfer that straddles the end of a mapped region.
  uint8_t* small = h.alloc(4096);
  r = TestHost::rw(sp::nvm::kRead, 2, 0, 1, TestHost::iova(small) + 2048);
  r.dptr.prp.prp2 = TestHost::iova(unmapped);
  expect(io(r), sp::sc::kDataTransferError);
}

TEST_F(Dt, UnmappedQueueMemoryIsFatal) {
  // The SQ's memory disappears after creation: the SQE can't be fetched, nothing can be
  // completed, so the controller reports a fatal status (CSTS.CFS).
  uint8_t* b = h.alloc(4096);
  HostQueue& q = h.queue(1);
  ASSERT_TRUE(h.dma().remove_region(TestHost::iova(q.sq)));
  h.submit(q, TestHost::rw(sp::nvm::kRead, 2, 0, 1, TestHost::iova(b)));
  h.ctrl().poll(8);
  EXPECT_TRUE(h.ctrl().fatal());
  EXPECT_EQ(h.ctrl().counters().fatal_errors, 1u);
  EXPECT_EQ(h.ctrl().poll(8), 0u);
  h.disable();
  EXPECT_FALSE(h.ctrl().fatal());
}

TEST_F(Dt, UnmappedCompletionQueueIsFatal) {
  uint8_t* b = h.alloc(4096);
  HostQueue& q = h.queue(1);
  ASSERT_TRUE(h.dma().remove_region(TestHost::iova(q.cq)));
  h.submit(q, TestHost::rw(sp::nvm::kRead, 2, 0, 1, TestHost::iova(b)));
  h.ctrl().poll(8);
  EXPECT_TRUE(h.ctrl().fatal());
}

// ------------------------------------------------------------------------------ SGL ---

sp::SglDescriptor desc(uint8_t type, uint64_t addr, uint32_t len, uint8_t subtype = 0) {
  sp::SglDescriptor d{};
  d.address = addr;
  d.length = len;
  d.id = sp::SglDescriptor::make_id(type, subtype);
  return d;
}

sp::SubmissionEntry sgl_cmd(uint8_t op, uint32_t nlb, const sp::SglDescriptor& d) {
  auto c = TestHost::rw(op, 2, 0, nlb, 0);
  c.set_psdt(sp::kPsdtSglMptrContiguous);
  std::memcpy(&c.dptr, &d, sizeof d);
  return c;
}

TEST_F(Dt, SglDataBlock) {
  auto data = seed(8192);
  uint8_t* b = h.alloc(8192 + 64);
  // Byte aligned, spanning pages: SGLs have no alignment requirement.
  ASSERT_TRUE(ok(io(sgl_cmd(sp::nvm::kRead, 2, desc(sp::sgl::kTypeDataBlock, TestHost::iova(b) + 3, 8192)))));
  EXPECT_EQ(std::memcmp(b + 3, data.data(), 8192), 0);
  // And a write through an SGL.
  std::memset(b, 0x42, 4096);
  ASSERT_TRUE(ok(io(sgl_cmd(sp::nvm::kWrite, 1, desc(sp::sgl::kTypeDataBlock, TestHost::iova(b), 4096)))));
  uint8_t* r = h.alloc(4096);
  ASSERT_TRUE(ok(io(TestHost::rw(sp::nvm::kRead, 2, 0, 1, TestHost::iova(r)))));
  EXPECT_EQ(std::memcmp(b, r, 4096), 0);
}

TEST_F(Dt, SglSegmentChainWithBitBucket) {
  auto data = seed(4 * 4096);
  uint8_t* b = h.alloc(4 * 4096);
  std::memset(b, 0xcc, 4 * 4096);
  auto* seg1 = reinterpret_cast<sp::SglDescriptor*>(h.alloc(4096));
  auto* seg2 = reinterpret_cast<sp::SglDescriptor*>(h.alloc(4096));
  // Segment 1: 1000 bytes, 3096 bytes, then a Last Segment pointer.
  seg1[0] = desc(sp::sgl::kTypeDataBlock, TestHost::iova(b), 1000);
  seg1[1] = desc(sp::sgl::kTypeDataBlock, TestHost::iova(b) + 2 * 4096, 3096);
  seg1[2] = desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg2), 3 * 16);
  // Last segment: skip 4096 bytes (bit bucket), 4096 to b+4096, 4096 to b+3*4096.
  seg2[0] = desc(sp::sgl::kTypeBitBucket, 0, 4096);
  seg2[1] = desc(sp::sgl::kTypeDataBlock, TestHost::iova(b) + 4096, 4096);
  seg2[2] = desc(sp::sgl::kTypeDataBlock, TestHost::iova(b) + 3 * 4096, 4096);
  ASSERT_TRUE(ok(io(sgl_cmd(sp::nvm::kRead, 4, desc(sp::sgl::kTypeSegment, TestHost::iova(seg1), 3 * 16)))));
  EXPECT_EQ(std::memcmp(b, data.data(), 1000), 0);
  EXPECT_EQ(b[1000], 0xcc);
  EXPECT_EQ(std::memcmp(b + 2 * 4096, data.data() + 1000, 3096), 0);
  EXPECT_EQ(std::memcmp(b + 4096, data.data() + 2 * 4096, 4096), 0);
  EXPECT_EQ(std::memcmp(b + 3 * 4096, data.data() + 3 * 4096, 4096), 0);
  // Directly a Last Segment in the SQE.
  ASSERT_TRUE(ok(io(sgl_cmd(sp::nvm::kRead, 3, desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg2), 3 * 16)))));
}

TEST_F(Dt, SglErrors) {
  seed(4 * 4096);
  uint8_t* b = h.alloc(4 * 4096);
  auto* seg = reinterpret_cast<sp::SglDescriptor*>(h.alloc(4096));
  auto* seg2 = reinterpret_cast<sp::SglDescriptor*>(h.alloc(4096));
  const uint64_t B = TestHost::iova(b);
  // Shorter than the transfer.
  expect(io(sgl_cmd(sp::nvm::kRead, 2, desc(sp::sgl::kTypeDataBlock, B, 4096))), sp::sc::kDataSglLengthInvalid);
  // Longer than the transfer (SGLS bit 18 not offered).
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeDataBlock, B, 8192))), sp::sc::kDataSglLengthInvalid);
  seg[0] = desc(sp::sgl::kTypeDataBlock, B, 4096);
  seg[1] = desc(sp::sgl::kTypeDataBlock, B + 4096, 2048);
  expect(io(sgl_cmd(sp::nvm::kRead, 2, desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg), 32))),
         sp::sc::kDataSglLengthInvalid);
  // Invalid descriptor types: keyed data block, transport data block, reserved, offset subtype.
  for (uint8_t t : {sp::sgl::kTypeKeyedDataBlock, sp::sgl::kTypeTransportDataBlock, uint8_t{0x9}}) {
    expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(t, B, 4096))), sp::sc::kSglDescriptorTypeInvalid);
  }
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeDataBlock, B, 4096, sp::sgl::kSubtypeOffset))),
         sp::sc::kSglDescriptorTypeInvalid);
  seg[0] = desc(0xe, B, 4096);
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg), 16))),
         sp::sc::kSglDescriptorTypeInvalid);
  // Bit bucket on a write.
  expect(io(sgl_cmd(sp::nvm::kWrite, 1, desc(sp::sgl::kTypeBitBucket, 0, 4096))),
         sp::sc::kSglDescriptorTypeInvalid);
  // A segment descriptor that is not the last one of its segment.
  seg[0] = desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg2), 16);
  seg[1] = desc(sp::sgl::kTypeDataBlock, B, 4096);
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeSegment, TestHost::iova(seg), 32))),
         sp::sc::kInvalidSglSegmentDescriptor);
  // A Last Segment may not point further.
  seg[0] = desc(sp::sgl::kTypeDataBlock, B, 2048);
  seg[1] = desc(sp::sgl::kTypeSegment, TestHost::iova(seg2), 16);
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeLastSegment, TestHost::iova(seg), 32))),
         sp::sc::kInvalidSglSegmentDescriptor);
  // Segment length not a multiple of 16.
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeSegment, TestHost::iova(seg), 20))),
         sp::sc::kInvalidSglSegmentDescriptor);
  // A segment that points at itself forever.
  seg[0] = desc(sp::sgl::kTypeSegment, TestHost::iova(seg), 16);
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeSegment, TestHost::iova(seg), 16))),
         sp::sc::kInvalidNumberOfSglDescriptors);
  // Unmapped segment list and data block.
  const uint64_t faults = h.ctrl().counters().iommu_faults;
  expect(io(sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeSegment, 0xabc000000ull, 32))),
         sp::sc::kDataTransferError);
  expect(io(sgl_cmd(sp::nvm::kWrite, 1, desc(sp::sgl::kTypeDataBlock, 0xabc000000ull, 4096))),
         sp::sc::kDataTransferError);
  EXPECT_EQ(h.ctrl().counters().iommu_faults, faults + 2);
  // PSDT 10b (MPTR as SGL) is not offered.
  auto c = sgl_cmd(sp::nvm::kRead, 1, desc(sp::sgl::kTypeDataBlock, B, 4096));
  c.set_psdt(sp::kPsdtSglMptrSgl);
  expect(io(c), sp::sc::kInvalidField);
}

TEST_F(Dt, DatasetManagementRangesThroughSgl) {
  seed(4 * 4096);
  auto* ranges = reinterpret_cast<sp::nvm::DsmRange*>(h.alloc(4096));
  ranges[0] = sp::nvm::DsmRange{0, 1, 1};
  sp::SubmissionEntry d{};
  d.opcode = sp::nvm::kDatasetManagement;
  d.nsid = 2;
  d.cdw11 = sp::nvm::kDsmDeallocate;
  d.set_psdt(sp::kPsdtSglMptrContiguous);
  const sp::SglDescriptor sd = desc(sp::sgl::kTypeDataBlock, TestHost::iova(ranges), 16);
  std::memcpy(&d.dptr, &sd, sizeof sd);
  ASSERT_TRUE(ok(io(d)));
  uint8_t* r = h.alloc(4096);
  std::memset(r, 1, 4096);
  ASSERT_TRUE(ok(io(TestHost::rw(sp::nvm::kRead, 2, 1, 1, TestHost::iova(r)))));
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(r[4095], 0);
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
