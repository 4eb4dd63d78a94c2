// The vfio-user server against malformed input, written raw to its socket or passed to
// handle(): every bad message gets an error reply with a fitting errno (or, where the stream
// cannot be resynchronised, an error reply and a dropped connection), and the server goes on
// answering valid requests. Received fds it does not keep are closed.
#include "emulator/vfio_user/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "emulator/vfio_user/toy_device.h"
#include "spec/vfio_user.h"

namespace pollux::emu::vfio_user {
namespace {

namespace vu = spec::vfio_user;

template <typename T>
void append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

std::vector<uint8_t> message(uint16_t id, uint16_t command, const void* payload, std::size_t n,
                             uint32_t flags = vu::flags::kTypeCommand) {
  std::vector<uint8_t> m;
  append(m, vu::Header{id, command, static_cast<uint32_t>(sizeof(vu::Header) + n), flags, 0});
  const auto* p = static_cast<const uint8_t*>(payload);
  if (n) m.insert(m.end(), p, p + n);
  return m;
}

struct Reply {
  vu::Header h{};
  std::vector<uint8_t> payload;
  std::vector<int> fds;
  bool eof = false;
  ~Reply() {
    for (int fd : fds) ::close(fd);
  }
  int error() const { return (h.flags & vu::flags::kError) ? static_cast<int>(h.error) : 0; }
};

// A raw client socket.
class Raw {
 public:
  explicit Raw(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { ::close(fd_); }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send(const std::vector<uint8_t>& m, const std::vector<int>& fds = {}) {
    iovec iov{const_cast<uint8_t*>(m.data()), m.size()};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    std::vector<uint8_t> cbuf;
    if (!fds.empty()) {
      cbuf.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      h.msg_control = cbuf.data();
      h.msg_controllen = cbuf.size();
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return ::sendmsg(fd_, &h, MSG_NOSIGNAL) == static_cast<ssize_t>(m.size());
  }

  // Reads exactly n bytes (with a generous deadline that only guards against a hang).
  bool read(uint8_t* p, std::size_t n, std::vector<int>* fds, bool* eof) {
    std::size_t got = 0;
    while (got < n) {
      pollfd pf{fd_, POLLIN, 0};
      if (::poll(&pf, 1, 10000) != 1) return false;
      alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(sizeof(int) * 8)];
      iovec iov{p + got, n - got};
      msghdr h{};
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      h.msg_control = cbuf;
      h.msg_controllen = sizeof cbuf;
      const ssize_t r = ::recvmsg(fd_, &h, MSG_CMSG_CLOEXEC);
      if (r <= 0) {
        if (eof) *eof = true;
        return false;
      }
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds->push_back(fd);
        }
      }
      got += static_cast<std::size_t>(r);
    }
    return true;
  }

  void recv(Reply& r) {
    if (!read(reinterpret_cast<uint8_t*>(&r.h), sizeof r.h, &r.fds, &r.eof)) return;
    r.payload.resize(r.h.msg_size - sizeof r.h);
    read(r.payload.data(), r.payload.size(), &r.fds, &r.eof);
  }

  // True when the server closed the connection (EOF without data).
  bool closed_by_peer() {
    pollfd pf{fd_, POLLIN, 0};
    if (::poll(&pf, 1, 10000) != 1) return false;
    uint8_t b;
    return ::recv(fd_, &b, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// A private directory for the socket: sun_path is short (108 bytes), so not under TEST_TMPDIR.
struct SocketDir {
  std::string dir;
  SocketDir() {
    char tmpl[] = "/tmp/pollux-vu-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) dir = tmpl;
  }
  ~SocketDir() {
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
};

class ServerSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dev_.ok());
    ASSERT_FALSE(dir_.dir.empty());
    dev_.attach_server(&server_);
    path_ = dir_.dir + "/s.sock";
    ASSERT_EQ(server_.listen(path_), 0);
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_acquire)) (void)server_.poll_once(20);
    });
  }
  void TearDown() override {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  // Sends VERSION and checks the reply.
  void hello(Raw& c) {
    std::vector<uint8_t> p;
    append(p, vu::Version{0, 1});
    const std::string caps = R"({"capabilities":{"max_msg_fds":4}})";
    p.insert(p.end(), caps.begin(), caps.end());
    p.push_back(0);
    ASSERT_TRUE(c.send(message(1, vu::cmd::kVersion, p.data(), p.size())));
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.error(), 0);
    ASSERT_EQ(r.h.msg_id, 1);
    ASSERT_EQ(r.h.flags & vu::flags::kTypeMask, vu::flags::kTypeReply);
    ASSERT_GE(r.payload.size(), sizeof(vu::Version) + 2);
    EXPECT_EQ(r.payload.back(), 0);  // NUL-terminated JSON
    const std::string json(reinterpret_cast<const char*>(r.payload.data()) + 4);
    EXPECT_NE(json.find("\"max_msg_fds\":8"), std::string::npos) << json;
    EXPECT_NE(json.find("\"max_data_xfer_size\":1048576"), std::string::npos) << json;
    EXPECT_NE(json.find("\"pgsizes\":4096"), std::string::npos) << json;
    EXPECT_NE(json.find("\"max_dma_maps\":"), std::string::npos) << json;
  }

  // A valid request (DEVICE_GET_INFO) answered correctly: the server is still serving.
  void still_serving(Raw& c, uint16_t id) {
    vu::DeviceInfo req{sizeof(vu::DeviceInfo), 0, 0, 0};
    ASSERT_TRUE(c.send(message(id, vu::cmd::kDeviceGetInfo, &req, sizeof req)));
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.h.msg_id, id);
    ASSERT_EQ(r.error(), 0);
    ASSERT_EQ(r.payload.size(), sizeof(vu::DeviceInfo));
    vu::DeviceInfo info;
    std::memcpy(&info, r.payload.data(), sizeof info);
    EXPECT_EQ(info.num_regions, 9u);
    EXPECT_EQ(info.num_irqs, 5u);
  }

  // Sends `m` (with fds) and expects an error reply with errno `err`.
  void expect_error(Raw& c, const std::vector<uint8_t>& m, int err,
                    const std::vector<int>& fds = {}) {
    ASSERT_TRUE(c.send(m, fds));
    Reply r;
    c.recv(r);
    ASSERT_FALSE(r.eof);
    EXPECT_EQ(r.h.flags & vu::flags::kTypeMask, vu::flags::kTypeReply);
    EXPECT_TRUE(r.h.flags & vu::flags::kError);
    EXPECT_EQ(r.error(), err);
    EXPECT_EQ(r.h.msg_size, sizeof(vu::Header));  // an error reply is only the header
    EXPECT_TRUE(r.fds.empty());
  }

  SocketDir dir_;  // outlives the server, which removes the socket file
  ToyDevice dev_;
  Server server_{dev_};
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A pipe whose write end we hand over: once every copy is closed, the read end sees EOF.
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      r = p[0];
      w = p[1];
    }
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  int release_w() { return std::exchange(w, -1); }
  // True once no writer is left (the server closed the copy it was sent).
  bool writers_gone() {
    pollfd pf{r, POLLIN, 0};
    if (::poll(&pf, 1, 10000) != 1) return false;
    char b;
    return ::read(r, &b, 1) == 0;
  }
};

TEST_F(ServerSocket, CommandBeforeVersionIsRefused) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  vu::DeviceInfo req{sizeof req, 0, 0, 0};
  expect_error(c, message(7, vu::cmd::kDeviceGetInfo, &req, sizeof req), EINVAL);
  hello(c);
  still_serving(c, 8);
}

TEST_F(ServerSocket, BadVersions) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  vu::Version v{1, 0};
  expect_error(c, message(1, vu::cmd::kVersion, &v, sizeof v), ENOTSUP);  // major 1
  std::vector<uint8_t> p;
  append(p, vu::Version{0, 1});
  const std::string bad = "{not json";
  p.insert(p.end(), bad.begin(), bad.end());
  p.push_back(0);
  expect_error(c, message(2, vu::cmd::kVersion, p.data(), p.size()), EINVAL);
  p.pop_back();  // no NUL
  expect_error(c, message(3, vu::cmd::kVersion, p.data(), p.size()), EINVAL);
  hello(c);
  expect_error(c, message(4, vu::cmd::kVersion, &v, sizeof v), EINVAL);  // once only
  still_serving(c, 5);
}

TEST_F(ServerSocket, MalformedMessagesGetErrorReplies) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  hello(c);

  // Header whose size is smaller than a header.
  {
    auto m = message(10, vu::cmd::kDeviceGetInfo, nullptr, 0);
    vu::Header h;
    std::memcpy(&h, m.data(), sizeof h);
    h.msg_size = 8;
    std::memcpy(m.data(), &h, sizeof h);
    expect_error(c, m, EINVAL);
    still_serving(c, 11);
  }
  // Unknown and unsupported commands.
  expect_error(c, message(12, 99, nullptr, 0), ENOSYS);
  expect_error(c, message(13, vu::cmd::kDeviceFeature, nullptr, 0), ENOTSUP);
  expect_error(c, message(14, vu::cmd::kDmaRead, nullptr, 0), EINVAL);  // wrong direction
  still_serving(c, 15);

  // Region info: bad index, short payload, argsz too small.
  {
    vu::RegionInfo ri{sizeof ri, 0, 42, 0, 0, 0};
    expect_error(c, message(20, vu::cmd::kDeviceGetRegionInfo, &ri, sizeof ri), EINVAL);
    expect_error(c, message(21, vu::cmd::kDeviceGetRegionInfo, &ri, 8), EINVAL);
    ri.index = 0;
    ri.argsz = 16;
    expect_error(c, message(22, vu::cmd::kDeviceGetRegionInfo, &ri, sizeof ri), EINVAL);
  }
  // Region access: bad region, out of range, zero and oversized counts, non-existent BAR,
  // a write whose data does not match its count.
  {
    vu::RegionAccess a{0, 42, 4};
    expect_error(c, message(30, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    a = {ToyDevice::kBar0Size - 4, 0, 8};
    expect_error(c, message(31, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    a = {UINT64_MAX - 2, 0, 8};
    expect_error(c, message(32, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    a = {0, 0, 0};
    expect_error(c, message(33, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    a = {0, 0, (1u << 20) + 1};
    expect_error(c, message(34, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    a = {0, 3, 4};
    expect_error(c, message(35, vu::cmd::kRegionRead, &a, sizeof a), EINVAL);
    std::vector<uint8_t> w;
    append(w, vu::RegionAccess{4, 0, 8});
    append(w, uint32_t{1});  // 4 bytes of data for a count of 8
    expect_error(c, message(36, vu::cmd::kRegionWrite, w.data(), w.size()), EINVAL);
  }
  // Interrupts.
  {
    vu::IrqInfo ii{sizeof ii, 0, 5, 0};
    expect_error(c, message(40, vu::cmd::kDeviceGetIrqInfo, &ii, sizeof ii), EINVAL);
    vu::IrqSet s{sizeof s, vu::kIrqSetDataNone | vu::kIrqSetDataBool | vu::kIrqSetActionTrigger,
                 vu::irq::kMsix, 0, 1};
    expect_error(c, message(41, vu::cmd::kDeviceSetIrqs, &s, sizeof s), EINVAL);
    s.flags = vu::kIrqSetDataBool | vu::kIrqSetActionTrigger;  // no bool bytes follow
    expect_error(c, message(42, vu::cmd::kDeviceSetIrqs, &s, sizeof s), EINVAL);
    s.flags = vu::kIrqSetDataNone | vu::kIrqSetActionMask;  // MSI-X is not maskable
    expect_error(c, message(43, vu::cmd::kDeviceSetIrqs, &s, sizeof s), EINVAL);
  }
  // A reply-type message is not answered; the next request is.
  ASSERT_TRUE(c.send(message(50, vu::cmd::kDeviceGetInfo, nullptr, 0, vu::flags::kTypeReply)));
  // A no-reply command is executed without an answer.
  {
    std::vector<uint8_t> w;
    append(w, vu::RegionAccess{ToyDevice::kRegScratch, 0, 4});
    append(w, uint32_t{0x55});
    ASSERT_TRUE(c.send(message(51, vu::cmd::kRegionWrite, w.data(), w.size(),
                               vu::flags::kTypeCommand | vu::flags::kNoReply)));
    vu::RegionAccess a{ToyDevice::kRegScratch, 0, 4};
    ASSERT_TRUE(c.send(message(52, vu::cmd::kRegionRead, &a, sizeof a)));
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.h.msg_id, 52);
    ASSERT_EQ(r.error(), 0);
    ASSERT_EQ(r.payload.size(), sizeof a + 4);
    uint32_t v;
    std::memcpy(&v, r.payload.data() + sizeof a, 4);
    EXPECT_EQ(v, 0x55u);
  }
  still_serving(c, 53);
}

TEST_F(ServerSocket, DmaMapErrorsAndFdHygiene) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  hello(c);
  const int mem = ::memfd_create("dma", MFD_CLOEXEC);
  ASSERT_GE(mem, 0);
  ASSERT_EQ(::ftruncate(mem, 1 << 20), 0);

  vu::DmaMap m{sizeof m, vu::kDmaRead | vu::kDmaWrite, 0, 0x100000, 0x10000};
  expect_error(c, message(60, vu::cmd::kDmaMap, &m, sizeof m), ENOTSUP);  // no fd
  expect_error(c, message(61, vu::cmd::kDmaMap, &m, sizeof m), EINVAL, {mem, mem});
  vu::DmaMap big = m;
  big.size = 2 << 20;  // past the end of the file
  expect_error(c, message(62, vu::cmd::kDmaMap, &big, sizeof big), EINVAL, {mem});
  vu::DmaMap zero = m;
  zero.size = 0;
  expect_error(c, message(63, vu::cmd::kDmaMap, &zero, sizeof zero), EINVAL, {mem});
  vu::DmaMap wrap = m;
  wrap.address = UINT64_MAX - 100;
  expect_error(c, message(64, vu::cmd::kDmaMap, &wrap, sizeof wrap), EINVAL, {mem});
  expect_error(c, message(65, vu::cmd::kDmaMap, &m, 16), EINVAL, {mem});  // short payload

  ASSERT_TRUE(c.send(message(66, vu::cmd::kDmaMap, &m, sizeof m), {mem}));
  {
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.error(), 0);
    EXPECT_EQ(r.payload.size(), 0u);
  }
  vu::DmaMap overlap = m;
  overlap.address += 0x8000;
  expect_error(c, message(67, vu::cmd::kDmaMap, &overlap, sizeof overlap), EEXIST, {mem});

  vu::DmaUnmap u{sizeof u, 0, 0x100000, 0x8000};  // size must match exactly
  expect_error(c, message(68, vu::cmd::kDmaUnmap, &u, sizeof u), ENOENT);
  u.size = 0x10000;
  u.flags = 1;
  expect_error(c, message(69, vu::cmd::kDmaUnmap, &u, sizeof u), EINVAL);
  u.flags = 0;
  ASSERT_TRUE(c.send(message(70, vu::cmd::kDmaUnmap, &u, sizeof u)));
  {
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.error(), 0);
    ASSERT_EQ(r.payload.size(), sizeof u);  // echoes the entry
    vu::DmaUnmap e;
    std::memcpy(&e, r.payload.data(), sizeof e);
    EXPECT_EQ(e.address, 0x100000u);
    EXPECT_EQ(e.size, 0x10000u);
  }
  ::close(mem);

  // More fds than max_msg_fds (8): refused, none leaked.
  {
    Pipe p;
    const int w = p.release_w();
    std::vector<int> many(9, w);
    vu::DeviceInfo req{sizeof req, 0, 0, 0};
    expect_error(c, message(72, vu::cmd::kDeviceGetInfo, &req, sizeof req), EINVAL, many);
    ::close(w);
    EXPECT_TRUE(p.writers_gone());
  }
  still_serving(c, 73);
}

// SPDK's host attaches the region's fd to DMA_UNMAP too. A command that takes no fds is
// answered as if it had come without them, and the fds are closed (libvfio-user does the same).
TEST_F(ServerSocket, StrayFdsAreClosedAndTheCommandHandled) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  hello(c);
  const int mem = ::memfd_create("dma", MFD_CLOEXEC);
  ASSERT_GE(mem, 0);
  ASSERT_EQ(::ftruncate(mem, 1 << 20), 0);
  vu::DmaMap m{sizeof m, vu::kDmaRead | vu::kDmaWrite, 0, 0x100000, 0x10000};
  ASSERT_TRUE(c.send(message(1, vu::cmd::kDmaMap, &m, sizeof m), {mem}));
  {
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.error(), 0);
  }
  vu::DmaUnmap u{sizeof u, 0, 0x100000, 0x10000};
  ASSERT_TRUE(c.send(message(2, vu::cmd::kDmaUnmap, &u, sizeof u), {mem}));  // as SPDK does
  {
    Reply r;
    c.recv(r);
    ASSERT_EQ(r.error(), 0);
    EXPECT_EQ(r.payload.size(), sizeof u);
    EXPECT_TRUE(r.fds.empty());
  }
  ::close(mem);

  // Every other command that takes none, each with a pipe's write end attached: a normal
  // answer, and the server's copy of the fd is closed.
  std::vector<uint8_t> write;
  append(write, vu::RegionAccess{ToyDevice::kRegScratch, 0, 4});
  append(write, uint32_t{7});
  const vu::DeviceInfo info{sizeof info, 0, 0, 0};
  const vu::RegionInfo region{sizeof region, 0, vu::region::kConfig, 0, 0, 0};  // no fd back
  const vu::IrqInfo irq{sizeof irq, 0, vu::irq::kMsix, 0};
  const vu::RegionAccess read{ToyDevice::kRegScratch, 0, 4};
  const std::vector<std::vector<uint8_t>> commands = {
      message(10, vu::cmd::kDeviceGetInfo, &info, sizeof info),
      message(11, vu::cmd::kDeviceGetRegionInfo, &region, sizeof region),
      message(12, vu::cmd::kDeviceGetIrqInfo, &irq, sizeof irq),
      message(13, vu::cmd::kRegionWrite, write.data(), write.size()),
      message(14, vu::cmd::kRegionRead, &read, sizeof read),
      message(15, vu::cmd::kDeviceReset, nullptr, 0),
  };
  for (const auto& cmd : commands) {
    Pipe p;
    const int w = p.release_w();
    ASSERT_TRUE(c.send(cmd, {w}));
    ::close(w);
    Reply r;
    c.recv(r);
    vu::Header sent;
    std::memcpy(&sent, cmd.data(), sizeof sent);
    EXPECT_EQ(r.h.msg_id, sent.msg_id);
    EXPECT_EQ(r.error(), 0) << "command " << sent.command;
    EXPECT_TRUE(p.writers_gone()) << "command " << sent.command;
  }
  still_serving(c, 16);
}

TEST_F(ServerSocket, HugeSizeIsAnsweredThenTheConnectionDropped) {
  {
    Raw c(path_);
    ASSERT_TRUE(c.connected());
    hello(c);
    std::vector<uint8_t> m;
    append(m, vu::Header{80, vu::cmd::kRegionWrite, 0x7fffffff, vu::flags::kTypeCommand, 0});
    expect_error(c, m, EMSGSIZE);
    EXPECT_TRUE(c.closed_by_peer());  // the stream cannot be resynchronised
  }
  Raw again(path_);
  ASSERT_TRUE(again.connected());
  hello(again);
  still_serving(again, 81);
}

TEST_F(ServerSocket, TruncatedHeaderThenHangUp) {
  {
    Raw c(path_);
    ASSERT_TRUE(c.connected());
    hello(c);
    auto m = message(90, vu::cmd::kDeviceGetInfo, nullptr, 0);
    m.resize(8);
    ASSERT_TRUE(c.send(m));
    ::shutdown(c.fd(), SHUT_WR);  // nothing more will come
    Reply r;
    c.recv(r);
    EXPECT_EQ(r.error(), EINVAL);
    EXPECT_EQ(r.h.msg_id, 90);
    EXPECT_TRUE(c.closed_by_peer());
  }
  Raw again(path_);
  ASSERT_TRUE(again.connected());
  hello(again);
  still_serving(again, 91);
}

TEST_F(ServerSocket, RegionInfoArgszProtocol) {
  Raw c(path_);
  ASSERT_TRUE(c.connected());
  hello(c);
  // argsz of the bare struct: the reply says how much is needed, carries no caps and no fd.
  vu::RegionInfo req{sizeof req, 0, 0, 0, 0, 0};
  ASSERT_TRUE(c.send(message(100, vu::cmd::kDeviceGetRegionInfo, &req, sizeof req)));
  Reply small;
  c.recv(small);
  ASSERT_EQ(small.error(), 0);
  ASSERT_EQ(small.payload.size(), sizeof(vu::RegionInfo));
  vu::RegionInfo info;
  std::memcpy(&info, small.payload.data(), sizeof info);
  const uint32_t need = sizeof(vu::RegionInfo) + sizeof(vu::SparseMmapCap) +
                        sizeof(vu::SparseMmapArea);
  EXPECT_EQ(info.argsz, need);
  EXPECT_EQ(info.cap_offset, 0u);
  EXPECT_TRUE(info.flags & vu::kRegionFlagCaps);
  EXPECT_TRUE(small.fds.empty());

  req.argsz = need;
  ASSERT_TRUE(c.send(message(101, vu::cmd::kDeviceGetRegionInfo, &req, sizeof req)));
  Reply full;
  c.recv(full);
  ASSERT_EQ(full.error(), 0);
  ASSERT_EQ(full.payload.size(), need);
  std::memcpy(&info, full.payload.data(), sizeof info);
  EXPECT_EQ(info.cap_offset, sizeof(vu::RegionInfo));
  EXPECT_EQ(info.size, ToyDevice::kBar0Size);
  vu::SparseMmapCap cap;
  std::memcpy(&cap, full.payload.data() + info.cap_offset, sizeof cap);
  EXPECT_EQ(cap.header.id, vu::kCapSparseMmap);
  EXPECT_EQ(cap.header.version, 1);
  EXPECT_EQ(cap.header.next, 0u);
  EXPECT_EQ(cap.nr_areas, 1u);
  vu::SparseMmapArea area;
  std::memcpy(&area, full.payload.data() + info.cap_offset + sizeof cap, sizeof area);
  EXPECT_EQ(area.offset, 0x1000u);
  EXPECT_EQ(area.size, 0x1000u);
  EXPECT_EQ(full.fds.size(), 1u);  // the region fd for mmap
}

// ---- in-process endpoint ----

TEST(ServerEndpoint, MalformedCallsAreAnswered) {
  ToyDevice dev;
  Server server(dev);
  std::vector<uint8_t> reply;
  std::vector<int> fds;
  auto err = [&] {
    vu::Header h{};
    if (reply.size() < sizeof h) return -1;
    std::memcpy(&h, reply.data(), sizeof h);
    return (h.flags & vu::flags::kError) ? static_cast<int>(h.error) : 0;
  };
  const uint8_t junk[5] = {1, 2, 3, 4, 5};
  server.handle(junk, sizeof junk, nullptr, 0, reply, fds);
  EXPECT_EQ(err(), EINVAL);
  server.handle(nullptr, 0, nullptr, 0, reply, fds);
  EXPECT_EQ(err(), EINVAL);
  auto m = message(1, vu::cmd::kDeviceReset, nullptr, 0);
  m.push_back(0);  // one byte more than msg_size says
  server.handle(m.data(), m.size(), nullptr, 0, reply, fds);
  EXPECT_EQ(err(), EINVAL);

  vu::Version v{0, 7};  // a newer minor is answered with ours
  m = message(2, vu::cmd::kVersion, &v, sizeof v);
  server.handle(m.data(), m.size(), nullptr, 0, reply, fds);
  ASSERT_EQ(err(), 0);
  vu::Version got;
  std::memcpy(&got, reply.data() + sizeof(vu::Header), sizeof got);
  EXPECT_EQ(got.major, 0);
  EXPECT_EQ(got.minor, 1);

  Pipe p;
  int w = p.release_w();
  m = message(3, vu::cmd::kDeviceReset, nullptr, 0);
  server.handle(m.data(), m.size(), &w, 1, reply, fds);  // the endpoint owns w now
  EXPECT_EQ(err(), 0);  // a stray fd is closed, the reset done
  EXPECT_TRUE(p.writers_gone());
  EXPECT_EQ(server.stats().stray_fds, 1u);

  server.handle(m.data(), m.size(), nullptr, 0, reply, fds);
  EXPECT_EQ(err(), 0);
  EXPECT_EQ(server.stats().errors, 3u);
}

// An in-process connection behaves as an accepted socket: one client at a time, its session
// ends with it, and once the server drops it (surprise removal) it fails every message with
// ENODEV for good, even after a new client has connected.
TEST(ServerEndpoint, InProcessConnectionsAreSessions) {
  ToyDevice dev;
  Server server(dev);
  auto call = [](vu::MessageEndpoint& c, const std::vector<uint8_t>& m, std::vector<int> in = {}) {
    std::vector<uint8_t> reply;
    std::vector<int> fds;
    c.handle(m.data(), m.size(), in.data(), in.size(), reply, fds);
    for (int fd : fds) ::close(fd);
    vu::Header h{};
    if (reply.size() < sizeof h) return -1;
    std::memcpy(&h, reply.data(), sizeof h);
    return (h.flags & vu::flags::kError) ? static_cast<int>(h.error) : 0;
  };
  vu::Version v{0, 1};
  const auto version = message(1, vu::cmd::kVersion, &v, sizeof v);
  const auto reset = message(2, vu::cmd::kDeviceReset, nullptr, 0);
  vu::DmaMap map{sizeof map, vu::kDmaRead | vu::kDmaWrite, 0, 0x100000, 0x10000};
  const auto dma_map = message(3, vu::cmd::kDmaMap, &map, sizeof map);
  auto memfd = [] {
    const int fd = ::memfd_create("dma", MFD_CLOEXEC);
    EXPECT_EQ(::ftruncate(fd, 1 << 20), 0);
    return fd;
  };

  auto first = server.connect_in_process();
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(server.in_process_connected());
  EXPECT_EQ(server.connect_in_process(), nullptr) << "one client at a time";
  ASSERT_EQ(call(*first, version), 0);
  ASSERT_EQ(call(*first, dma_map, {memfd()}), 0);
  EXPECT_EQ(server.dma_map_count(), 1u);

  // The client hangs up: its session (DMA maps) ends with it; the next one starts afresh.
  first.reset();
  EXPECT_EQ(server.dma_map_count(), 0u);
  EXPECT_FALSE(server.negotiated());
  auto second = server.connect_in_process();
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(call(*second, version), 0);
  ASSERT_EQ(call(*second, dma_map, {memfd()}), 0);

  // The server drops it (a surprise removal): every message fails with ENODEV, also once a
  // new client is connected to the same server (a re-inserted function).
  server.disconnect();
  EXPECT_EQ(server.dma_map_count(), 0u);
  EXPECT_EQ(call(*second, reset), ENODEV);
  auto third = server.connect_in_process();
  ASSERT_NE(third, nullptr);
  ASSERT_EQ(call(*third, version), 0);
  ASSERT_EQ(call(*third, dma_map, {memfd()}), 0);
  EXPECT_EQ(call(*second, reset), ENODEV);
  EXPECT_EQ(call(*second, version), ENODEV);
  second.reset();  // a dead connection's hang-up leaves the live session alone
  EXPECT_EQ(server.dma_map_count(), 1u);
  EXPECT_EQ(call(*third, reset), 0);
}

}  // namespace
}  // namespace pollux::emu::vfio_user
