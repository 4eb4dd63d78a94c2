// NVM I/O commands on both LBA sizes and both backings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "emulator/nvme/test_host.h"

namespace pollux::emu::nvme::testing {
namespace {

std::string tmpdir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

struct Backing {
  uint32_t lba;
  bool file;
};

std::string name(const ::testing::TestParamInfo<Backing>& i) {
  return std::to_string(i.param.lba) + (i.param.file ? "_file" : "_memory");
}

class Io : public ::testing::TestWithParam<Backing> {
 protected:
  static ControllerConfig config(const Backing& b) {
    ControllerConfig c = small_config();
    c.namespaces.clear();
    std::string backing = "memory";
    if (b.file) {
      static int n = 0;
      backing = "file:" + tmpdir() + "/ns" + std::to_string(b.lba) + "_" + std::to_string(getpid()) +
                "_" + std::to_string(n++) + ".img";
    }
    c.namespaces.push_back(NamespaceConfig{8u << 20, b.lba, backing});
    return c;
  }
  Io() : h(config(GetParam())) {}
  void SetUp() override {
    ASSERT_TRUE(h.enable());
    ASSERT_TRUE(h.create_io_queue_pair(1, 64));
    lba = GetParam().lba;
    nsze = (8u << 20) / lba;
    wbuf = h.alloc(128 * 1024);
    rbuf = h.alloc(128 * 1024);
  }
  sp::CompletionEntry io(const sp::SubmissionEntry& c) { return h.io(1, c); }
  sp::CompletionEntry rw(uint8_t op, uint64_t slba, uint32_t nlb, uint8_t* b, uint32_t nsid = 1) {
    // Contiguous host buffer: PRP1 + PRP2 or a PRP list as needed.
    const uint64_t bytes = uint64_t{nlb} * lba;
    sp::SubmissionEntry c = TestHost::rw(op, nsid, slba, nlb, TestHost::iova(b));
    if (bytes > 8192) {
      uint64_t* list = reinterpret_cast<uint64_t*>(h.alloc(4096));
      for (uint64_t i = 1; i * 4096 < bytes; ++i) list[i - 1] = TestHost::iova(b) + i * 4096;
      c.dptr.prp.prp2 = TestHost::iova(list);
    } else if (bytes > 4096) {
      c.dptr.prp.prp2 = TestHost::iova(b) + 4096;
    }
    return io(c);
  }
  void fill(uint8_t* b, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  }

  TestHost h;
  uint32_t lba = 0;
  uint64_t nsze = 0;
  uint8_t* wbuf = nullptr;
  uint8_t* rbuf = nullptr;
};

TEST_P(Io, WriteReadRoundTrip) {
  const uint32_t nlb = 16384 / lba;  // 16 KiB: PRP list
  fill(wbuf, 16384, 3);
  ASSERT_TRUE(ok(rw(sp::nvm::kWrite, 5, nlb, wbuf)));
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 5, nlb, rbuf)));
  EXPECT_EQ(std::memcmp(wbuf, rbuf, 16384), 0);
  // A single block at the very end of the namespace.
  fill(wbuf, lba, 9);
  ASSERT_TRUE(ok(rw(sp::nvm::kWrite, nsze - 1, 1, wbuf)));
  std::memset(rbuf, 0, lba);
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, nsze - 1, 1, rbuf)));
  EXPECT_EQ(std::memcmp(wbuf, rbuf, lba), 0);
  EXPECT_EQ(h.ctrl().counters().io_writes, 2u);
  EXPECT_EQ(h.ctrl().counters().io_reads, 2u);
  // SMART counts host commands and data units (1000 x 512 bytes, rounded up).
  uint8_t* log = h.alloc(4096);
  ASSERT_TRUE(ok(h.admin(TestHost::get_log(sp::log::kSmartHealth, 512, TestHost::iova(log)))));
  const auto* s = reinterpret_cast<const sp::SmartHealthLog*>(log);
  EXPECT_EQ(s->host_write_commands[0], 2u);
  EXPECT_EQ(s->host_read_commands[0], 2u);
  EXPECT_EQ(s->data_units_written[0], 1u);
  EXPECT_EQ(s->data_units_read[0], 1u);
}

TEST_P(Io, UnwrittenBlocksReadZero) {
  std::memset(rbuf, 0xee, 8192);
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 100, 8192 / lba, rbuf)));
  for (int i = 0; i < 8192; ++i) ASSERT_EQ(rbuf[i], 0) << i;
}

TEST_P(Io, FuaWriteAndFlush) {
  fill(wbuf, lba, 1);
  auto c = TestHost::rw(sp::nvm::kWrite, 1, 7, 1, TestHost::iova(wbuf));
  c.cdw12 |= sp::nvm::kCdw12Fua;
  ASSERT_TRUE(ok(io(c)));
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 7, 1, rbuf)));
  EXPECT_EQ(std::memcmp(wbuf, rbuf, lba), 0);
  sp::SubmissionEntry f{};
  f.opcode = sp::nvm::kFlush;
  f.nsid = 1;
  EXPECT_TRUE(ok(io(f)));
  f.nsid = 0xffffffff;
  EXPECT_TRUE(ok(io(f)));
  f.nsid = 2;
  EXPECT_EQ(sc_of(io(f)), sp::sc::kInvalidNamespaceOrFormat);
  EXPECT_EQ(h.ctrl().counters().io_flushes, 3u);
}

TEST_P(Io, WriteZeroes) {
  const uint32_t nlb = 16384 / lba;
  fill(wbuf, 16384, 5);
  ASSERT_TRUE(ok(rw(sp::nvm::kWrite, 0, nlb, wbuf)));
  for (bool deac : {false, true}) {
    sp::SubmissionEntry z = TestHost::rw(sp::nvm::kWriteZeroes, 1, deac ? 2 : 1, 1, 0);
    if (deac) z.cdw12 |= sp::nvm::kCdw12Deac;
    ASSERT_TRUE(ok(io(z)));
  }
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 0, nlb, rbuf)));
  for (uint32_t b = 0; b < nlb; ++b) {
    const bool zero = b == 1 || b == 2;
    for (uint32_t i = 0; i < lba; ++i) {
      const size_t o = size_t{b} * lba + i;
      ASSERT_EQ(rbuf[o], zero ? 0 : wbuf[o]) << "block " << b << " byte " << i;
    }
  }
  // Write Zeroes is not limited by MDTS, but by the namespace size.
  EXPECT_TRUE(ok(io(TestHost::rw(sp::nvm::kWriteZeroes, 1, 0, 65536 < nsze ? 65536 : nsze, 0))));
  EXPECT_EQ(sc_of(io(TestHost::rw(sp::nvm::kWriteZeroes, 1, nsze - 1, 2, 0))), sp::sc::kLbaOutOfRange);
  EXPECT_EQ(h.ctrl().counters().io_write_zeroes, 4u);
}

TEST_P(Io, DatasetManagementDeallocate) {
  const uint32_t nlb = 16384 / lba;
  fill(wbuf, 16384, 11);
  ASSERT_TRUE(ok(rw(sp::nvm::kWrite, 0, nlb, wbuf)));
  auto* ranges = reinterpret_cast<sp::nvm::DsmRange*>(h.alloc(4096));
  ranges[0] = sp::nvm::DsmRange{0, 1, 0};
  ranges[1] = sp::nvm::DsmRange{0, 2, nlb - 2};
  sp::SubmissionEntry d{};
  d.opcode = sp::nvm::kDatasetManagement;
  d.nsid = 1;
  d.dptr.prp.prp1 = TestHost::iova(ranges);
  d.cdw10 = 1;  // two ranges
  d.cdw11 = 0;  // no deallocate attribute: a hint only
  ASSERT_TRUE(ok(io(d)));
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 0, nlb, rbuf)));
  EXPECT_EQ(std::memcmp(wbuf, rbuf, 16384), 0);
  d.cdw11 = sp::nvm::kDsmDeallocate;
  ASSERT_TRUE(ok(io(d)));
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 0, nlb, rbuf)));
  for (uint32_t b = 0; b < nlb; ++b) {
    const bool zero = b == 0 || b >= nlb - 2;
    for (uint32_t i = 0; i < lba; ++i) {
      const size_t o = size_t{b} * lba + i;
      ASSERT_EQ(rbuf[o], zero ? 0 : wbuf[o]) << "block " << b;
    }
  }
  // A range beyond the namespace fails the whole command; nothing is deallocated.
  ranges[0] = sp::nvm::DsmRange{0, 1, 1};
  ranges[1] = sp::nvm::DsmRange{0, 2, nsze - 1};
  EXPECT_EQ(sc_of(io(d)), sp::sc::kLbaOutOfRange);
  ASSERT_TRUE(ok(rw(sp::nvm::kRead, 1, 1, rbuf)));
  EXPECT_EQ(std::memcmp(wbuf + lba, rbuf, lba), 0);
}

TEST_P(Io, CompareSuccessAndFailure) {
  fill(wbuf, 8192, 21);
  const uint32_t nlb = 8192 / lba;
  ASSERT_TRUE(ok(rw(sp::nvm::kWrite, 40, nlb, wbuf)));
  EXPECT_TRUE(ok(rw(sp::nvm::kCompare, 40, nlb, wbuf)));
  wbuf[8191] ^= 1;
  auto c = rw(sp::nvm::kCompare, 40, nlb, wbuf);
  EXPECT_EQ(sct_of(c), sp::sct::kMediaError);
  EXPECT_EQ(sc_of(c), sp::sc_media::kCompareFailure);
  // Unwritten blocks compare equal to zeroes.
  std::memset(rbuf, 0, 4096);
  EXPECT_TRUE(ok(rw(sp::nvm::kCompare, 1000, 4096 / lba, rbuf)));
  EXPECT_EQ(h.ctrl().counters().io_compares, 3u);
}

TEST_P(Io, MdtsLimit) {
  const uint32_t max_nlb = (128 * 1024) / lba;  // MDTS 5 = 128 KiB
  fill(wbuf, 128 * 1024, 2);
  EXPECT_TRUE(ok(rw(sp::nvm::kWrite, 0, max_nlb, wbuf)));
  auto c = TestHost::rw(sp::nvm::kRead, 1, 0, max_nlb + 1, TestHost::iova(rbuf));
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidField);
}

TEST_P(Io, LbaOutOfRange) {
  EXPECT_EQ(sc_of(rw(sp::nvm::kRead, nsze - 1, 2, rbuf)), sp::sc::kLbaOutOfRange);
  EXPECT_EQ(sc_of(rw(sp::nvm::kWrite, nsze, 1, wbuf)), sp::sc::kLbaOutOfRange);
  EXPECT_EQ(sc_of(rw(sp::nvm::kRead, ~0ull - 1, 4, rbuf)), sp::sc::kLbaOutOfRange);  // no wrap
  EXPECT_EQ(sc_of(rw(sp::nvm::kCompare, nsze, 1, rbuf)), sp::sc::kLbaOutOfRange);
  // The error log records the LBA.
  uint8_t* log = h.alloc(4096);
  ASSERT_TRUE(ok(h.admin(TestHost::get_log(sp::log::kErrorInformation, 64, TestHost::iova(log)))));
  const auto* e = reinterpret_cast<const sp::ErrorLogEntry*>(log);
  EXPECT_EQ(e->lba, nsze);
  EXPECT_EQ(e->sqid, 1);
  EXPECT_EQ(e->nsid, 1u);
}

TEST_P(Io, InvalidNamespace) {
  for (uint32_t nsid : {0u, 2u, 0xffffffffu}) {
    EXPECT_EQ(sc_of(rw(sp::nvm::kRead, 0, 1, rbuf, nsid)), sp::sc::kInvalidNamespaceOrFormat);
    EXPECT_EQ(sc_of(rw(sp::nvm::kWrite, 0, 1, wbuf, nsid)), sp::sc::kInvalidNamespaceOrFormat);
  }
}

TEST_P(Io, InvalidOpcodeAndFields) {
  sp::SubmissionEntry c = TestHost::rw(0x7e, 1, 0, 1, TestHost::iova(rbuf));
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidOpcode);
  c = TestHost::rw(sp::nvm::kWriteUncorrectable, 1, 0, 1, 0);
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidOpcode);
  EXPECT_EQ(h.ctrl().counters().io_other, 2u);
  c = TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(rbuf));
  c.cdw12 |= 1u << 26;  // PRINFO
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidField);
  c = TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(rbuf));
  c.flags |= 1;  // fused
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidField);
  c = TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(rbuf));
  c.set_psdt(3);
  EXPECT_EQ(sc_of(io(c)), sp::sc::kInvalidField);
  c = TestHost::rw(sp::nvm::kRead, 1, 0, 1, TestHost::iova(rbuf));
  c.cdw12 |= sp::nvm::kCdw12LimitedRetry;
  EXPECT_TRUE(ok(io(c)));
}

INSTANTIATE_TEST_SUITE_P(Backings, Io,
                         ::testing::Values(Backing{512, false}, Backing{4096, false},
                                           Backing{512, true}, Backing{4096, true}),
                         name);

TEST(IoFile, DataPersistsAcrossControllers) {
  const std::string path = tmpdir() + "/persist_" + std::to_string(getpid()) + ".img";
  ControllerConfig cfg = small_config();
  cfg.namespaces = {NamespaceConfig{1u << 20, 4096, "file:" + path}};
  std::vector<uint8_t> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 13);
  {
    TestHost h(cfg);
    ASSERT_TRUE(h.enable());
    ASSERT_TRUE(h.create_io_queue_pair(1, 8));
    uint8_t* b = h.alloc(4096);
    std::memcpy(b, pattern.data(), 4096);
    ASSERT_TRUE(ok(h.io(1, TestHost::rw(sp::nvm::kWrite, 1, 3, 1, TestHost::iova(b)))));
  }
  TestHost h(cfg);
  ASSERT_TRUE(h.enable());
  ASSERT_TRUE(h.create_io_queue_pair(1, 8));
  uint8_t* b = h.alloc(4096);
  ASSERT_TRUE(ok(h.io(1, TestHost::rw(sp::nvm::kRead, 1, 3, 1, TestHost::iova(b)))));
  EXPECT_EQ(std::memcmp(b, pattern.data(), 4096), 0);
  std::remove(path.c_str());
}

TEST(IoFile, UnopenableFileIsACreateError) {
  ControllerConfig cfg = small_config();
  cfg.namespaces = {NamespaceConfig{1u << 20, 512, "file:/nonexistent-dir/x.img"}};
  RegionDmaSpace dma;
  auto c = Controller::create(cfg, dma);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("namespaces[0].backing"), std::string::npos) << c.error();
}

}  // namespace
}  // namespace pollux::emu::nvme::testing
