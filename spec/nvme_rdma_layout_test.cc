// The RDMA_CM private data as bytes: a request, an accept and a reject built by hand.
#include <gtest/gtest.h>

#include <cstring>

#include "spec/nvme_rdma.h"

namespace pollux::spec::nvme_rdma {
namespace {

TEST(NvmeRdmaLayout, RequestBytes) {
  CmRequest r{};
  r.recfmt = kRecfmt10;
  r.qid = 3;
  r.hrqsize = 128;
  r.hsqsize = 127;
  r.cntlid = 0x1234;
  uint8_t b[sizeof r];
  std::memcpy(b, &r, sizeof r);
  const uint8_t want[10] = {0, 0, 3, 0, 128, 0, 127, 0, 0x34, 0x12};
  EXPECT_EQ(std::memcmp(b, want, sizeof want), 0);
}

TEST(NvmeRdmaLayout, AcceptAndRejectBytes) {
  CmAccept a{};
  a.crqsize = 0x0102;
  uint8_t b[sizeof a];
  std::memcpy(b, &a, sizeof a);
  EXPECT_EQ(b[2], 0x02);
  EXPECT_EQ(b[3], 0x01);
  CmReject j{kRecfmt10, cm_status::kInvalidHsqsize};
  uint8_t c[sizeof j];
  std::memcpy(c, &j, sizeof j);
  const uint8_t want[4] = {0, 0, 4, 0};
  EXPECT_EQ(std::memcmp(c, want, 4), 0);
}

}  // namespace
}  // namespace pollux::spec::nvme_rdma
