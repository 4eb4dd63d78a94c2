#include "driver/env/vfio_user_client.h"
#include "spec/wire.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <set>
#include <sstream>

#include "common/text.h"
#include "nlohmann/json.hpp"

namespace pollux::env {

namespace vu = spec::vfio_user;

namespace {

constexpr std::size_t kHdr = sizeof(vu::Header);
constexpr uint32_t kMaxFdsCap = 253;
constexpr uint32_t kMaxArgsz = 64 * 1024;  // largest region-info reply we accept

using spec::wire::append;
using spec::wire::load;

void close_all(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

bool ok(const Error& e) { return e.code == 0; }
Error no_error() { return Error{0, {}}; }

// Bounds blocking connect, send and receive on `fd` (0: no bound).
bool set_timeout(int fd, uint32_t ms) {
  const timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  return ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
         ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0;
}

std::string no_answer(const std::string& path, uint32_t ms) {
  return "no answer from the vfio-user server at " + path + " within " + std::to_string(ms) +
         " ms (a server serves one client at a time: is another one attached?)";
}

}  // namespace

Result<std::string> parse_vfio_user_address(const std::string& address) {
  static const std::string kPrefix = "vfio-user:";
  if (address.rfind(kPrefix, 0) == 0) {
    std::string path = address.substr(kPrefix.size());
    if (path.empty()) return make_error(EINVAL, "empty vfio-user socket path");
    return path;
  }
  // SPDK-style transport id: "trtype:vfio-user traddr:/path.sock" (any order, spaces).
  std::istringstream in(address);
  std::string tok, trtype, traddr;
  std::set<std::string> seen;
  while (in >> tok) {
    const auto colon = tok.find(':');
    if (colon == std::string::npos) continue;
    std::string key = tok.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    if (!seen.insert(key).second) {
      return make_error(EINVAL, "vfio-user address '" + address + "': " + key + " given twice");
    }
    if (key == "trtype") trtype = tok.substr(colon + 1);
    if (key == "traddr") traddr = tok.substr(colon + 1);
  }
  std::transform(trtype.begin(), trtype.end(), trtype.begin(), ::tolower);
  if (trtype != "vfio-user" && trtype != "vfiouser") {
    return make_error(EINVAL, "not a vfio-user address: '" + address + "'");
  }
  if (traddr.empty()) return make_error(EINVAL, "vfio-user address without traddr");
  return traddr;
}

VfioUserDevice::VfioUserDevice(MemoryRegistry& registry, VfioUserOptions options)
    : registry_(registry), opt_(options) {
  opt_.max_msg_fds = std::clamp<uint32_t>(opt_.max_msg_fds, 1, kMaxFdsCap);
  if (opt_.max_data_xfer_size == 0) opt_.max_data_xfer_size = vu::kDefaultMaxDataXferSize;
}

Result<std::unique_ptr<VfioUserDevice>> VfioUserDevice::connect(const std::string& address,
                                                                MemoryRegistry& registry,
                                                                VfioUserOptions options) {
  auto path = parse_vfio_user_address(address);
  if (!path) return path.error();
  sockaddr_un addr{};
  if (path->size() >= sizeof(addr.sun_path)) {
    return make_error(ENAMETOOLONG, "vfio-user socket path too long: " + *path);
  }
  std::unique_ptr<VfioUserDevice> dev(new (std::nothrow) VfioUserDevice(registry, options));
  if (!dev) return make_error(ENOMEM, "out of memory");
  dev->address_ = "vfio-user:" + *path;
  dev->sock_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (dev->sock_ < 0) return make_error(errno, std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path->c_str(), path->size());
  const uint32_t ms = options.handshake_timeout_ms;
  if (!set_timeout(dev->sock_, ms)) {
    return make_error(errno, std::string("setsockopt: ") + std::strerror(errno));
  }
  if (::connect(dev->sock_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err == EAGAIN) return make_error(ETIMEDOUT, no_answer(*path, ms));  // backlog full
    return make_error(err, "cannot connect to " + *path + ": " + std::strerror(err));
  }
  if (Error e = dev->init(); !ok(e)) {
    if (e.code == -ETIMEDOUT) e.message = no_answer(*path, ms) + ": " + e.message;
    return e;
  }
  // Attached: from now on a message waits as long as the server takes (it may be busy).
  if (!set_timeout(dev->sock_, 0)) {
    return make_error(errno, std::string("setsockopt: ") + std::strerror(errno));
  }
  return dev;
}

Result<std::unique_ptr<VfioUserDevice>> VfioUserDevice::attach(vu::MessageEndpoint* endpoint,
                                                               MemoryRegistry& registry,
                                                               VfioUserOptions options) {
  if (endpoint == nullptr) return make_error(EINVAL, "no vfio-user endpoint");
  std::unique_ptr<VfioUserDevice> dev(new (std::nothrow) VfioUserDevice(registry, options));
  if (!dev) return make_error(ENOMEM, "out of memory");
  dev->endpoint_ = endpoint;
  dev->address_ = "vfio-user:in-process";
  if (Error e = dev->init(); !ok(e)) return e;
  return dev;
}

Result<std::unique_ptr<VfioUserDevice>> VfioUserDevice::attach(
    std::unique_ptr<vu::MessageEndpoint> connection, MemoryRegistry& registry,
    VfioUserOptions options) {
  if (connection == nullptr) return make_error(EBUSY, "the device already has a client");
  vu::MessageEndpoint* endpoint = connection.get();
  auto dev = attach(endpoint, registry, options);
  if (dev) dev.value()->connection_ = std::move(connection);
  return dev;
}

VfioUserDevice::~VfioUserDevice() {
  if (listening_) registry_.remove_listener(this);  // no callbacks after this returns
  std::vector<std::pair<uint64_t, uint64_t>> maps;
  {
    std::lock_guard lock(maps_mu_);
    maps.swap(dma_maps_);
  }
  for (const auto& [iova, size] : maps) {
    if (removed()) break;
    vu::DmaUnmap u{sizeof(vu::DmaUnmap), 0, iova, size};
    (void)transact(vu::cmd::kDmaUnmap, &u, sizeof u, nullptr, 0, nullptr, nullptr);
  }
  for (const Mapped& m : mapped_) ::munmap(m.ptr, m.map_len);
  if (sock_ >= 0) ::close(sock_);
  connection_.reset();  // hangs up (explicitly last: the unmaps above still used it)
}

// ------------------------------------------------------------------------- set-up ---

Error VfioUserDevice::init() {
  if (Error e = negotiate_version(); !ok(e)) return e;

  vu::DeviceInfo req{sizeof(vu::DeviceInfo), 0, 0, 0};
  std::vector<uint8_t> reply;
  if (int rc = transact(vu::cmd::kDeviceGetInfo, &req, sizeof req, nullptr, 0, &reply, nullptr);
      rc < 0) {
    return make_error(rc, "DEVICE_GET_INFO failed");
  }
  if (reply.size() < sizeof(vu::DeviceInfo)) return make_error(EPROTO, "short DEVICE_GET_INFO");
  info_ = load<vu::DeviceInfo>(reply.data());
  if ((info_.flags & vu::kDeviceFlagPci) == 0) return make_error(ENODEV, "not a PCI device");
  if (info_.num_regions <= vu::region::kConfig) {
    return make_error(EPROTO, "device has no config region");
  }
  const uint32_t n = std::min(info_.num_regions, vu::region::kNumPciRegions);
  regions_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (Error e = read_region_info(i); !ok(e)) return e;
  }

  // DMA_MAPs every region already registered.
  if (std::string e = registry_.add_listener(this); !e.empty()) {
    return make_error(last_dma_error() != 0 ? last_dma_error() : -EIO, e);
  }
  listening_ = true;
  return no_error();
}

Error VfioUserDevice::negotiate_version() {
  nlohmann::json caps = nlohmann::json::object();
  caps[vu::kCapMaxMsgFds] = opt_.max_msg_fds;
  caps[vu::kCapMaxDataXferSize] = opt_.max_data_xfer_size;
  caps[vu::kCapPgsizes] = vu::kDefaultPgsizes;
  nlohmann::json doc = nlohmann::json::object();
  doc[vu::kCapabilities] = caps;
  const std::string text = json_text(doc);

  // Version, then the NUL-terminated JSON.
  std::vector<uint8_t> req(sizeof(vu::Version) + text.size() + 1, 0);
  const vu::Version ours{vu::kMajor, vu::kMinor};
  std::memcpy(req.data(), &ours, sizeof ours);
  std::memcpy(req.data() + sizeof ours, text.data(), text.size());
  std::vector<uint8_t> reply;
  if (int rc = transact(vu::cmd::kVersion, req.data(), req.size(), nullptr, 0, &reply, nullptr);
      rc < 0) {
    return make_error(rc, rc == -ETIMEDOUT ? "no VERSION reply" : "VERSION refused by the server");
  }
  if (reply.size() < sizeof(vu::Version)) return make_error(EPROTO, "short VERSION reply");
  const auto v = load<vu::Version>(reply.data());
  if (v.major != vu::kMajor || v.minor > vu::kMinor) {
    return make_error(EPROTO, "server answered version " + std::to_string(v.major) + "." +
                                  std::to_string(v.minor));
  }
  caps_.major = v.major;
  caps_.minor = v.minor;
  if (reply.size() > sizeof(vu::Version)) {
    const char* json = reinterpret_cast<const char*>(reply.data() + sizeof(vu::Version));
    const std::size_t jlen = reply.size() - sizeof(vu::Version);
    const void* nul = std::memchr(json, '\0', jlen);
    const std::size_t slen =
        nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - json) : jlen;
    if (slen > 0) {
      const auto j = nlohmann::json::parse(json, json + slen, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return make_error(EPROTO, "bad VERSION JSON");
      if (auto c = j.find(vu::kCapabilities); c != j.end() && c->is_object()) {
        auto num = [&](const char* key, uint64_t dflt) -> uint64_t {
          auto it = c->find(key);
          return (it != c->end() && it->is_number_unsigned()) ? it->get<uint64_t>() : dflt;
        };
        caps_.max_msg_fds = static_cast<uint32_t>(
            std::min<uint64_t>(num(vu::kCapMaxMsgFds, vu::kDefaultMaxMsgFds), kMaxFdsCap));
        caps_.max_data_xfer_size = static_cast<uint32_t>(std::min<uint64_t>(
            num(vu::kCapMaxDataXferSize, vu::kDefaultMaxDataXferSize), UINT32_MAX));
        caps_.max_dma_maps = static_cast<uint32_t>(
            std::min<uint64_t>(num(vu::kCapMaxDmaMaps, vu::kDefaultMaxDmaMaps), UINT32_MAX));
        caps_.pgsizes = num(vu::kCapPgsizes, vu::kDefaultPgsizes);
      }
    }
  }
  if (caps_.max_data_xfer_size == 0) caps_.max_data_xfer_size = vu::kDefaultMaxDataXferSize;
  return no_error();
}

Error VfioUserDevice::read_region_info(uint32_t index) {
  uint32_t argsz = sizeof(vu::RegionInfo);
  std::vector<uint8_t> reply;
  std::vector<int> fds;
  for (int attempt = 0;; ++attempt) {
    vu::RegionInfo req{};
    req.argsz = argsz;
    req.index = index;
    close_all(fds);
    if (int rc = transact(vu::cmd::kDeviceGetRegionInfo, &req, sizeof req, nullptr, 0, &reply,
                          &fds);
        rc < 0) {
      return make_error(rc, "DEVICE_GET_REGION_INFO " + std::to_string(index) + " failed");
    }
    if (reply.size() < sizeof(vu::RegionInfo)) {
      close_all(fds);
      return make_error(EPROTO, "short region info");
    }
    const auto info = load<vu::RegionInfo>(reply.data());
    if (info.argsz <= argsz || attempt == 1) break;
    if (info.argsz > kMaxArgsz) {
      close_all(fds);
      return make_error(EPROTO, "region info too large");
    }
    argsz = info.argsz;  // the capabilities did not fit: ask again with the size needed
  }
  const auto info = load<vu::RegionInfo>(reply.data());
  VfioUserRegion& r = regions_[index];
  r.flags = info.flags;
  r.size = info.size;
  r.offset = info.offset;

  // Capability chain (offsets from the start of RegionInfo, i.e. of the payload).
  bool has_sparse_cap = false;
  if ((info.flags & vu::kRegionFlagCaps) && info.cap_offset != 0) {
    uint32_t off = info.cap_offset;
    for (int guard = 0; off != 0 && guard < 16; ++guard) {
      if (off < sizeof(vu::RegionInfo) || off > reply.size() ||
          reply.size() - off < sizeof(vu::CapHeader)) {
        close_all(fds);
        return make_error(EPROTO, "bad region capability offset");
      }
      const auto hdr = load<vu::CapHeader>(reply.data() + off);
      if (hdr.id == vu::kCapSparseMmap) {
        if (reply.size() - off < sizeof(vu::SparseMmapCap)) {
          close_all(fds);
          return make_error(EPROTO, "short sparse-mmap capability");
        }
        const auto cap = load<vu::SparseMmapCap>(reply.data() + off);
        const std::size_t room = (reply.size() - off - sizeof cap) / sizeof(vu::SparseMmapArea);
        if (cap.nr_areas > room) {
          close_all(fds);
          return make_error(EPROTO, "sparse-mmap capability overruns the reply");
        }
        has_sparse_cap = true;
        r.sparse.clear();
        for (uint32_t i = 0; i < cap.nr_areas; ++i) {
          r.sparse.push_back(load<vu::SparseMmapArea>(reply.data() + off + sizeof cap +
                                                      i * sizeof(vu::SparseMmapArea)));
        }
      }
      off = hdr.next;
    }
  }

  // Map what may be mapped of BARs 0-5.
  const int fd = fds.empty() ? -1 : fds.front();
  if (index <= vu::region::kBar5 && (info.flags & vu::kRegionFlagMmap) && fd >= 0 &&
      r.size != 0) {
    std::vector<vu::SparseMmapArea> areas = r.sparse;
    if (!has_sparse_cap) areas.push_back({0, r.size});  // the whole region is mappable
    const int prot = ((info.flags & vu::kRegionFlagRead) ? PROT_READ : 0) |
                     ((info.flags & vu::kRegionFlagWrite) ? PROT_WRITE : 0);
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    for (const auto& a : areas) {
      if (a.size == 0 || a.offset > r.size || a.size > r.size - a.offset) continue;
      const uint64_t file_off = r.offset + a.offset;
      if (file_off % page != 0 || a.size > SIZE_MAX) continue;  // reach it by messages
      void* p = ::mmap(nullptr, a.size, prot, MAP_SHARED, fd, static_cast<off_t>(file_off));
      if (p == MAP_FAILED) continue;  // messages still work
      mapped_.push_back(Mapped{static_cast<int>(index), a.offset, a.size,
                               static_cast<uint8_t*>(p), static_cast<std::size_t>(a.size)});
    }
  }
  close_all(fds);  // mappings keep the file alive
  return no_error();
}

// ---------------------------------------------------------------------- messaging ---


bool VfioUserDevice::probe_removed() {
  if (removed()) return true;
  if (endpoint_ != nullptr && endpoint_->hung_up()) {
    mark_removed();
    return true;
  }
  if (sock_ < 0) return false;
  pollfd pf{sock_, POLLRDHUP, 0};
  if (::poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
    mark_removed();
    return true;
  }
  return false;
}

int VfioUserDevice::transact(uint16_t command, const void* payload, std::size_t plen,
                             const int* fds, std::size_t nfds, std::vector<uint8_t>* reply,
                             std::vector<int>* reply_fds) {
  if (reply) reply->clear();
  if (reply_fds) reply_fds->clear();
  if (nfds > caps_.max_msg_fds && command != vu::cmd::kVersion) return -EINVAL;
  std::vector<uint8_t> msg;
  std::vector<uint8_t> rmsg;
  std::vector<int> rfds;
  int rc = 0;
  try {
    std::lock_guard lock(io_mu_);
    if (removed()) return -ENODEV;
    const uint16_t id = next_msg_id_++;
    vu::Header h{id, command, static_cast<uint32_t>(kHdr + plen), vu::flags::kTypeCommand, 0};
    msg.reserve(kHdr + plen);
    append(msg, h);
    if (plen != 0) {
      const auto* p = static_cast<const uint8_t*>(payload);
      msg.insert(msg.end(), p, p + plen);
    }
    if (endpoint_ != nullptr) {
      // In-process: the endpoint owns the fds it is given, as if they had crossed a socket.
      std::vector<int> dups;
      for (std::size_t i = 0; i < nfds; ++i) {
        const int d = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (d < 0) {
          rc = -errno;
          close_all(dups);
          return rc;
        }
        dups.push_back(d);
      }
      endpoint_->handle(msg.data(), msg.size(), dups.data(), dups.size(), rmsg, rfds);
      if (rmsg.size() < kHdr || load<vu::Header>(rmsg.data()).msg_size != rmsg.size() ||
          load<vu::Header>(rmsg.data()).msg_id != id) {
        rc = -EPROTO;
      }
    } else {
      rc = transact_socket(msg, fds, nfds, id, rmsg, rfds);
    }
  } catch (const std::bad_alloc&) {
    rc = -ENOMEM;
  } catch (...) {
    rc = -EIO;
  }
  if (rc == 0) {
    const auto h = load<vu::Header>(rmsg.data());
    if (h.flags & vu::flags::kError) {
      rc = h.error != 0 ? -static_cast<int>(h.error) : -EIO;
      if (rc == -ENODEV) mark_removed();  // the server reports the function is gone
    } else if (reply) {
      reply->assign(rmsg.begin() + kHdr, rmsg.end());
    }
  }
  if (rc == 0 && reply_fds) {
    reply_fds->swap(rfds);
  } else {
    close_all(rfds);
  }
  return rc;
}

int VfioUserDevice::transact_socket(const std::vector<uint8_t>& msg, const int* fds,
                                    std::size_t nfds, uint16_t msg_id,
                                    std::vector<uint8_t>& reply, std::vector<int>& rfds) {
  // A timeout (set-up only) leaves the stream out of step: the connection is done for, but
  // the caller learns it was a timeout.
  auto gone = [this](int rc) {
    mark_removed();
    return rc == -ETIMEDOUT ? rc : -ENODEV;
  };
  if (int rc = send_all(msg.data(), msg.size(), fds, nfds); rc < 0) return gone(rc);
  const std::size_t limit = kHdr + sizeof(vu::RegionAccess) + opt_.max_data_xfer_size + 65536;
  for (;;) {
    reply.assign(kHdr, 0);
    close_all(rfds);
    if (int rc = recv_exact(reply.data(), kHdr, rfds); rc < 0) return gone(rc);
    const auto h = load<vu::Header>(reply.data());
    if (h.msg_size < kHdr || h.msg_size > limit) {
      mark_removed();  // cannot find the next message boundary
      ::shutdown(sock_, SHUT_RDWR);
      return -EPROTO;
    }
    reply.resize(h.msg_size);
    if (h.msg_size > kHdr) {
      if (int rc = recv_exact(reply.data() + kHdr, h.msg_size - kHdr, rfds); rc < 0) {
        return gone(rc);
      }
    }
    if ((h.flags & vu::flags::kTypeMask) == vu::flags::kTypeCommand) {
      // A server -> client command (DMA_READ/WRITE): our memory is fd-backed, none expected.
      close_all(rfds);
      if ((h.flags & vu::flags::kNoReply) == 0) {
        vu::Header e{h.msg_id, h.command, kHdr, vu::flags::kTypeReply | vu::flags::kError,
                     static_cast<uint32_t>(ENOTSUP)};
        if (int rc = send_all(reinterpret_cast<const uint8_t*>(&e), sizeof e, nullptr, 0);
            rc < 0) {
          return gone(rc);
        }
      }
      continue;
    }
    if (h.msg_id != msg_id) {
      mark_removed();  // replies come in order: the stream is out of step
      ::shutdown(sock_, SHUT_RDWR);
      return -EPROTO;
    }
    return 0;
  }
}

int VfioUserDevice::send_all(const uint8_t* data, std::size_t len, const int* fds,
                             std::size_t nfds) {
  std::size_t sent = 0;
  std::vector<uint8_t> cbuf;
  while (sent < len) {
    iovec iov{const_cast<uint8_t*>(data) + sent, len - sent};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (sent == 0 && nfds != 0) {
      cbuf.assign(CMSG_SPACE(sizeof(int) * nfds), 0);
      m.msg_control = cbuf.data();
      m.msg_controllen = cbuf.size();
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    const ssize_t r = ::sendmsg(sock_, &m, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? -ETIMEDOUT : -errno;  // SO_SNDTIMEO ran out
    }
    sent += static_cast<std::size_t>(r);
  }
  return 0;
}

int VfioUserDevice::recv_exact(uint8_t* data, std::size_t len, std::vector<int>& fds) {
  std::vector<uint8_t> cbuf(CMSG_SPACE(sizeof(int) * opt_.max_msg_fds));
  std::size_t got = 0;
  while (got < len) {
    iovec iov{data + got, len - got};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.data();
    m.msg_controllen = cbuf.size();
    const ssize_t r = ::recvmsg(sock_, &m, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.push_back(fd);
        }
      }
    }
    if (r < 0 && errno == EAGAIN) return -ETIMEDOUT;  // SO_RCVTIMEO ran out
    if (r <= 0) return r == 0 ? -ECONNRESET : -errno;
    got += static_cast<std::size_t>(r);
  }
  return 0;
}

// ----------------------------------------------------------------------- PciDevice ---

int VfioUserDevice::region_rw(uint32_t index, uint64_t offset, void* buf, std::size_t len,
                              bool write) {
  if (index >= regions_.size()) return -EINVAL;
  const VfioUserRegion& r = regions_[index];
  if (len == 0) return 0;
  if (offset > r.size || len > r.size - offset) return -EINVAL;
  auto* p = static_cast<uint8_t*>(buf);
  const std::size_t chunk_max = std::min(caps_.max_data_xfer_size, opt_.max_data_xfer_size);
  std::vector<uint8_t> msg, reply;
  while (len != 0) {
    const std::size_t chunk = std::min(len, chunk_max);
    vu::RegionAccess a{offset, index, static_cast<uint32_t>(chunk)};
    int rc;
    try {
      msg.clear();
      append(msg, a);
      if (write) msg.insert(msg.end(), p, p + chunk);
    } catch (...) {
      return -ENOMEM;
    }
    rc = transact(write ? vu::cmd::kRegionWrite : vu::cmd::kRegionRead, msg.data(), msg.size(),
                  nullptr, 0, &reply, nullptr);
    if (rc < 0) return rc;
    if (!write) {
      if (reply.size() != sizeof a + chunk) return -EPROTO;
      std::memcpy(p, reply.data() + sizeof a, chunk);
    }
    offset += chunk;
    p += chunk;
    len -= chunk;
  }
  return 0;
}

int VfioUserDevice::config_read(uint32_t offset, void* buf, std::size_t len) {
  const int rc = region_rw(vu::region::kConfig, offset, buf, len, false);
  if (rc < 0) std::memset(buf, 0xff, len);
  return rc;
}

int VfioUserDevice::config_write(uint32_t offset, const void* buf, std::size_t len) {
  return region_rw(vu::region::kConfig, offset, const_cast<void*>(buf), len, true);
}

const VfioUserDevice::Mapped* VfioUserDevice::find_mapping(int bar, uint64_t offset,
                                                           std::size_t len) const {
  for (const Mapped& m : mapped_) {
    if (m.bar == bar && offset >= m.offset && offset - m.offset <= m.len &&
        len <= m.len - (offset - m.offset)) {
      return &m;
    }
  }
  return nullptr;
}

int VfioUserDevice::bar_read(int bar, uint64_t offset, void* buf, std::size_t len) {
  if (removed()) {
    std::memset(buf, 0xff, len);
    return -ENODEV;
  }
  if (bar < 0 || bar > static_cast<int>(vu::region::kBar5)) return -EINVAL;
  if (const Mapped* m = find_mapping(bar, offset, len)) {
    volatile uint8_t* src = m->ptr + (offset - m->offset);
    const auto a = reinterpret_cast<uintptr_t>(src);
    if (len == 4 && a % 4 == 0) {
      const uint32_t v = *reinterpret_cast<volatile uint32_t*>(src);
      std::memcpy(buf, &v, 4);
    } else if (len == 8 && a % 8 == 0) {
      const uint64_t v = *reinterpret_cast<volatile uint64_t*>(src);
      std::memcpy(buf, &v, 8);
    } else {
      for (std::size_t i = 0; i < len; ++i) static_cast<uint8_t*>(buf)[i] = src[i];
    }
    return 0;
  }
  const int rc = region_rw(static_cast<uint32_t>(bar), offset, buf, len, false);
  if (rc < 0) std::memset(buf, 0xff, len);
  return rc;
}

int VfioUserDevice::bar_write(int bar, uint64_t offset, const void* buf, std::size_t len) {
  if (removed()) return -ENODEV;
  if (bar < 0 || bar > static_cast<int>(vu::region::kBar5)) return -EINVAL;
  if (const Mapped* m = find_mapping(bar, offset, len)) {
    volatile uint8_t* dst = m->ptr + (offset - m->offset);
    const auto a = reinterpret_cast<uintptr_t>(dst);
    if (len == 4 && a % 4 == 0) {
      uint32_t v;
      std::memcpy(&v, buf, 4);
      *reinterpret_cast<volatile uint32_t*>(dst) = v;
    } else if (len == 8 && a % 8 == 0) {
      uint64_t v;
      std::memcpy(&v, buf, 8);
      *reinterpret_cast<volatile uint64_t*>(dst) = v;
    } else {
      for (std::size_t i = 0; i < len; ++i) dst[i] = static_cast<const uint8_t*>(buf)[i];
    }
    return 0;
  }
  return region_rw(static_cast<uint32_t>(bar), offset, const_cast<void*>(buf), len, true);
}

volatile void* VfioUserDevice::bar_map(int bar, uint64_t offset, std::size_t len) {
  const Mapped* m = find_mapping(bar, offset, len);
  return m ? m->ptr + (offset - m->offset) : nullptr;
}

int VfioUserDevice::reset() {
  if ((info_.flags & vu::kDeviceFlagReset) == 0) return -ENOTSUP;
  return transact(vu::cmd::kDeviceReset, nullptr, 0, nullptr, 0, nullptr, nullptr);
}

// ---------------------------------------------------------------------- interrupts ---

Result<vu::IrqInfo> VfioUserDevice::irq_info(uint32_t index) {
  vu::IrqInfo req{sizeof(vu::IrqInfo), 0, index, 0};
  std::vector<uint8_t> reply;
  if (int rc = transact(vu::cmd::kDeviceGetIrqInfo, &req, sizeof req, nullptr, 0, &reply, nullptr);
      rc < 0) {
    return make_error(rc, "DEVICE_GET_IRQ_INFO failed");
  }
  if (reply.size() < sizeof(vu::IrqInfo)) return make_error(EPROTO, "short irq info");
  return load<vu::IrqInfo>(reply.data());
}

int VfioUserDevice::set_irq_eventfds(uint32_t index, uint32_t start, const int* eventfds,
                                     std::size_t n) {
  if (n == 0 || n > UINT32_MAX) return -EINVAL;
  vu::IrqSet s{sizeof(vu::IrqSet), vu::kIrqSetDataEventfd | vu::kIrqSetActionTrigger, index,
               start, static_cast<uint32_t>(n)};
  return transact(vu::cmd::kDeviceSetIrqs, &s, sizeof s, eventfds, eventfds ? n : 0, nullptr,
                  nullptr);
}

int VfioUserDevice::disable_irqs(uint32_t index) {
  vu::IrqSet s{sizeof(vu::IrqSet), vu::kIrqSetDataNone | vu::kIrqSetActionTrigger, index, 0, 0};
  return transact(vu::cmd::kDeviceSetIrqs, &s, sizeof s, nullptr, 0, nullptr, nullptr);
}

// ----------------------------------------------------------------------------- DMA ---

std::size_t VfioUserDevice::dma_map_count() const {
  std::lock_guard lock(maps_mu_);
  return dma_maps_.size();
}

std::string VfioUserDevice::on_region_added(const MemoryRegion& region) {
  int rc;
  if (region.fd < 0) {
    rc = -ENOTSUP;  // the server could only reach it through DMA_READ/WRITE messages
  } else {
    vu::DmaMap m{sizeof(vu::DmaMap), vu::kDmaRead | vu::kDmaWrite, region.fd_offset, region.iova,
                 region.length};
    std::lock_guard lock(maps_mu_);
    rc = transact(vu::cmd::kDmaMap, &m, sizeof m, &region.fd, 1, nullptr, nullptr);
    if (rc == 0) {
      try {
        dma_maps_.emplace_back(region.iova, region.length);
      } catch (...) {
        rc = -ENOMEM;
      }
    }
  }
  // A device that is gone will never DMA: nothing to map, and no reason to refuse memory.
  if (rc == 0 || removed()) return "";
  dma_map_failures_.fetch_add(1, std::memory_order_relaxed);
  last_dma_error_.store(rc, std::memory_order_relaxed);
  char text[160];
  std::snprintf(text, sizeof text, "vfio-user DMA_MAP of %#llx+%#zx: %s",
                static_cast<unsigned long long>(region.iova), region.length,
                region.fd < 0 ? "the region has no file descriptor to share" : std::strerror(-rc));
  return text;
}

void VfioUserDevice::on_region_removed(const MemoryRegion& region) {
  std::lock_guard lock(maps_mu_);
  auto it = std::find(dma_maps_.begin(), dma_maps_.end(),
                      std::make_pair(region.iova, static_cast<uint64_t>(region.length)));
  if (it == dma_maps_.end()) return;
  dma_maps_.erase(it);
  vu::DmaUnmap u{sizeof(vu::DmaUnmap), 0, region.iova, region.length};
  // The server drops its mapping before it answers; a gone server has no mapping left.
  (void)transact(vu::cmd::kDmaUnmap, &u, sizeof u, nullptr, 0, nullptr, nullptr);
}

}  // namespace pollux::env
