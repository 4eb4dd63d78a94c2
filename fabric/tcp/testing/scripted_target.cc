#include "fabric/tcp/testing/scripted_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <stdexcept>

namespace pollux::fabric::tcp::testing {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ nt::kCrc32cPolynomialReflected : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

constexpr uint32_t kMaxPlen = 16u << 20;  // more than any test moves in one PDU

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%#x", v);
  return b;
}

bool recv_exact(int fd, void* p, std::size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, 0);
    if (r > 0) {
      b += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}

// Data direction of a command: opcode bits [1:0], or for a fabrics command its FCTYPE's.
bool host_to_controller(const Command& cmd) {
  return cmd.fabrics() ? (cmd.fctype() & 1) : (cmd.sqe.opcode & 1);
}


template <class T>
std::vector<uint8_t> bytes_of(const T& t) {
  std::vector<uint8_t> v(sizeof t);
  std::memcpy(v.data(), &t, sizeof t);
  return v;
}

}  // namespace

uint32_t crc32c(const void* p, std::size_t n) {
  uint32_t c = ~0u;
  const auto* b = static_cast<const uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ b[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

// --------------------------------------------------------------------------- Log ---

std::vector<const Pdu*> Log::of_type(uint8_t type, int conn) const {
  std::vector<const Pdu*> v;
  for (const Pdu& p : received) {
    if (p.ch.type == type && (conn < 0 || p.conn == conn)) v.push_back(&p);
  }
  return v;
}

std::vector<sn::SubmissionEntry> Log::commands(int conn) const {
  std::vector<sn::SubmissionEntry> v;
  for (const Pdu* p : of_type(nt::pdu::kCapsuleCmd, conn)) v.push_back(p->sqe());
  return v;
}

int Log::conn_of_qid(int qid) const {
  for (int i = static_cast<int>(conns.size()); i-- > 0;) {
    if (conns[i].qid == qid) return i;
  }
  return -1;
}

// -------------------------------------------------------------------------- Conn ---

bool Conn::send_all(const void* p, std::size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::send(fd_, b, n, MSG_NOSIGNAL);
    if (r > 0) {
      b += r;
      n -= static_cast<std::size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      return false;  // the host went away: what it missed does not matter any more
    }
  }
  return true;
}

void Conn::send_raw(std::span<const uint8_t> bytes) {
  nt::CommonHeader ch{};
  std::memcpy(&ch, bytes.data(), std::min(bytes.size(), sizeof ch));
  target_.record_sent(*this, ch, bytes.data(),
                      static_cast<uint32_t>(std::min<std::size_t>(bytes.size(), nt::kMaxHlen)));
  send_all(bytes.data(), bytes.size());
}

// Header (with `ch` as its first 8 bytes), header digest, padding to PDO, data, data digest.
void Conn::send_pdu(nt::CommonHeader& ch, const void* header, uint32_t hlen, uint32_t pdo,
                    std::span<const uint8_t> data, bool bad_hdgst, bool bad_ddgst,
                    uint32_t datal_claimed) {
  const bool hd = hdgst(), dd = ddgst() && !data.empty();
  if (hd) ch.flags |= nt::flags::kHdgst;
  if (dd) ch.flags |= nt::flags::kDdgst;
  ch.hlen = static_cast<uint8_t>(hlen);
  ch.pdo = data.empty() ? 0 : static_cast<uint8_t>(pdo);
  ch.plen = data.empty() ? hlen + (hd ? nt::kDigestSize : 0)
                         : pdo + datal_claimed + (dd ? nt::kDigestSize : 0);
  std::vector<uint8_t> b(static_cast<const uint8_t*>(header),
                         static_cast<const uint8_t*>(header) + hlen);
  std::memcpy(b.data(), &ch, sizeof ch);
  if (hd) {
    const uint32_t h = crc32c(b.data(), hlen) ^ (bad_hdgst ? 1u : 0u);
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(&h),
             reinterpret_cast<const uint8_t*>(&h) + 4);
  }
  if (!data.empty()) {
    b.resize(pdo, 0);
    b.insert(b.end(), data.begin(), data.end());
    if (dd) {
      const uint32_t d = crc32c(data.data(), data.size()) ^ (bad_ddgst ? 1u : 0u);
      b.insert(b.end(), reinterpret_cast<const uint8_t*>(&d),
               reinterpret_cast<const uint8_t*>(&d) + 4);
    }
  }
  target_.record_sent(*this, ch, b.data(), hlen);
  send_all(b.data(), b.size());
}

void Conn::send_resp(uint16_t cid, uint16_t status, uint32_t dw0, uint32_t dw1) {
  nt::CapsuleResp r{};
  r.ch.type = nt::pdu::kCapsuleResp;
  r.cqe.dw0 = dw0;
  r.cqe.dw1 = dw1;
  r.cqe.sqhd = nf::connect::kSqhdFlowControlDisabled;
  r.cqe.sqid = static_cast<uint16_t>(std::max(qid_, 0));
  r.cqe.cid = cid;
  r.cqe.status = status;
  outstanding_.erase(cid);
  scripted_.erase(cid);
  send_pdu(r.ch, &r, nt::kCapsuleRespHlen, 0, {}, false, false, 0);
}

void Conn::send_c2h(const C2h& c) {
  nt::C2hData h{};
  h.ch.type = nt::pdu::kC2hData;
  h.ch.flags = c.flags;
  h.cccid = c.cccid;
  h.datao = c.datao;
  h.datal = c.datal ? c.datal : static_cast<uint32_t>(c.data.size());
  const uint32_t pdo = c.pdo ? c.pdo : nt::data_offset(nt::kDataHlen, hdgst(), hpda_);
  if (c.flags & nt::flags::kSuccess) {
    outstanding_.erase(c.cccid);
    scripted_.erase(c.cccid);
  }
  send_pdu(h.ch, &h, nt::kDataHlen, pdo, c.data, c.bad_hdgst, c.bad_ddgst, h.datal);
}

void Conn::send_read_data(uint16_t cid, std::span<const uint8_t> data) {
  const TargetOptions o = target_.options();
  const std::size_t chunk = o.c2h_chunk ? o.c2h_chunk : std::max<std::size_t>(data.size(), 1);
  for (std::size_t off = 0; off < data.size(); off += chunk) {
    const std::size_t n = std::min(chunk, data.size() - off);
    const bool last = off + n == data.size();
    C2h c;
    c.cccid = cid;
    c.datao = static_cast<uint32_t>(off);
    c.data = data.subspan(off, n);
    c.flags =
        last ? static_cast<uint8_t>(nt::flags::kLastPdu | (o.c2h_success ? nt::flags::kSuccess : 0))
             : 0;
    c.pdo = o.c2h_pdo;
    send_c2h(c);
  }
  if (data.empty() || !o.c2h_success) send_resp(cid);
}

std::vector<uint8_t> Conn::r2t_bytes(uint16_t cid, uint16_t ttag, uint32_t offset, uint32_t length,
                                     bool hdgst) {
  nt::R2t h{};
  h.ch.type = nt::pdu::kR2t;
  h.ch.hlen = nt::kR2tHlen;
  h.ch.flags = hdgst ? nt::flags::kHdgst : 0;
  h.ch.plen = nt::kR2tHlen + (hdgst ? nt::kDigestSize : 0);
  h.cccid = cid;
  h.ttag = ttag;
  h.r2to = offset;
  h.r2tl = length;
  std::vector<uint8_t> b = bytes_of(h);
  if (hdgst) {
    const uint32_t d = crc32c(b.data(), b.size());
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(&d),
             reinterpret_cast<const uint8_t*>(&d) + 4);
  }
  return b;
}

void Conn::send_r2t(uint16_t cid, uint16_t ttag, uint32_t offset, uint32_t length) {
  const std::vector<uint8_t> b = r2t_bytes(cid, ttag, offset, length, hdgst());
  send_raw(b);
}

void Conn::send_c2h_term(uint16_t fes, uint32_t fei) {
  nt::TermReq t{};
  t.ch.type = nt::pdu::kC2hTermReq;
  t.ch.hlen = nt::kTermReqHlen;
  t.ch.plen = nt::kTermReqHlen;
  t.fes = fes;
  t.fei = fei;
  send_raw(bytes_of(t));
}

void Conn::close() {
  ::shutdown(fd_, SHUT_RDWR);
}

// ------------------------------------------------------------------------ target ---

ScriptedTarget::ScriptedTarget(TargetOptions options) : options_(std::move(options)) {
  ram_.assign(options_.num_blocks * options_.block_size, 0);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error(std::string("scripted target: cannot listen: ") +
                             std::strerror(errno));
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

ScriptedTarget::~ScriptedTarget() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  acceptor_.join();
  ::close(listen_fd_);
  {
    std::lock_guard lock(mu_);
    for (int fd : fds_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
  }
  for (std::thread& t : threads_) t.join();
}

std::string ScriptedTarget::subnqn() const {
  std::lock_guard lock(mu_);
  return options_.subnqn;
}

void ScriptedTarget::update(const std::function<void(TargetOptions&)>& change) {
  std::lock_guard lock(mu_);
  change(options_);
}

TargetOptions ScriptedTarget::options() const {
  std::lock_guard lock(mu_);
  return options_;
}

void ScriptedTarget::set_hook(Hook hook) {
  std::lock_guard lock(mu_);
  hook_ = std::move(hook);
}

void ScriptedTarget::close_connection(int conn) {
  std::lock_guard lock(mu_);
  if (conn >= 0 && conn < static_cast<int>(fds_.size()) && fds_[conn] >= 0) {
    ::shutdown(fds_[conn], SHUT_RDWR);
  }
}

bool ScriptedTarget::wait(const std::function<bool(const Log&)>& pred,
                          std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(log_); });
}

std::vector<std::string> ScriptedTarget::violations() const {
  std::lock_guard lock(mu_);
  return log_.violations;
}

std::vector<uint8_t> ScriptedTarget::ram(uint64_t offset, std::size_t len) const {
  std::lock_guard lock(mu_);
  if (offset + len > ram_.size()) return {};
  return std::vector<uint8_t>(ram_.begin() + static_cast<std::ptrdiff_t>(offset),
                              ram_.begin() + static_cast<std::ptrdiff_t>(offset + len));
}

void ScriptedTarget::fill_ram(uint64_t offset, std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu_);
  if (offset + bytes.size() <= ram_.size()) {
    std::copy(bytes.begin(), bytes.end(), ram_.begin() + static_cast<std::ptrdiff_t>(offset));
  }
}

void ScriptedTarget::violation(const Conn& c, const std::string& what) {
  {
    std::lock_guard lock(mu_);
    log_.violations.push_back("conn " + std::to_string(c.id_) + " (qid " + std::to_string(c.qid_) +
                              "): " + what);
  }
  changed();
}

void ScriptedTarget::record_sent(const Conn& c, const nt::CommonHeader& ch, const void* header,
                                 uint32_t hlen) {
  Pdu p;
  p.conn = c.id_;
  p.at = Clock::now();
  p.ch = ch;
  p.header.assign(static_cast<const uint8_t*>(header), static_cast<const uint8_t*>(header) + hlen);
  {
    std::lock_guard lock(mu_);
    log_.sent.push_back(std::move(p));
  }
  changed();
}

void ScriptedTarget::accept_loop() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    const int id = static_cast<int>(fds_.size());
    fds_.push_back(fd);
    log_.conns.emplace_back();
    threads_.emplace_back([this, id, fd] { serve(id, fd); });
  }
}

void ScriptedTarget::serve(int id, int fd) {
  Conn c(*this, id, fd);
  if (handshake(c)) {
    for (;;) {
      Pdu p;
      if (!read_pdu(c, p)) break;
      {
        std::lock_guard lock(mu_);
        log_.received.push_back(p);
      }
      changed();
      check_host_pdu(c, p);
      switch (p.ch.type) {
        case nt::pdu::kCapsuleCmd:
          on_capsule(c, p);
          break;
        case nt::pdu::kH2cData:
          on_h2c_data(c, p);
          break;
        default:
          break;  // H2CTermReq: logged; the host closes next
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    log_.conns[id].closed = true;
    ::close(fd);
    fds_[id] = -1;
  }
  changed();
}

bool ScriptedTarget::handshake(Conn& c) {
  nt::IcReq req{};
  if (!recv_exact(c.fd_, &req, sizeof req)) return false;
  Pdu p;
  p.conn = c.id_;
  p.at = Clock::now();
  p.ch = req.ch;
  p.header = bytes_of(req);
  TargetOptions o;
  {
    std::lock_guard lock(mu_);
    log_.received.push_back(p);
    log_.conns[c.id_].icreq = req;
    log_.conns[c.id_].icreq_seen = true;
    o = options_;
  }
  changed();
  if (req.ch.type != nt::pdu::kIcReq || req.ch.hlen != nt::kIcReqHlen ||
      req.ch.plen != nt::kIcReqHlen || req.ch.pdo != 0 || req.ch.flags != 0) {
    violation(c, "first PDU is not a well-formed ICReq");
  }
  if (req.pfv != nt::kPfv10) violation(c, "ICReq PFV " + hex(req.pfv));
  if (req.hpda > nt::kMaxPda) violation(c, "ICReq HPDA " + std::to_string(req.hpda));
  if (req.dgst & ~(nt::dgst::kHdgstEnable | nt::dgst::kDdgstEnable))
    violation(c, "ICReq DGST reserved bits");
  if (!o.send_icresp) {
    uint8_t sink[256];
    while (::recv(c.fd_, sink, sizeof sink, 0) > 0) {
    }
    return false;
  }
  c.hpda_ = req.hpda;
  nt::IcResp resp{};
  resp.ch.type = nt::pdu::kIcResp;
  resp.ch.hlen = nt::kIcRespHlen;
  resp.ch.plen = nt::kIcRespHlen;
  resp.pfv = nt::kPfv10;
  resp.cpda = o.cpda;
  resp.dgst = o.icresp_dgst.value_or(req.dgst & (nt::dgst::kHdgstEnable | nt::dgst::kDdgstEnable));
  resp.maxh2cdata = o.maxh2cdata;
  c.digests_ = resp.dgst;
  c.cpda_ = o.cpda;
  c.maxh2cdata_ = o.maxh2cdata;
  {
    std::lock_guard lock(mu_);
    log_.conns[c.id_].digests = resp.dgst;
  }
  record_sent(c, resp.ch, &resp, sizeof resp);
  return c.send_all(&resp, sizeof resp);
}

bool ScriptedTarget::read_pdu(Conn& c, Pdu& p) {
  uint8_t head[nt::kCommonHeaderLength];
  if (!recv_exact(c.fd_, head, sizeof head)) return false;
  std::memcpy(&p.ch, head, sizeof head);
  p.conn = c.id_;
  const uint32_t plen = p.ch.plen;
  if (plen < sizeof head || plen > kMaxPlen) {
    violation(c, "PDU type " + hex(p.ch.type) + " with PLEN " + std::to_string(plen));
    return false;  // the stream cannot be followed any more
  }
  std::vector<uint8_t> all(plen);
  std::memcpy(all.data(), head, sizeof head);
  if (!recv_exact(c.fd_, all.data() + sizeof head, plen - sizeof head)) return false;
  p.at = Clock::now();
  const uint8_t type = p.ch.type;
  const uint32_t hlen = std::min<uint32_t>(std::max<uint32_t>(p.ch.hlen, sizeof head), plen);
  p.header.assign(all.begin(), all.begin() + hlen);
  if (type == nt::pdu::kH2cTermReq || type == nt::pdu::kC2hTermReq) {
    p.data.assign(all.begin() + hlen, all.end());  // the header in error; no digests, no PDO
    return true;
  }
  const bool digested = type == nt::pdu::kCapsuleCmd || type == nt::pdu::kH2cData;
  uint32_t pos = hlen;
  p.has_hdgst = digested && c.hdgst();
  if (p.has_hdgst) {
    if (pos + nt::kDigestSize > plen) {
      violation(c, "PDU type " + hex(type) + ": no room for the header digest");
      p.hdgst_ok = false;
      return true;
    }
    uint32_t got;
    std::memcpy(&got, &all[pos], 4);
    p.hdgst_ok = got == crc32c(all.data(), hlen);
    pos += nt::kDigestSize;
  }
  if (p.ch.pdo != 0) {
    p.has_ddgst = digested && c.ddgst();
    const uint32_t end = plen - (p.has_ddgst ? nt::kDigestSize : 0);
    if (p.ch.pdo < pos || p.ch.pdo > end) {
      violation(c, "PDU type " + hex(type) + ": PDO " + std::to_string(p.ch.pdo) + " with PLEN " +
                       std::to_string(plen));
      return true;
    }
    p.pad.assign(all.begin() + pos, all.begin() + p.ch.pdo);
    p.data.assign(all.begin() + p.ch.pdo, all.begin() + end);
    if (p.has_ddgst) {
      uint32_t got;
      std::memcpy(&got, &all[end], 4);
      p.ddgst_ok = got == crc32c(p.data.data(), p.data.size());
    }
  } else if (pos != plen) {
    violation(c, "PDU type " + hex(type) + " without data: PLEN " + std::to_string(plen) +
                     ", header ends at " + std::to_string(pos));
  }
  return true;
}

// The rules a host's PDUs follow whatever they carry (NVMe/TCP 1.0, 3.6).
void ScriptedTarget::check_host_pdu(Conn& c, const Pdu& p) {
  const uint8_t type = p.ch.type;
  if (type != nt::pdu::kCapsuleCmd && type != nt::pdu::kH2cData && type != nt::pdu::kH2cTermReq) {
    violation(c, "a host may not send PDU type " + hex(type));
    return;
  }
  if (p.ch.hlen != nt::hlen_of(type)) {
    violation(c, "PDU type " + hex(type) + " with HLEN " + std::to_string(p.ch.hlen));
  }
  if (type == nt::pdu::kH2cTermReq) {
    if (p.ch.flags != 0 || p.ch.pdo != 0) violation(c, "H2CTermReq with FLAGS or PDO set");
    if (p.ch.plen > nt::kTermReqMaxPlen)
      violation(c, "H2CTermReq PLEN " + std::to_string(p.ch.plen));
    return;
  }
  if (bool(p.ch.flags & nt::flags::kHdgst) != c.hdgst()) {
    violation(c, "PDU type " + hex(type) + ": HDGSTF " + (c.hdgst() ? "clear" : "set") +
                     " while header digests are " + (c.hdgst() ? "on" : "off"));
  }
  const bool data = p.ch.pdo != 0;
  if (bool(p.ch.flags & nt::flags::kDdgst) != (data && c.ddgst())) {
    violation(c, "PDU type " + hex(type) + ": DDGSTF does not match the data digest in force");
  }
  if (!p.hdgst_ok) violation(c, "PDU type " + hex(type) + ": wrong header digest");
  if (!p.ddgst_ok) violation(c, "PDU type " + hex(type) + ": wrong data digest");
  if (type == nt::pdu::kCapsuleCmd && (p.ch.flags & (nt::flags::kLastPdu | nt::flags::kSuccess))) {
    violation(c, "CapsuleCmd with LAST_PDU or SUCCESS");
  }
  if (type == nt::pdu::kH2cData && !data) violation(c, "H2CData without data");
  if (data && p.ch.pdo % nt::pda_alignment(c.cpda_) != 0) {
    violation(c, "PDU type " + hex(type) + ": PDO " + std::to_string(p.ch.pdo) +
                     " not aligned to CPDA " + std::to_string(c.cpda_));
  }
}

void ScriptedTarget::on_capsule(Conn& c, const Pdu& p) {
  Command cmd;
  cmd.conn = c.id_;
  cmd.qid = c.qid_;
  cmd.sqe = p.sqe();
  cmd.data = p.data;
  const uint16_t cid = cmd.sqe.cid;
  c.scripted_.erase(cid);
  if (!cmd.is_connect() && c.qid_ < 0) {
    violation(c, "opcode " + hex(cmd.sqe.opcode) + " before Connect");
  }
  if (cmd.is_connect() && c.qid_ >= 0) violation(c, "a second Connect");
  if (!c.outstanding_.insert(cid).second) {
    violation(c, "CID " + hex(cid) + " reused while outstanding");
  } else if (c.qid_ >= 0 && c.outstanding_.size() > c.sqsize_ + 1u) {
    violation(c, std::to_string(c.outstanding_.size()) + " commands outstanding, SQSIZE " +
                     std::to_string(c.sqsize_));
  }
  const sn::SglDescriptor& sgl = cmd.sqe.dptr.sgl1;
  if (cmd.sqe.psdt() != sn::kPsdtSglMptrContiguous) violation(c, "PSDT is not SGL");
  if (sgl.id == nf::sgl::kIdInCapsule) {
    if (sgl.length != p.data.size() || sgl.address != 0) {
      violation(c, "in-capsule SGL of " + std::to_string(sgl.length) + " bytes, capsule carries " +
                       std::to_string(p.data.size()));
    }
    const uint32_t room = options().ioccsz * nf::kCapsuleSizeUnit - sizeof(sn::SubmissionEntry);
    if (c.qid_ > 0 && !cmd.fabrics() && sgl.length > room) {
      violation(c, std::to_string(sgl.length) + " bytes in-capsule, IOCCSZ allows " +
                       std::to_string(room));
    }
  } else if (sgl.id == nf::sgl::kIdTransport) {
    if (!p.data.empty() || sgl.address != 0) violation(c, "transport SGL with in-capsule data");
  } else {
    violation(c, "SGL identifier " + hex(sgl.id));
  }
  Hook hook;
  {
    std::lock_guard lock(mu_);
    hook = hook_;
  }
  if (hook && hook(c, cmd)) {
    c.scripted_.insert(cid);
    return;
  }
  if (sgl.id == nf::sgl::kIdTransport && sgl.length > 0 && host_to_controller(cmd)) {
    const TargetOptions o = options();
    Conn::Write w;
    w.plan = o.r2t_plan ? o.r2t_plan(sgl.length)
                        : std::vector<std::pair<uint32_t, uint32_t>>{{0, sgl.length}};
    w.cmd = std::move(cmd);
    w.cmd.data.assign(sgl.length, 0);
    auto [it, fresh] = c.writes_.insert_or_assign(cid, std::move(w));
    (void)fresh;
    next_r2t(c, it->second);
    return;
  }
  execute(c, std::move(cmd));
}

void ScriptedTarget::next_r2t(Conn& c, Conn::Write& w) {
  const auto [off, len] = w.plan[w.piece];
  w.ttag = c.next_ttag_++;
  w.got = 0;
  c.send_r2t(w.cmd.sqe.cid, w.ttag, off, len);
}

void ScriptedTarget::on_h2c_data(Conn& c, const Pdu& p) {
  const auto h = p.as<nt::H2cData>();
  auto it = c.writes_.find(h.cccid);
  if (it == c.writes_.end()) {
    if (c.scripted_.count(h.cccid)) return;  // the hook's R2Ts, right or wrong on purpose
    violation(c, "H2CData for CID " + hex(h.cccid) + ", which has no R2T");
    return;
  }
  Conn::Write& w = it->second;
  const auto [off, len] = w.plan[w.piece];
  if (h.ttag != w.ttag) violation(c, "H2CData TTAG " + hex(h.ttag) + ", R2T's " + hex(w.ttag));
  if (h.datao != off + w.got) {
    violation(c, "H2CData DATAO " + std::to_string(h.datao) + ", expected " +
                     std::to_string(off + w.got));
  }
  if (h.datal != p.data.size()) {
    violation(c, "H2CData DATAL " + std::to_string(h.datal) + " with " +
                     std::to_string(p.data.size()) + " bytes of data");
  }
  if (h.datal == 0 || h.datal > c.maxh2cdata_) {
    violation(c, "H2CData DATAL " + std::to_string(h.datal) + ", MAXH2CDATA " +
                     std::to_string(c.maxh2cdata_));
  }
  if (uint64_t{h.datao} + p.data.size() > uint64_t{off} + len) {
    violation(c, "H2CData beyond its R2T");
    return;
  }
  const bool last = h.datao + p.data.size() == uint64_t{off} + len;
  if (bool(p.ch.flags & nt::flags::kLastPdu) != last) {
    violation(c, std::string("H2CData LAST_PDU ") + (last ? "clear on" : "set before") +
                     " the R2T's last PDU");
  }
  std::copy(p.data.begin(), p.data.end(), w.cmd.data.begin() + h.datao);
  w.got = h.datao + static_cast<uint32_t>(p.data.size()) - off;
  if (w.got < len) return;
  if (++w.piece < w.plan.size()) {
    next_r2t(c, w);
    return;
  }
  Command cmd = std::move(w.cmd);
  c.writes_.erase(it);
  execute(c, std::move(cmd));
}

}  // namespace pollux::fabric::tcp::testing
