#include "emulator/vfio_user/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>

#include "common/text.h"
#include "nlohmann/json.hpp"
#include "spec/wire.h"

namespace pollux::emu::vfio_user {

namespace vu = spec::vfio_user;

// Received fds: closed on destruction unless taken.
class Server::Fds {
 public:
  Fds(const int* fds, std::size_t n) : v_(fds, fds + n) {}
  ~Fds() {
    for (int fd : v_)
      if (fd >= 0) ::close(fd);
  }
  Fds(const Fds&) = delete;
  Fds& operator=(const Fds&) = delete;
  std::size_t size() const { return v_.size(); }
  int get(std::size_t i) const { return v_[i]; }
  int take(std::size_t i) { return std::exchange(v_[i], -1); }
  // Closes them all now; returns how many there were.
  std::size_t close_all() {
    const std::size_t n = v_.size();
    for (int fd : v_)
      if (fd >= 0) ::close(fd);
    v_.clear();
    return n;
  }

 private:
  std::vector<int> v_;
};

namespace {

constexpr std::size_t kHdr = sizeof(vu::Header);
constexpr uint32_t kMaxFdsCap = 253;  // SCM_MAX_FD

using spec::wire::append;
using spec::wire::load;

void close_all(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

bool is_eventfd(int fd) {
  char link[64];
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
  if (n < 0) return true;  // no /proc: cannot tell, accept
  return std::string_view(link, static_cast<std::size_t>(n)) == "anon_inode:[eventfd]";
}

}  // namespace

Server::Server(DeviceModel& model, ServerOptions options) : model_(model), opt_(options) {
  opt_.max_msg_fds = std::clamp<uint32_t>(opt_.max_msg_fds, 1, kMaxFdsCap);
  if (opt_.max_data_xfer_size == 0) opt_.max_data_xfer_size = vu::kDefaultMaxDataXferSize;
  if (opt_.max_messages_per_poll < 1) opt_.max_messages_per_poll = 1;
}

Server::~Server() {
  disconnect();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    path_owner_.release();  // only if it is still ours
  }
}

std::size_t Server::max_message_size() const {
  return std::max<std::size_t>(kHdr + sizeof(vu::RegionAccess) + opt_.max_data_xfer_size,
                               64 * 1024);
}

// ------------------------------------------------------------------------ in-process ---

void Server::handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
                    std::vector<uint8_t>& reply, std::vector<int>& reply_fds) {
  reply.clear();
  reply_fds.clear();
  Fds owned(fds, nfds);
  process(request, len, owned, reply, reply_fds);
}

class Server::InProcessConnection final : public vu::MessageEndpoint {
 public:
  InProcessConnection(Server* server, uint64_t id) : server_(server), id_(id) {}
  ~InProcessConnection() override {
    if (live()) {  // the client hangs up
      server_->in_process_conn_ = 0;
      server_->drop_session();
      ++server_->stats_.disconnects;
    }
  }
  void handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
              std::vector<uint8_t>& reply, std::vector<int>& reply_fds) override {
    if (live()) return server_->handle(request, len, fds, nfds, reply, reply_fds);
    // Dropped by the server: nothing reaches the device any more.
    reply.clear();
    reply_fds.clear();
    Fds owned(fds, nfds);
    vu::Header h{};
    if (request == nullptr || len < kHdr) return;
    std::memcpy(&h, request, kHdr);
    vu::Header r{h.msg_id, h.command, static_cast<uint32_t>(kHdr),
                 vu::flags::kTypeReply | vu::flags::kError, static_cast<uint32_t>(ENODEV)};
    append(reply, r);
  }

  bool hung_up() const override { return !live(); }

 private:
  bool live() const { return server_->in_process_conn_ == id_; }
  Server* server_;
  uint64_t id_;
};

std::unique_ptr<vu::MessageEndpoint> Server::connect_in_process() {
  if (conn_fd_ >= 0 || in_process_conn_ != 0) return nullptr;
  drop_session();  // a connection starts with no session, whatever handle() left
  in_process_conn_ = next_conn_id_++;
  ++stats_.connections;
  return std::make_unique<InProcessConnection>(this, in_process_conn_);
}

void Server::process(const uint8_t* request, std::size_t len, Fds& fds, std::vector<uint8_t>& reply,
                     std::vector<int>& reply_fds) {
  vu::Header h{};
  if (request != nullptr) std::memcpy(&h, request, std::min(len, kHdr));
  std::vector<uint8_t> payload;
  int rc;
  const bool whole = request != nullptr && len >= kHdr && h.msg_size == len;
  if (whole && (h.flags & vu::flags::kTypeMask) != vu::flags::kTypeCommand) {
    // A reply or unknown type: the server sends no commands, so nothing awaits it.
    ++stats_.errors;
    return;
  }
  if (!whole) {
    rc = -EINVAL;
  } else if (fds.size() > opt_.max_msg_fds) {
    rc = -EINVAL;
  } else {
    try {
      rc = dispatch(h, request + kHdr, len - kHdr, fds, payload, reply_fds);
    } catch (const std::bad_alloc&) {
      rc = -ENOMEM;
    } catch (...) {
      rc = -EINVAL;
    }
  }
  ++stats_.messages;
  if (rc < 0) {
    ++stats_.errors;
    payload.clear();
    close_all(reply_fds);
  }
  if (whole && (h.flags & vu::flags::kNoReply) != 0) {
    close_all(reply_fds);
    return;
  }
  vu::Header r{};
  r.msg_id = h.msg_id;
  r.command = h.command;
  r.msg_size = static_cast<uint32_t>(kHdr + payload.size());
  r.flags = vu::flags::kTypeReply | (rc < 0 ? vu::flags::kError : 0);
  r.error = rc < 0 ? static_cast<uint32_t>(-rc) : 0;
  reply.reserve(r.msg_size);
  append(reply, r);
  reply.insert(reply.end(), payload.begin(), payload.end());
}

int Server::dispatch(const vu::Header& h, const uint8_t* p, std::size_t n, Fds& fds,
                     std::vector<uint8_t>& out, std::vector<int>& out_fds) {
  // Fds attached to a command that takes none change nothing: close them and carry on
  // (libvfio-user does the same; refusing broke SPDK's host at every DMA_UNMAP).
  if (!vu::cmd::request_takes_fds(h.command)) stats_.stray_fds += fds.close_all();
  if (h.command == vu::cmd::kVersion) return do_version(p, n, out);
  if (!negotiated_) return -EINVAL;  // VERSION comes first
  switch (h.command) {
    case vu::cmd::kDmaMap:
      return do_dma_map(p, n, fds);
    case vu::cmd::kDmaUnmap:
      return do_dma_unmap(p, n, out);
    case vu::cmd::kDeviceGetInfo:
      return do_device_info(p, n, out);
    case vu::cmd::kDeviceGetRegionInfo:
      return do_region_info(p, n, out, out_fds);
    case vu::cmd::kDeviceGetIrqInfo:
      return do_irq_info(p, n, out);
    case vu::cmd::kDeviceSetIrqs:
      return do_set_irqs(p, n, fds);
    case vu::cmd::kRegionRead:
      return do_region_read(p, n, out);
    case vu::cmd::kRegionWrite:
      return do_region_write(p, n, out);
    case vu::cmd::kDeviceReset:
      return do_reset();
    case vu::cmd::kDmaRead:
    case vu::cmd::kDmaWrite:
      return -EINVAL;  // server -> client commands
    case vu::cmd::kDeviceGetRegionIoFds:
    case vu::cmd::kDirtyPages:
    case vu::cmd::kRegionWriteMulti:  // write_multiple is not offered
    case vu::cmd::kDeviceFeature:
    case vu::cmd::kMigDataRead:
    case vu::cmd::kMigDataWrite:
      return -ENOTSUP;
    default:
      return -ENOSYS;
  }
}

int Server::do_version(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n < sizeof(vu::Version)) return -EINVAL;
  if (negotiated_) return -EINVAL;  // once per connection
  const auto v = load<vu::Version>(p);
  if (v.major != vu::kMajor) return -ENOTSUP;

  uint32_t client_fds = vu::kDefaultMaxMsgFds;
  if (n > sizeof(vu::Version)) {
    const char* json = reinterpret_cast<const char*>(p + sizeof(vu::Version));
    const std::size_t jlen = n - sizeof(vu::Version);
    const void* nul = std::memchr(json, '\0', jlen);
    if (nul == nullptr) return -EINVAL;  // the JSON must be NUL-terminated
    const std::size_t slen = static_cast<std::size_t>(static_cast<const char*>(nul) - json);
    if (slen > 0) {
      const auto j = nlohmann::json::parse(json, json + slen, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return -EINVAL;
      if (auto caps = j.find(vu::kCapabilities); caps != j.end()) {
        if (!caps->is_object()) return -EINVAL;
        for (const char* key :
             {vu::kCapMaxMsgFds, vu::kCapMaxDataXferSize, vu::kCapMaxDmaMaps, vu::kCapPgsizes}) {
          auto it = caps->find(key);
          if (it != caps->end() && !it->is_number_unsigned()) return -EINVAL;
        }
        if (auto it = caps->find(vu::kCapMaxMsgFds); it != caps->end()) {
          client_fds = static_cast<uint32_t>(std::min<uint64_t>(it->get<uint64_t>(), kMaxFdsCap));
        }
      }
    }
  }
  client_max_msg_fds_ = client_fds;

  nlohmann::json caps = nlohmann::json::object();
  caps[vu::kCapMaxMsgFds] = opt_.max_msg_fds;
  caps[vu::kCapMaxDataXferSize] = opt_.max_data_xfer_size;
  caps[vu::kCapMaxDmaMaps] = opt_.max_dma_maps;
  caps[vu::kCapPgsizes] = opt_.pgsizes;
  nlohmann::json doc = nlohmann::json::object();
  doc[vu::kCapabilities] = caps;
  const std::string text = json_text(doc);

  // Version, then the NUL-terminated JSON.
  out.assign(sizeof(vu::Version) + text.size() + 1, 0);
  const vu::Version ours{vu::kMajor, std::min(v.minor, vu::kMinor)};
  std::memcpy(out.data(), &ours, sizeof ours);
  std::memcpy(out.data() + sizeof ours, text.data(), text.size());
  negotiated_ = true;
  return 0;
}

// ------------------------------------------------------------------------------- DMA ---

int Server::do_dma_map(const uint8_t* p, std::size_t n, Fds& fds) {
  if (n != sizeof(vu::DmaMap)) return -EINVAL;
  const auto m = load<vu::DmaMap>(p);
  if (m.argsz < sizeof(vu::DmaMap)) return -EINVAL;
  if ((m.flags & ~(vu::kDmaRead | vu::kDmaWrite)) != 0) return -EINVAL;
  if (m.size == 0 || m.size > UINT64_MAX - m.address) return -EINVAL;
  if (fds.size() == 0) return -ENOTSUP;  // no fd: would need DMA_READ/WRITE messages
  if (fds.size() != 1) return -EINVAL;
  if (maps_.size() >= opt_.max_dma_maps) return -ENOSPC;
  for (const Mapping& x : maps_) {
    if (m.address < x.iova + x.size && x.iova < m.address + m.size) return -EEXIST;
  }

  const int fd = fds.get(0);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t map_off = m.offset & ~(page - 1);
  const uint64_t delta = m.offset - map_off;
  if (m.size > SIZE_MAX - delta || m.offset > UINT64_MAX - m.size) return -EINVAL;
  // Mapping past the end of a file "works" and faults (SIGBUS) on first touch: refuse it.
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -errno;
  if (S_ISREG(st.st_mode) && m.offset + m.size > static_cast<uint64_t>(st.st_size)) {
    return -EINVAL;
  }
  const int prot =
      ((m.flags & vu::kDmaRead) ? PROT_READ : 0) | ((m.flags & vu::kDmaWrite) ? PROT_WRITE : 0);
  const std::size_t map_len = static_cast<std::size_t>(m.size + delta);
  void* a = ::mmap(nullptr, map_len, prot == 0 ? PROT_NONE : prot, MAP_SHARED, fd,
                   static_cast<off_t>(map_off));
  if (a == MAP_FAILED) return -errno;
  // The mapping keeps the file alive: the fd is closed by Fds.
  Mapping mp{m.address, m.size, m.flags, static_cast<uint8_t*>(a) + delta, a, map_len};
  auto it = std::lower_bound(maps_.begin(), maps_.end(), m.address,
                             [](const Mapping& x, uint64_t iova) { return x.iova < iova; });
  maps_.insert(it, mp);
  last_hit_ = 0;
  return 0;
}

void Server::unmap(std::size_t i) {
  ::munmap(maps_[i].map_addr, maps_[i].map_len);
  maps_.erase(maps_.begin() + static_cast<std::ptrdiff_t>(i));
  last_hit_ = 0;
}

int Server::do_dma_unmap(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n != sizeof(vu::DmaUnmap)) return -EINVAL;
  auto u = load<vu::DmaUnmap>(p);
  if (u.argsz < sizeof(vu::DmaUnmap) || u.flags != 0) return -EINVAL;
  for (std::size_t i = 0; i < maps_.size(); ++i) {
    if (maps_[i].iova == u.address && maps_[i].size == u.size) {
      model_.on_dma_unmap(u.address, u.size);
      unmap(i);
      u.argsz = sizeof(vu::DmaUnmap);
      append(out, u);
      return 0;
    }
  }
  return -ENOENT;
}

uint8_t* Server::translate(uint64_t iova, std::size_t len) {
  constexpr uint32_t kRw = vu::kDmaRead | vu::kDmaWrite;
  if (len > UINT64_MAX - iova) return nullptr;
  auto inside = [&](const Mapping& m) {
    return iova >= m.iova && iova - m.iova <= m.size && len <= m.size - (iova - m.iova) &&
           (m.flags & kRw) == kRw;
  };
  if (last_hit_ < maps_.size() && inside(maps_[last_hit_])) {
    const Mapping& m = maps_[last_hit_];
    return m.host + (iova - m.iova);
  }
  auto it = std::upper_bound(maps_.begin(), maps_.end(), iova,
                             [](uint64_t a, const Mapping& m) { return a < m.iova; });
  if (it == maps_.begin()) return nullptr;
  --it;
  if (!inside(*it)) return nullptr;
  last_hit_ = static_cast<std::size_t>(it - maps_.begin());
  return it->host + (iova - it->iova);
}

// ---------------------------------------------------------------------------- device ---

int Server::do_device_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n < sizeof(vu::DeviceInfo)) return -EINVAL;
  const auto req = load<vu::DeviceInfo>(p);
  if (req.argsz < sizeof(vu::DeviceInfo)) return -EINVAL;
  append(out, vu::DeviceInfo{sizeof(vu::DeviceInfo), vu::kDeviceFlagPci | vu::kDeviceFlagReset,
                             vu::region::kNumPciRegions, vu::irq::kNumPciIrqs});
  return 0;
}

int Server::do_region_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out,
                           std::vector<int>& out_fds) {
  if (n < sizeof(vu::RegionInfo)) return -EINVAL;
  const auto req = load<vu::RegionInfo>(p);
  if (req.argsz < sizeof(vu::RegionInfo)) return -EINVAL;
  if (req.index >= vu::region::kNumPciRegions) return -EINVAL;

  const RegionDesc d = model_.region(req.index);
  constexpr uint32_t kKnown = vu::kRegionFlagRead | vu::kRegionFlagWrite | vu::kRegionFlagMmap;
  uint32_t flags = d.size == 0 ? 0 : (d.flags & kKnown);
  if (d.fd < 0) flags &= ~vu::kRegionFlagMmap;

  std::vector<uint8_t> caps;
  if ((flags & vu::kRegionFlagMmap) && !d.sparse.empty()) {
    vu::SparseMmapCap cap{};
    cap.header = vu::CapHeader{vu::kCapSparseMmap, vu::kCapSparseMmapVersion, 0};
    std::vector<vu::SparseMmapArea> areas;
    for (const SparseArea& a : d.sparse) {
      if (a.size == 0 || a.offset > d.size || a.size > d.size - a.offset) continue;  // model bug
      areas.push_back({a.offset, a.size});
    }
    cap.nr_areas = static_cast<uint32_t>(areas.size());
    append(caps, cap);
    for (const auto& a : areas) append(caps, a);
  }

  vu::RegionInfo info{};
  info.argsz = static_cast<uint32_t>(sizeof(vu::RegionInfo) + caps.size());
  info.flags = flags | (caps.empty() ? 0 : vu::kRegionFlagCaps);
  info.index = req.index;
  info.size = d.size;
  info.offset = (flags & vu::kRegionFlagMmap) ? d.fd_offset : 0;
  const bool fits = req.argsz >= info.argsz;
  info.cap_offset = (fits && !caps.empty()) ? sizeof(vu::RegionInfo) : 0;
  append(out, info);
  if (!fits) return 0;  // only the needed argsz; the client asks again
  out.insert(out.end(), caps.begin(), caps.end());
  if (flags & vu::kRegionFlagMmap) {
    if (client_max_msg_fds_ < 1) return -EINVAL;
    const int dup = ::fcntl(d.fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return -errno;
    out_fds.push_back(dup);
  }
  return 0;
}

int Server::do_irq_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n < sizeof(vu::IrqInfo)) return -EINVAL;
  const auto req = load<vu::IrqInfo>(p);
  if (req.argsz < sizeof(vu::IrqInfo) || req.index >= vu::irq::kNumPciIrqs) return -EINVAL;
  vu::IrqInfo info{};
  info.argsz = sizeof(vu::IrqInfo);
  info.index = req.index;
  info.count = model_.irq_count(req.index);
  // As vfio-pci reports them: INTx is maskable and automasked, the others are set as a whole.
  info.flags = vu::kIrqInfoEventfd |
               (req.index == vu::irq::kIntx ? vu::kIrqInfoMaskable | vu::kIrqInfoAutomasked
                                            : vu::kIrqInfoNoresize);
  append(out, info);
  return 0;
}

int Server::do_set_irqs(const uint8_t* p, std::size_t n, Fds& fds) {
  if (n < sizeof(vu::IrqSet)) return -EINVAL;
  const auto s = load<vu::IrqSet>(p);
  if (s.argsz < sizeof(vu::IrqSet) || s.index >= vu::irq::kNumPciIrqs) return -EINVAL;
  const uint32_t data = s.flags & vu::kIrqSetDataTypeMask;
  const uint32_t action = s.flags & vu::kIrqSetActionTypeMask;
  if ((s.flags & ~(vu::kIrqSetDataTypeMask | vu::kIrqSetActionTypeMask)) != 0 ||
      std::popcount(data) != 1 || std::popcount(action) != 1) {
    return -EINVAL;
  }
  const uint32_t total = model_.irq_count(s.index);
  IrqState& st = irqs_[s.index];
  if (st.eventfds.size() < total) {
    st.eventfds.resize(total, -1);
    st.masked.resize(total, false);
  }
  auto clear = [&](uint32_t i) {
    if (st.eventfds[i] >= 0) ::close(st.eventfds[i]);
    st.eventfds[i] = -1;
  };

  if (s.count == 0) {  // DATA_NONE with count 0: disable the whole index
    if (data != vu::kIrqSetDataNone || s.start != 0 || fds.size() != 0) return -EINVAL;
    if (action == vu::kIrqSetActionTrigger) {
      for (uint32_t i = 0; i < st.eventfds.size(); ++i) clear(i);
    }
    return 0;
  }
  if (s.start > total || s.count > total - s.start) return -EINVAL;
  const bool maskable = s.index == vu::irq::kIntx;
  if (action != vu::kIrqSetActionTrigger && !maskable) return -EINVAL;

  if (data == vu::kIrqSetDataEventfd) {
    // Eventfds for mask/unmask notifications are not supported; trigger eventfds are.
    if (action != vu::kIrqSetActionTrigger) return -EINVAL;
    if (fds.size() != 0 && fds.size() != s.count) return -EINVAL;
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (!is_eventfd(fds.get(i))) return -EINVAL;
    for (uint32_t i = 0; i < s.count; ++i) {
      clear(s.start + i);
      if (fds.size() != 0) st.eventfds[s.start + i] = fds.take(i);
    }
    return 0;
  }
  if (fds.size() != 0) return -EINVAL;
  if (data == vu::kIrqSetDataBool && n < sizeof(vu::IrqSet) + s.count) return -EINVAL;
  for (uint32_t i = 0; i < s.count; ++i) {
    if (data == vu::kIrqSetDataBool && p[sizeof(vu::IrqSet) + i] == 0) continue;
    const uint32_t sub = s.start + i;
    if (action == vu::kIrqSetActionMask) {
      st.masked[sub] = true;
    } else if (action == vu::kIrqSetActionUnmask) {
      st.masked[sub] = false;
    } else {
      (void)trigger_irq(s.index, sub);  // loopback trigger: nothing configured is fine
    }
  }
  return 0;
}

int Server::trigger_irq(uint32_t index, uint32_t sub) {
  if (index >= vu::irq::kNumPciIrqs) return -EINVAL;
  const IrqState& st = irqs_[index];
  if (sub >= st.eventfds.size() || st.eventfds[sub] < 0) return -ENOENT;
  if (st.masked[sub]) return -EBUSY;
  const uint64_t one = 1;
  return ::write(st.eventfds[sub], &one, sizeof one) == sizeof one ? 0 : -errno;
}

bool Server::irq_has_eventfd(uint32_t index, uint32_t sub) const {
  return index < vu::irq::kNumPciIrqs && sub < irqs_[index].eventfds.size() &&
         irqs_[index].eventfds[sub] >= 0;
}

int Server::check_region_access(uint32_t index, uint64_t offset, uint32_t count, uint32_t need_flag,
                                RegionDesc* desc) const {
  if (index >= vu::region::kNumPciRegions) return -EINVAL;
  if (count == 0 || count > opt_.max_data_xfer_size) return -EINVAL;
  *desc = model_.region(index);
  if (desc->size == 0) return -EINVAL;
  if (offset > desc->size || count > desc->size - offset) return -EINVAL;
  if ((desc->flags & need_flag) == 0) return -EACCES;
  return 0;
}

int Server::do_region_read(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n != sizeof(vu::RegionAccess)) return -EINVAL;
  const auto a = load<vu::RegionAccess>(p);
  RegionDesc d;
  if (int rc = check_region_access(a.region, a.offset, a.count, vu::kRegionFlagRead, &d); rc)
    return rc;
  append(out, a);
  out.resize(sizeof a + a.count);
  const int rc = model_.region_read(a.region, a.offset, out.data() + sizeof a, a.count);
  return rc < 0 ? rc : 0;
}

int Server::do_region_write(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out) {
  if (n < sizeof(vu::RegionAccess)) return -EINVAL;
  const auto a = load<vu::RegionAccess>(p);
  if (n - sizeof a != a.count) return -EINVAL;
  RegionDesc d;
  if (int rc = check_region_access(a.region, a.offset, a.count, vu::kRegionFlagWrite, &d); rc)
    return rc;
  const int rc = model_.region_write(a.region, a.offset, p + sizeof a, a.count);
  if (rc < 0) return rc;
  append(out, a);
  return 0;
}

int Server::do_reset() {
  model_.on_reset();
  return 0;
}

// ------------------------------------------------------------------------- session ---

void Server::drop_session() {
  while (!maps_.empty()) {
    model_.on_dma_unmap(maps_.back().iova, maps_.back().size);
    unmap(maps_.size() - 1);
  }
  for (IrqState& st : irqs_) {
    close_all(st.eventfds);
    st.masked.clear();
  }
  negotiated_ = false;
  client_max_msg_fds_ = vu::kDefaultMaxMsgFds;
}

void Server::disconnect() {
  if (conn_fd_ >= 0) {
    close_client();
    return;
  }
  if (in_process_conn_ != 0) {
    in_process_conn_ = 0;  // the connection fails from now on
    ++stats_.disconnects;
  }
  drop_session();
}

// -------------------------------------------------------------------------- socket ---

int Server::listen(const std::string& path, const std::string& group, std::string* why) {
  if (listen_fd_ >= 0) return -EBUSY;
  std::string reason;
  if (why == nullptr) why = &reason;
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
  // A live server keeps its socket; a stale one of an earlier run is replaced.
  if (const int rc = common::claim_socket_path(path); rc != 0) return rc;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  if (const int rc = common::restrict_socket_before_bind(fd, path, group, why); rc != 0) {
    ::close(fd);
    return rc;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  if (const int rc = common::restrict_socket_after_bind(path, group, why); rc != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return rc;
  }
  listen_fd_ = fd;
  path_ = path;
  path_owner_.own(path);
  return 0;
}

int Server::accept_client() {
  if (in_process_conn_ != 0) return 0;  // one client at a time: the socket one waits
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -errno;
  if (opt_.send_timeout_ms > 0) {
    timeval tv{opt_.send_timeout_ms / 1000, (opt_.send_timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  conn_fd_ = fd;
  rx_.clear();
  rx_need_ = 0;
  ++stats_.connections;
  return 0;
}

void Server::close_client() {
  if (conn_fd_ < 0) return;
  ::close(conn_fd_);
  conn_fd_ = -1;
  close_all(rx_fds_);
  rx_.clear();
  rx_need_ = 0;
  rx_truncated_ = false;
  drop_session();
  ++stats_.disconnects;
}

int Server::poll_once(int timeout_ms) {
  if (listen_fd_ < 0 && conn_fd_ < 0) return -ENOTCONN;
  if (conn_fd_ < 0) {
    pollfd pf{listen_fd_, POLLIN, 0};
    const int r = ::poll(&pf, 1, timeout_ms);
    if (r <= 0) return (r < 0 && errno != EINTR) ? -errno : 0;
    if (const int rc = accept_client(); rc < 0) return rc;
    if (conn_fd_ < 0) return 0;
    timeout_ms = 0;  // the client's first message may already be there
  }
  pollfd pf{conn_fd_, POLLIN, 0};
  const int r = ::poll(&pf, 1, timeout_ms);
  if (r <= 0) return (r < 0 && errno != EINTR) ? -errno : 0;
  return read_messages();
}

int Server::read_messages() {
  int handled = 0;
  std::vector<uint8_t> cbuf(CMSG_SPACE(sizeof(int) * opt_.max_msg_fds));
  while (handled < opt_.max_messages_per_poll && conn_fd_ >= 0) {
    // Read no further than the end of the current message, so that the fds received belong
    // to it (the kernel delivers a message's fds with its bytes).
    const std::size_t target = rx_need_ != 0 ? rx_need_ : kHdr;
    const std::size_t old = rx_.size();
    rx_.resize(target);
    iovec iov{rx_.data() + old, target - old};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.data();
    m.msg_controllen = cbuf.size();
    const ssize_t r = ::recvmsg(conn_fd_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r > 0 || (r == 0 && m.msg_controllen > 0)) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          rx_fds_.push_back(fd);
        }
      }
      if (m.msg_flags & MSG_CTRUNC) rx_truncated_ = true;  // more fds than allowed
    }
    if (r < 0) {
      rx_.resize(old);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close_client();
      break;
    }
    if (r == 0) {  // the client went away (or shut down its side mid-message)
      rx_.resize(old);
      if (!rx_.empty()) {
        vu::Header h{};
        std::memcpy(&h, rx_.data(), std::min(rx_.size(), kHdr));
        send_error_and_close(h.msg_id, h.command, EINVAL);
      } else {
        close_client();
      }
      break;
    }
    rx_.resize(old + static_cast<std::size_t>(r));
    if (rx_need_ == 0) {
      if (rx_.size() < kHdr) continue;
      const auto h = load<vu::Header>(rx_.data());
      if (h.msg_size > max_message_size()) {
        // Cannot skip what may never come: answer and drop the connection.
        ++stats_.messages;
        ++stats_.errors;
        send_error_and_close(h.msg_id, h.command, EMSGSIZE);
        break;
      }
      // A size below the header's is answered (EINVAL) as a 16-byte message.
      rx_need_ = std::max<std::size_t>(h.msg_size, kHdr);
    }
    if (rx_.size() < rx_need_) continue;

    Fds fds(rx_fds_.data(), rx_fds_.size());
    rx_fds_.clear();
    std::vector<uint8_t> reply;
    std::vector<int> reply_fds;
    if (rx_truncated_) {
      // Some fds were dropped by the kernel: answer as "too many fds".
      rx_truncated_ = false;
      const auto h = load<vu::Header>(rx_.data());
      vu::Header e{h.msg_id, h.command, kHdr, vu::flags::kTypeReply | vu::flags::kError,
                   static_cast<uint32_t>(EINVAL)};
      ++stats_.messages;
      ++stats_.errors;
      if ((h.flags & vu::flags::kNoReply) == 0) append(reply, e);
    } else {
      process(rx_.data(), rx_.size(), fds, reply, reply_fds);
    }
    rx_.clear();
    rx_need_ = 0;
    ++handled;
    if (!reply.empty() && !send_message(reply, reply_fds)) {
      close_client();
      break;
    }
    close_all(reply_fds);
  }
  return handled;
}

bool Server::send_message(const std::vector<uint8_t>& msg, std::vector<int>& fds) {
  std::size_t sent = 0;
  std::vector<uint8_t> cbuf;
  while (sent < msg.size()) {
    iovec iov{const_cast<uint8_t*>(msg.data()) + sent, msg.size() - sent};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (sent == 0 && !fds.empty()) {
      cbuf.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      m.msg_control = cbuf.data();
      m.msg_controllen = cbuf.size();
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t r = ::sendmsg(conn_fd_, &m, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      close_all(fds);
      return false;
    }
    sent += static_cast<std::size_t>(r);
  }
  close_all(fds);
  return true;
}

void Server::send_error_and_close(uint16_t msg_id, uint16_t command, int err) {
  vu::Header e{msg_id, command, kHdr, vu::flags::kTypeReply | vu::flags::kError,
               static_cast<uint32_t>(err)};
  std::vector<uint8_t> msg;
  append(msg, e);
  std::vector<int> none;
  (void)send_message(msg, none);
  close_client();
}

}  // namespace pollux::emu::vfio_user
