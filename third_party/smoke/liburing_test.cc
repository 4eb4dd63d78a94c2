// Smoke test for //third_party:liburing: write a file and read it back through an io_uring.
// Skips (with the reason) where the kernel or a seccomp policy refuses io_uring.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

// Submits the single prepared SQE and returns its completion result (res: bytes or -errno).
int SubmitAndWait(io_uring* ring, uint64_t tag) {
  int ret = io_uring_submit(ring);
  if (ret != 1) return ret < 0 ? ret : -EIO;
  io_uring_cqe* cqe = nullptr;
  ret = io_uring_wait_cqe(ring, &cqe);
  if (ret < 0) return ret;
  EXPECT_EQ(io_uring_cqe_get_data64(cqe), tag);
  const int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  return res;
}

TEST(LiburingSmokeTest, WriteThenReadThroughRing) {
  io_uring ring;
  const int init = io_uring_queue_init(8, &ring, 0);
  if (init == -ENOSYS || init == -EPERM) {
    GTEST_SKIP() << "io_uring unavailable here (io_uring_queue_init: " << std::strerror(-init)
                 << "): kernel without io_uring, or blocked by seccomp/sysctl";
  }
  ASSERT_EQ(init, 0) << std::strerror(-init);

  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmpdir != nullptr ? tmpdir : "/tmp") + "/uring_smoke.bin";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);

  std::vector<char> out(8192);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>('a' + i % 26);

  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  ASSERT_NE(sqe, nullptr);
  io_uring_prep_write(sqe, fd, out.data(), static_cast<unsigned>(out.size()), 0);
  io_uring_sqe_set_data64(sqe, 1);
  EXPECT_EQ(SubmitAndWait(&ring, 1), static_cast<int>(out.size()));

  std::vector<char> in(out.size() + 100, '\0');  // Ask for more than the file holds.
  sqe = io_uring_get_sqe(&ring);
  ASSERT_NE(sqe, nullptr);
  io_uring_prep_read(sqe, fd, in.data(), static_cast<unsigned>(in.size()), 0);
  io_uring_sqe_set_data64(sqe, 2);
  EXPECT_EQ(SubmitAndWait(&ring, 2), static_cast<int>(out.size()));  // Short read at EOF.
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);

  // An offset read in the middle of the file.
  sqe = io_uring_get_sqe(&ring);
  ASSERT_NE(sqe, nullptr);
  char mid[4] = {};
  io_uring_prep_read(sqe, fd, mid, sizeof(mid), 26 * 10 + 2);
  io_uring_sqe_set_data64(sqe, 3);
  EXPECT_EQ(SubmitAndWait(&ring, 3), 4);
  EXPECT_EQ(std::string(mid, sizeof(mid)), "cdef");

  close(fd);
  io_uring_queue_exit(&ring);
}

}  // namespace
