// pollux-emu's device as a hostile driver would drive it: any vfio-user message (with an fd, a
// wrong one or none), any register and doorbell write, and any admin command with PRPs and
// SGLs pointing anywhere, in any order. The device may fail a message or a command; it must
// never crash, hang or touch memory outside what was DMA-mapped.
//
// Each input runs on a fresh device (one 1 MiB namespace) that an honest driver has set up
// first: VERSION, 256 KiB of guest memory DMA-mapped from a memfd at IOVA 1 MiB, bus
// mastering on, the admin queues in that memory, CC.EN = 1. The memfd is twice as long as the
// mapping; the unmapped half holds a canary that must survive, but for the pages the input
// DMA-maps writable itself (its fd is the whole memfd, so such a map is legitimate and the
// device may write there). Then the input is a list of
// records, each starting with an opcode byte:
//   0 LEN(2) BYTES  a vfio-user message, no fd        1 LEN(2) BYTES  the same with an fd
//   2 OFF(3) LEN(1) BYTES  written into guest memory  3 SQE(64)  an admin command, rung in
//   4 IDX(1) VAL(2) a doorbell write                  5 N(1)  N device polls
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "emulator/device/nvme_device.h"
#include "spec/nvme.h"
#include "spec/vfio_user.h"

namespace {

namespace vu = pollux::spec::vfio_user;
namespace reg = pollux::spec::nvme::reg;
using pollux::emu::device::NvmeDevice;

constexpr uint64_t kIova = 1ull << 20;
constexpr size_t kMapped = 256 * 1024;
constexpr uint8_t kCanary = 0xa5;
constexpr uint32_t kAdminEntries = 64;
constexpr size_t kPage = 4096;

struct Harness {
  std::unique_ptr<NvmeDevice> dev;
  int memfd = -1;
  uint8_t* mem = nullptr;  // the whole memfd: mapped half, then the canary half
  uint16_t msg_id = 1;
  uint32_t sq_tail = 0;
  std::vector<bool> exposed = std::vector<bool>(kMapped / kPage);  // canary pages mapped

  ~Harness() {
    dev.reset();  // unmaps the server's view first
    if (mem != nullptr) munmap(mem, 2 * kMapped);
    if (memfd >= 0) close(memfd);
  }

  void send(uint16_t command, const void* payload, size_t len, const int* fds = nullptr,
            size_t nfds = 0) {
    std::vector<uint8_t> msg(sizeof(vu::Header) + len);
    vu::Header h{msg_id++, command, static_cast<uint32_t>(msg.size()), vu::flags::kTypeCommand, 0};
    std::memcpy(msg.data(), &h, sizeof h);
    if (len) std::memcpy(msg.data() + sizeof h, payload, len);
    raw(msg.data(), msg.size(), fds, nfds);
  }
  // False if the server answered with an error (a message flagged "no reply" gets no answer
  // either way: true).
  bool raw(const uint8_t* bytes, size_t len, const int* fds, size_t nfds) {
    std::vector<uint8_t> reply;
    std::vector<int> reply_fds;
    dev->server().handle(bytes, len, fds, nfds, reply, reply_fds);
    for (int fd : reply_fds) close(fd);  // region fds the client would mmap
    vu::Header h{};
    if (reply.size() < sizeof h) return true;
    std::memcpy(&h, reply.data(), sizeof h);
    return (h.flags & vu::flags::kError) == 0;
  }
  void region_write(uint32_t region, uint64_t offset, const void* value, uint32_t count) {
    std::vector<uint8_t> p(sizeof(vu::RegionAccess) + count);
    vu::RegionAccess a{offset, region, count};
    std::memcpy(p.data(), &a, sizeof a);
    std::memcpy(p.data() + sizeof a, value, count);
    send(vu::cmd::kRegionWrite, p.data(), p.size());
  }
  void write32(uint64_t offset, uint32_t v) { region_write(vu::region::kBar0, offset, &v, 4); }
  void write64(uint64_t offset, uint64_t v) { region_write(vu::region::kBar0, offset, &v, 8); }

  bool set_up() {
    pollux::emu::nvme::ControllerConfig config;
    config.namespaces = {{1u << 20, 512, "memory"}};
    config.max_io_queue_pairs = 4;  // small: a device per input must be cheap to make
    config.max_queue_entries = 256;
    auto created = NvmeDevice::create(config);
    if (!created) return false;
    dev = std::move(created).value();
    memfd = memfd_create("fuzz-guest", MFD_CLOEXEC);
    if (memfd < 0 || ftruncate(memfd, 2 * kMapped) != 0) return false;
    mem = static_cast<uint8_t*>(
        mmap(nullptr, 2 * kMapped, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
    if (mem == MAP_FAILED) {
      mem = nullptr;
      return false;
    }
    std::memset(mem + kMapped, kCanary, kMapped);
    const vu::Version v{vu::kMajor, vu::kMinor};
    send(vu::cmd::kVersion, &v, sizeof v);
    const vu::DmaMap map{sizeof(vu::DmaMap), vu::kDmaRead | vu::kDmaWrite, 0, kIova, kMapped};
    const int fd = dup(memfd);  // the server owns the fds it is given
    send(vu::cmd::kDmaMap, &map, sizeof map, &fd, 1);
    const uint16_t command = 0x6;  // memory space and bus master enable
    region_write(vu::region::kConfig, 4, &command, 2);
    write32(reg::kAqa, ((kAdminEntries - 1) << 16) | (kAdminEntries - 1));
    write64(reg::kAsq, kIova);
    write64(reg::kAcq, kIova + 64 * kAdminEntries);
    write32(reg::kCc, (4u << 20) | (6u << 16) | 1u);  // IOCQES 4, IOSQES 6, EN
    for (int i = 0; i < 8; ++i) dev->poll(16);
    uint32_t csts = 0;
    dev->region_read(vu::region::kBar0, reg::kCsts, &csts, 4);
    return (csts & 1) != 0;  // ready: the input reaches the command path
  }

  // Admin completions posted (phase bit set in the first pass over the CQ).
  int admin_completions() const {
    int n = 0;
    for (uint32_t i = 0; i < kAdminEntries; ++i)
      n += (mem[64 * kAdminEntries + 16 * i + 14] & 1) != 0;
    return n;
  }

  // A writable DMA_MAP of the input's, sent with the memfd and not refused, may map canary
  // pages: the device may write those. (A map the server refused leaves them checked.)
  void note_own_map(const uint8_t* bytes, size_t len) {
    vu::Header hdr;
    vu::DmaMap m;
    if (len < sizeof hdr + sizeof m) return;
    std::memcpy(&hdr, bytes, sizeof hdr);
    if (hdr.command != vu::cmd::kDmaMap) return;
    std::memcpy(&m, bytes + sizeof hdr, sizeof m);
    if ((m.flags & vu::kDmaWrite) == 0) return;
    const uint64_t end = m.size > UINT64_MAX - m.offset ? UINT64_MAX : m.offset + m.size;
    for (size_t i = 0; i < exposed.size(); ++i) {
      const uint64_t page = kMapped + i * kPage;
      if (m.offset < page + kPage && page < end) exposed[i] = true;
    }
  }

  // A memcmp per page: a loop over 256 KiB of bytes was most of an input's time under
  // libFuzzer's comparison tracing.
  bool canary_intact() const {
    static const std::vector<uint8_t> canary(kPage, kCanary);
    for (size_t i = 0; i < exposed.size(); ++i) {
      if (!exposed[i] && std::memcmp(mem + kMapped + i * kPage, canary.data(), kPage) != 0)
        return false;
    }
    return true;
  }
};

// Reads n bytes from the input, or fails at its end.
struct Reader {
  const uint8_t* p;
  size_t left;
  bool take(void* out, size_t n) {
    if (n > left) return false;
    if (n == 0) return true;  // out may be an empty vector's null data()
    std::memcpy(out, p, n);
    p += n;
    left -= n;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  if (!h.set_up()) __builtin_trap();  // the honest part must always work
  Reader in{data, size};
  for (uint8_t op = 0; in.take(&op, 1);) {
    switch (op % 6) {
      case 0:
      case 1: {
        uint16_t len = 0;
        if (!in.take(&len, 2)) break;
        std::vector<uint8_t> msg(std::min<size_t>(len, in.left));
        in.take(msg.data(), msg.size());
        // With an fd: the guest memory again (a second map, an overlap), or one the message
        // does not expect.
        const int fds[1] = {op % 6 == 1 ? dup(h.memfd) : -1};  // the server owns it
        const bool ok =
            h.raw(msg.data(), msg.size(), op % 6 == 1 ? fds : nullptr, op % 6 == 1 ? 1 : 0);
        if (ok && op % 6 == 1) h.note_own_map(msg.data(), msg.size());
        break;
      }
      case 2: {
        uint8_t off[3], len = 0;
        if (!in.take(off, 3) || !in.take(&len, 1)) break;
        const size_t at = (off[0] | off[1] << 8 | off[2] << 16) % kMapped;
        const size_t n = std::min<size_t>({len, in.left, kMapped - at});
        in.take(h.mem + at, n);
        break;
      }
      case 3: {
        uint8_t sqe[64];
        if (!in.take(sqe, sizeof sqe)) break;
        std::memcpy(h.mem + 64 * (h.sq_tail % kAdminEntries), sqe, sizeof sqe);
        h.sq_tail = (h.sq_tail + 1) % kAdminEntries;
        h.write32(0x1000, h.sq_tail);
        break;
      }
      case 4: {
        uint8_t idx = 0;
        uint16_t value = 0;
        if (!in.take(&idx, 1) || !in.take(&value, 2)) break;
        h.write32(0x1000 + 4u * idx, value);
        break;
      }
      default: {
        uint8_t n = 0;
        if (!in.take(&n, 1)) break;
        for (int i = 0; i < n % 32; ++i) h.dev->poll(16);
      }
    }
  }
  for (int i = 0; i < 4; ++i) h.dev->poll(64);
  if (!h.canary_intact()) __builtin_trap();  // DMA outside the map
  if (std::getenv("POLLUX_FUZZ_DEBUG"))  // for corpus authors: did the commands run?
    std::fprintf(stderr, "vfio_user_nvme: %d admin completions\n", h.admin_completions());
  // The device still answers (a message, a register read) after whatever came before.
  const vu::Version v{vu::kMajor, vu::kMinor};
  h.send(vu::cmd::kVersion, &v, sizeof v);
  return 0;
}
