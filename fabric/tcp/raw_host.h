// A raw NVMe/TCP host for target tests: a blocking socket that speaks PDUs byte by byte, and
// builders for the PDUs a host sends (CapsuleCmd, H2CData, Connect), so tests can send what a
// correct host never would.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "fabric/tcp/test_host.h"
#include "isa-l/crc.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_tcp.h"

namespace pollux::fabric::tcp::testing {

namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;

inline uint32_t crc32c(const void* p, std::size_t n) {
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(p)), static_cast<int>(n), ~0u);
}

// A blocking client socket with a receive timeout: a target that stays silent fails the test.
class Raw {
 public:
  explicit Raw(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Raw() { ::close(fd_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  int fd() const { return fd_; }
  void send(const void* p, std::size_t n) {
    ASSERT_EQ(::send(fd_, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
  }
  void send(const std::vector<uint8_t>& v) { send(v.data(), v.size()); }
  bool recv(void* p, std::size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
      const ssize_t r = ::recv(fd_, b, n, 0);
      if (r <= 0) return false;
      b += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  // One whole PDU (its common header says how long).
  std::vector<uint8_t> pdu() {
    std::vector<uint8_t> v(8);
    if (!recv(v.data(), 8)) return {};
    nt::CommonHeader ch;
    std::memcpy(&ch, v.data(), 8);
    if (ch.plen < 8 || ch.plen > (1u << 24)) return {};
    v.resize(ch.plen);
    if (!recv(v.data() + 8, ch.plen - 8)) return {};
    return v;
  }
  bool eof() {
    uint8_t b;
    return ::recv(fd_, &b, 1, 0) == 0;
  }

  // ICReq, and the ICResp it gets.
  nt::IcResp handshake(uint8_t dgst = 0, uint8_t hpda = 0, uint32_t maxr2t = 0) {
    nt::IcReq req{};
    req.ch.type = nt::pdu::kIcReq;
    req.ch.hlen = req.ch.plen = nt::kIcReqHlen;
    req.hpda = hpda;
    req.dgst = dgst;
    req.maxr2t = maxr2t;
    send(&req, sizeof req);
    nt::IcResp resp{};
    auto p = pdu();
    EXPECT_EQ(p.size(), sizeof resp);
    if (p.size() == sizeof resp) std::memcpy(&resp, p.data(), sizeof resp);
    EXPECT_EQ(resp.ch.type, nt::pdu::kIcResp);
    hd_ = resp.dgst & nt::dgst::kHdgstEnable;
    dd_ = resp.dgst & nt::dgst::kDdgstEnable;
    return resp;
  }
  bool hd() const { return hd_; }
  bool dd() const { return dd_; }

 private:
  int fd_ = -1;
  bool hd_ = false, dd_ = false;
};

// After a PDU's header (`hlen` bytes in v): its header digest, padding up to `pdo`, the data
// and its data digest, as negotiated.
inline void append_digest_and_data(std::vector<uint8_t>& v, uint32_t hlen, bool hd, uint32_t pdo,
                                   const void* data, uint32_t len, bool dd) {
  auto put32 = [&v](uint32_t x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    v.insert(v.end(), p, p + 4);
  };
  if (hd) put32(crc32c(v.data(), hlen));
  if (len == 0) return;
  v.resize(pdo);
  const auto* b = static_cast<const uint8_t*>(data);
  v.insert(v.end(), b, b + len);
  if (dd) put32(crc32c(data, len));
}

// A CapsuleCmd PDU: the SQE, optional in-capsule data, digests as negotiated.
inline std::vector<uint8_t> capsule(const sn::SubmissionEntry& sqe, const void* data, uint32_t len,
                                    bool hd, bool dd) {
  nt::CapsuleCmd c{};
  c.ch.type = nt::pdu::kCapsuleCmd;
  c.ch.hlen = nt::kCapsuleCmdHlen;
  c.ch.flags =
      static_cast<uint8_t>((hd ? nt::flags::kHdgst : 0) | (len && dd ? nt::flags::kDdgst : 0));
  const uint32_t pdo = len ? nt::data_offset(nt::kCapsuleCmdHlen, hd, 0) : 0;
  c.ch.pdo = static_cast<uint8_t>(pdo);
  c.ch.plen = nt::pdu_length(nt::kCapsuleCmdHlen, hd, pdo, len, dd);
  c.sqe = sqe;
  std::vector<uint8_t> v(sizeof c);
  std::memcpy(v.data(), &c, sizeof c);
  append_digest_and_data(v, nt::kCapsuleCmdHlen, hd, pdo, data, len, dd);
  return v;
}

inline std::vector<uint8_t> h2c(uint16_t cccid, uint16_t ttag, uint32_t datao, const void* data,
                                uint32_t len, bool last, bool hd, bool dd) {
  nt::H2cData h{};
  h.ch.type = nt::pdu::kH2cData;
  h.ch.hlen = nt::kDataHlen;
  h.ch.flags = static_cast<uint8_t>((hd ? nt::flags::kHdgst : 0) | (dd ? nt::flags::kDdgst : 0) |
                                    (last ? nt::flags::kLastPdu : 0));
  const uint32_t pdo = nt::data_offset(nt::kDataHlen, hd, 0);
  h.ch.pdo = static_cast<uint8_t>(pdo);
  h.ch.plen = nt::pdu_length(nt::kDataHlen, hd, pdo, len, dd);
  h.cccid = cccid;
  h.ttag = ttag;
  h.datao = datao;
  h.datal = len;
  std::vector<uint8_t> v(sizeof h);
  std::memcpy(v.data(), &h, sizeof h);
  append_digest_and_data(v, nt::kDataHlen, hd, pdo, data, len, dd);
  return v;
}

inline sn::SubmissionEntry connect_sqe(uint16_t qid, uint16_t sqsize, uint8_t cattr = 0) {
  nf::ConnectCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kConnect;
  c.flags = static_cast<uint8_t>(sn::kPsdtSglMptrContiguous << 6);
  c.cid = 1;
  c.sgl1 = nf::sgl::in_capsule(sizeof(nf::ConnectData));
  c.qid = qid;
  c.sqsize = sqsize;
  c.cattr = cattr;
  sn::SubmissionEntry e;
  std::memcpy(&e, &c, sizeof e);
  return e;
}

inline nf::ConnectData connect_data(const std::string& subnqn, uint16_t cntlid) {
  nf::ConnectData d{};
  std::memset(d.hostid, 0x42, sizeof d.hostid);
  d.cntlid = cntlid;
  const std::string host = "nqn.2026-11.io.pollux:raw";
  std::memcpy(d.subnqn, subnqn.data(), subnqn.size());
  std::memcpy(d.hostnqn, host.data(), host.size());
  return d;
}

inline sn::SubmissionEntry sqe(uint8_t opcode, uint16_t cid, uint32_t nsid = 0) {
  sn::SubmissionEntry e{};
  e.opcode = opcode;
  e.cid = cid;
  e.nsid = nsid;
  e.set_psdt(sn::kPsdtSglMptrContiguous);
  return e;
}

inline sn::CompletionEntry response(Raw& r) {
  auto p = r.pdu();
  EXPECT_GE(p.size(), sizeof(nt::CapsuleResp));
  nt::CapsuleResp resp{};
  if (p.size() >= sizeof resp) std::memcpy(&resp, p.data(), sizeof resp);
  EXPECT_EQ(resp.ch.type, nt::pdu::kCapsuleResp);
  return resp.cqe;
}

// Admin queue connected and enabled on `r`; returns the CNTLID.
inline uint16_t connect_admin(Raw& r, const std::string& nqn) {
  const nf::ConnectData d = connect_data(nqn, 0xffff);
  r.send(capsule(connect_sqe(0, 31), &d, sizeof d, r.hd(), r.dd()));
  const sn::CompletionEntry c = response(r);
  EXPECT_EQ(c.status, 0);
  nf::PropertySetCommand ps{};
  ps.opcode = nf::kOpcodeFabrics;
  ps.fctype = nf::fctype::kPropertySet;
  ps.cid = 2;
  ps.ofst = sn::reg::kCc;
  ps.value = sn::cc::make(true, 0, 0, 0, 0, 6, 4);
  sn::SubmissionEntry e;
  std::memcpy(&e, &ps, sizeof e);
  e.set_psdt(sn::kPsdtSglMptrContiguous);
  r.send(capsule(e, nullptr, 0, r.hd(), r.dd()));
  EXPECT_EQ(response(r).status, 0);
  return nf::connect::cntlid(c.dw0);
}

inline uint16_t connect_io(Raw& r, const std::string& nqn, uint16_t cntlid, uint8_t cattr = 0) {
  const nf::ConnectData d = connect_data(nqn, cntlid);
  r.send(capsule(connect_sqe(1, 31, cattr), &d, sizeof d, r.hd(), r.dd()));
  return response(r).status;
}

}  // namespace pollux::fabric::tcp::testing
