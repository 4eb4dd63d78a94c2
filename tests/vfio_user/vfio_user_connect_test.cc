// Connecting to a vfio-user server that does not answer: what a server busy with another
// client looks like (it accepts one client at a time; the others wait in its listen backlog).
// The client gives up after its handshake timeout and says why, instead of waiting forever.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "driver/env/memory_registry.h"
#include "driver/env/vfio_user_client.h"

namespace pollux {
namespace {

using env::MemoryRegistry;
using env::VfioUserDevice;
using env::VfioUserOptions;

// A UNIX socket that listens and never accepts. sun_path is short: not under TEST_TMPDIR.
class SilentServer {
 public:
  explicit SilentServer(int backlog) {
    char tmpl[] = "/tmp/pollux-vu-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/silent.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path_.c_str());
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd_, backlog) == 0;
  }
  ~SilentServer() {
    close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  bool ok() const { return ok_; }
  std::string address() const { return "vfio-user:" + path_; }

 private:
  std::string dir_, path_;
  int fd_ = -1;
  bool ok_ = false;
};

// Connects with a 200 ms handshake timeout; the result and how long it took.
struct Attempt {
  bool ok;
  Error error;
  double seconds;
};
Attempt attempt(const std::string& address) {
  MemoryRegistry registry;
  VfioUserOptions o;
  o.handshake_timeout_ms = 200;
  const auto t0 = std::chrono::steady_clock::now();
  auto dev = VfioUserDevice::connect(address, registry, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {dev.ok(), dev.ok() ? Error{} : dev.error(), s};
}

TEST(VfioUserConnect, AServerThatNeverRepliesTimesOutWithAReason) {
  SilentServer server(4);
  ASSERT_TRUE(server.ok());
  const Attempt a = attempt(server.address());  // connected, but VERSION is never answered
  ASSERT_FALSE(a.ok);
  EXPECT_EQ(a.error.code, -ETIMEDOUT);
  EXPECT_NE(a.error.message.find("within 200 ms"), std::string::npos) << a.error.message;
  EXPECT_NE(a.error.message.find("is another one attached?"), std::string::npos);
  EXPECT_NE(a.error.message.find("no VERSION reply"), std::string::npos);
  EXPECT_LT(a.seconds, 3.0);
}

TEST(VfioUserConnect, AFullBacklogTimesOutInConnect) {
  SilentServer server(0);
  ASSERT_TRUE(server.ok());
  // The first connection takes the only backlog place (and stays there: never accepted).
  ASSERT_FALSE(attempt(server.address()).ok);
  const Attempt a = attempt(server.address());  // connect() itself blocks
  ASSERT_FALSE(a.ok);
  EXPECT_EQ(a.error.code, -ETIMEDOUT);
  EXPECT_NE(a.error.message.find("is another one attached?"), std::string::npos)
      << a.error.message;
  EXPECT_LT(a.seconds, 3.0);
}

}  // namespace
}  // namespace pollux
