// Does MSG_ZEROCOPY pay on this path? A sender thread streams NVMe/TCP-shaped C2H records
// (24-byte header + 4 KiB data from a ring of 128 buffers) over 127.0.0.1 to a receiver
// thread, `batch` records per sendmsg, and reports the sender's CPU time per record and what
// the kernel's completions said (SO_EE_CODE_ZEROCOPY_COPIED: the kernel copied after all).
//   bazel run //tools/bench:zerocopy_probe -- [--zerocopy] [--batch N] [--seconds S]
// Sender on CPU 0, receiver on CPU 1. Loopback delivers locally, where the kernel copies
// pinned pages before queueing them to the receiving socket.
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kData = 4096, kHeader = 24, kBuffers = 128;

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
double seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Completions {
  uint64_t copied = 0, zero_copied = 0;
};

// Reads the error queue: each notification covers sendmsg calls [ee_info, ee_data].
void drain_completions(int fd, Completions& c) {
  for (;;) {
    char control[128];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm != nullptr; cm = CMSG_NXTHDR(&m, cm)) {
      sock_extended_err e;
      std::memcpy(&e, CMSG_DATA(cm), sizeof e);
      if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      const uint64_t calls = uint64_t{e.ee_data} - e.ee_info + 1;
      (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED ? c.copied : c.zero_copied) += calls;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool zerocopy = false;
  int batch = 32;
  double run_s = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--zerocopy") {
      zerocopy = true;
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::max(1, std::min(256, std::atoi(argv[++i])));
    } else if (a == "--seconds" && i + 1 < argc) {
      run_s = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--zerocopy] [--batch N] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  const int one = 1;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen");
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread receiver([&] {
    pin(1);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<char> buf(64 * 1024);
    while (!stop.load(std::memory_order_relaxed))
      (void)recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    close(fd);
  });
  pin(0);
  const int fd = accept(listener, nullptr, nullptr);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (zerocopy && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) {
    std::perror("SO_ZEROCOPY");
    return 1;
  }
  auto* data = static_cast<char*>(mmap(nullptr, kBuffers * kData, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  std::memset(data, 0x5a, kBuffers * kData);
  std::vector<char> headers(kBuffers * kHeader, 0);
  std::vector<iovec> iov(static_cast<std::size_t>(batch) * 2);
  // Records are counted only when sent whole; a partial send's rest is dropped (the stream
  // carries no meaning here), so the count is a lower bound.
  uint64_t bytes = 0, calls = 0;
  Completions done;
  std::size_t next = 0;
  const double cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID), wall0 = seconds(CLOCK_MONOTONIC);
  while (seconds(CLOCK_MONOTONIC) - wall0 < run_s) {
    for (int i = 0; i < batch; ++i, next = (next + 1) % kBuffers) {
      iov[2 * i] = {&headers[next * kHeader], kHeader};
      iov[2 * i + 1] = {data + next * kData, kData};
    }
    msghdr m{};
    m.msg_iov = iov.data();
    m.msg_iovlen = iov.size();
    const ssize_t r = sendmsg(fd, &m, MSG_DONTWAIT | (zerocopy ? MSG_ZEROCOPY : 0));
    if (r > 0) {
      bytes += static_cast<uint64_t>(r);
      ++calls;
    } else {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1);
    }
    if (zerocopy) drain_completions(fd, done);
  }
  const double cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0,
               wall = seconds(CLOCK_MONOTONIC) - wall0;
  stop = true;
  receiver.join();
  const double records = static_cast<double>(bytes) / (kData + kHeader);
  std::printf(
      "%s batch %d: %.0f K records/s, sender CPU %.2f us per 4 KiB record (%.2f s busy of %.2f "
      "s), %llu sendmsg; completions: %llu copied, %llu zero-copied\n",
      zerocopy ? "MSG_ZEROCOPY" : "copy", batch, records / wall / 1e3, cpu / records * 1e6, cpu,
      wall, static_cast<unsigned long long>(calls), static_cast<unsigned long long>(done.copied),
      static_cast<unsigned long long>(done.zero_copied));
  close(fd);
  close(listener);
  return 0;
}
