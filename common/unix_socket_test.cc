// Server sockets are the owner's only (0600) or a group's (0660), whatever the umask, and never
// in a directory where another user could replace them.
#include "common/unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace pollux::common {
namespace {

class SocketAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pollux-sock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    old_umask_ = umask(0);  // the mode must not depend on the caller's umask
  }
  void TearDown() override {
    umask(old_umask_);
    std::filesystem::remove_all(dir_);
  }
  // socket + restrict + bind + listen + restrict: 0, or the negative errno of the step.
  int serve(const std::string& path, const std::string& group, std::string* why) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    fds_.push_back(fd);
    if (int rc = restrict_socket_before_bind(fd, path, group, why); rc != 0) return rc;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0)
      return -errno;
    return restrict_socket_after_bind(path, group, why);
  }
  ~SocketAccessTest() override {
    for (int fd : fds_) close(fd);
  }
  std::string dir_;
  mode_t old_umask_ = 0;
  std::vector<int> fds_;
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(SocketAccessTest, OwnerOnlyByDefault) {
  std::string why;
  ASSERT_EQ(serve(dir_ + "/a.sock", "", &why), 0) << why;
  EXPECT_EQ(mode_of(dir_ + "/a.sock"), 0600u);
}

TEST_F(SocketAccessTest, AGroupGetsReadWrite) {
  const struct group* g = getgrgid(getgid());
  ASSERT_NE(g, nullptr);
  std::string why;
  ASSERT_EQ(serve(dir_ + "/g.sock", g->gr_name, &why), 0) << why;
  EXPECT_EQ(mode_of(dir_ + "/g.sock"), 0660u);
  struct stat st {};
  ASSERT_EQ(lstat((dir_ + "/g.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, g->gr_gid);

  EXPECT_EQ(serve(dir_ + "/n.sock", "no-such-group-pollux", &why), -EINVAL);
  EXPECT_NE(why.find("no group 'no-such-group-pollux'"), std::string::npos) << why;
  EXPECT_NE(access((dir_ + "/n.sock").c_str(), F_OK), 0);  // nothing left behind
}

TEST_F(SocketAccessTest, ADirectoryOthersCanWriteIsRefusedUnlessSticky) {
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  std::string why;
  EXPECT_EQ(serve(dir_ + "/w.sock", "", &why), -EPERM);
  EXPECT_NE(why.find("writable by others and not sticky"), std::string::npos) << why;
  ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);  // as /tmp: others cannot remove our socket
  EXPECT_EQ(serve(dir_ + "/s.sock", "", &why), 0) << why;
  EXPECT_EQ(mode_of(dir_ + "/s.sock"), 0600u);
  EXPECT_EQ(serve("/nonexistent-pollux-dir/x.sock", "", &why), -ENOENT);
  EXPECT_NE(why.find("/nonexistent-pollux-dir"), std::string::npos) << why;
}

}  // namespace
}  // namespace pollux::common
