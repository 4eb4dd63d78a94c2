// The target's NVMe/TCP PDU handling, byte by byte from raw sockets: every malformed or
// out-of-place PDU is answered with a C2HTermReq carrying the Fatal Error Status and Field
// Information the specification names (the header in error as its data), then the connection
// closes — while a Pollux host on another connection keeps doing verified I/O. And what a
// correct host may ask for: MAXR2T (several R2Ts outstanding), HPDA (C2H data alignment), the
// SUCCESS flag without SQ flow control, a data digest error that ends only its command.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fabric/tcp/live_target.h"
#include "fabric/tcp/test_host.h"
#include "isa-l/crc.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_tcp.h"

namespace pollux::fabric::tcp::testing {
namespace {

namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;

uint32_t crc32c(const void* p, std::size_t n) {
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

// A CapsuleCmd PDU: the SQE, optional in-capsule data, digests as negotiated.
std::vector<uint8_t> capsule(const sn::SubmissionEntry& sqe, const void* data, uint32_t len,
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
  if (hd) {
    const uint32_t d = crc32c(v.data(), nt::kCapsuleCmdHlen);
    v.insert(v.end(), reinterpret_cast<const uint8_t*>(&d),
             reinterpret_cast<const uint8_t*>(&d) + 4);
  }
  if (len) {
    v.resize(pdo);
    const auto* b = static_cast<const uint8_t*>(data);
    v.insert(v.end(), b, b + len);
    if (dd) {
      const uint32_t d = crc32c(data, len);
      v.insert(v.end(), reinterpret_cast<const uint8_t*>(&d),
               reinterpret_cast<const uint8_t*>(&d) + 4);
    }
  }
  return v;
}

std::vector<uint8_t> h2c(uint16_t cccid, uint16_t ttag, uint32_t datao, const void* data,
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
  if (hd) {
    const uint32_t d = crc32c(v.data(), nt::kDataHlen);
    v.insert(v.end(), reinterpret_cast<const uint8_t*>(&d),
             reinterpret_cast<const uint8_t*>(&d) + 4);
  }
  v.resize(pdo);
  const auto* b = static_cast<const uint8_t*>(data);
  v.insert(v.end(), b, b + len);
  if (dd) {
    const uint32_t d = crc32c(data, len);
    v.insert(v.end(), reinterpret_cast<const uint8_t*>(&d),
             reinterpret_cast<const uint8_t*>(&d) + 4);
  }
  return v;
}

sn::SubmissionEntry connect_sqe(uint16_t qid, uint16_t sqsize, uint8_t cattr = 0) {
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

nf::ConnectData connect_data(const std::string& subnqn, uint16_t cntlid) {
  nf::ConnectData d{};
  std::memset(d.hostid, 0x42, sizeof d.hostid);
  d.cntlid = cntlid;
  const std::string host = "nqn.2026-11.io.pollux:raw";
  std::memcpy(d.subnqn, subnqn.data(), subnqn.size());
  std::memcpy(d.hostnqn, host.data(), host.size());
  return d;
}

sn::SubmissionEntry sqe(uint8_t opcode, uint16_t cid, uint32_t nsid = 0) {
  sn::SubmissionEntry e{};
  e.opcode = opcode;
  e.cid = cid;
  e.nsid = nsid;
  e.set_psdt(sn::kPsdtSglMptrContiguous);
  return e;
}

sn::CompletionEntry response(Raw& r) {
  auto p = r.pdu();
  EXPECT_GE(p.size(), sizeof(nt::CapsuleResp));
  nt::CapsuleResp resp{};
  if (p.size() >= sizeof resp) std::memcpy(&resp, p.data(), sizeof resp);
  EXPECT_EQ(resp.ch.type, nt::pdu::kCapsuleResp);
  return resp.cqe;
}

// Admin queue connected and enabled on `r`; returns the CNTLID.
uint16_t connect_admin(Raw& r, const std::string& nqn) {
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

uint16_t connect_io(Raw& r, const std::string& nqn, uint16_t cntlid, uint8_t cattr = 0) {
  const nf::ConnectData d = connect_data(nqn, cntlid);
  r.send(capsule(connect_sqe(1, 31, cattr), &d, sizeof d, r.hd(), r.dd()));
  return response(r).status;
}

struct Fixture : ::testing::Test {
  void SetUp() override {
    target = std::make_unique<LiveTarget>(options());
    host = std::make_unique<Host>(target->trid());
    ASSERT_TRUE(host->ok());
  }
  virtual LiveTargetOptions options() { return {}; }
  // Expects a C2HTermReq with `fes`/`fei` (and the header in error as its data), then EOF;
  // and the other host's I/O still works.
  void expect_term(Raw& r, uint16_t fes, uint32_t fei, const char* what) {
    auto p = r.pdu();
    ASSERT_GE(p.size(), sizeof(nt::TermReq)) << what << ": no C2HTermReq";
    nt::TermReq t;
    std::memcpy(&t, p.data(), sizeof t);
    EXPECT_EQ(t.ch.type, nt::pdu::kC2hTermReq) << what;
    EXPECT_EQ(t.ch.hlen, nt::kTermReqHlen) << what;
    EXPECT_EQ(uint16_t{t.fes}, fes) << what;
    EXPECT_EQ(uint32_t{t.fei}, fei) << what;
    EXPECT_GE(p.size(), sizeof t + nt::kCommonHeaderLength) << what << ": the header in error";
    EXPECT_TRUE(r.eof()) << what << ": the connection stays open";
    still_serving(what);
  }
  void still_serving(const char* what) {
    fill(host->buf(0), 8192, ++round);
    ASSERT_EQ(host->io(true, host->buf(0), 64, 16), 0) << "after " << what;
    ASSERT_EQ(host->io(false, host->buf(65536), 64, 16), 0) << "after " << what;
    EXPECT_EQ(std::memcmp(host->buf(0), host->buf(65536), 8192), 0) << "after " << what;
  }
  std::unique_ptr<LiveTarget> target;
  std::unique_ptr<Host> host;
  uint32_t round = 0;
};

using TcpPdu = Fixture;

TEST_F(TcpPdu, BeforeIcReq) {
  {
    Raw r(target->port());  // a capsule first: out of sequence
    r.send(capsule(sqe(sn::admin::kKeepAlive, 1), nullptr, 0, false, false));
    expect_term(r, nt::fes::kPduSequenceError, 0, "CapsuleCmd before ICReq");
  }
  {
    Raw r(target->port());
    nt::IcReq req{};
    req.ch.type = nt::pdu::kIcReq;
    req.ch.hlen = req.ch.plen = nt::kIcReqHlen;
    req.pfv = 1;
    r.send(&req, sizeof req);
    expect_term(r, nt::fes::kUnsupportedParameter, offsetof(nt::IcReq, pfv), "ICReq PFV 1");
  }
  {
    Raw r(target->port());
    nt::IcReq req{};
    req.ch.type = nt::pdu::kIcReq;
    req.ch.hlen = req.ch.plen = nt::kIcReqHlen;
    req.hpda = 32;
    r.send(&req, sizeof req);
    expect_term(r, nt::fes::kUnsupportedParameter, offsetof(nt::IcReq, hpda), "ICReq HPDA 32");
  }
  {
    Raw r(target->port());
    std::vector<uint8_t> req(132, 0);
    nt::CommonHeader ch{nt::pdu::kIcReq, 0, nt::kIcReqHlen, 0, 132};
    std::memcpy(req.data(), &ch, sizeof ch);
    r.send(req);
    expect_term(r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen),
                "ICReq PLEN 132");
  }
}

TEST_F(TcpPdu, HeaderFields) {
  {
    Raw r(target->port());
    r.handshake();
    nt::CommonHeader ch{0x0b, 0, 24, 0, 24};  // no such PDU type
    std::vector<uint8_t> v(24, 0);
    std::memcpy(v.data(), &ch, sizeof ch);
    r.send(v);
    expect_term(r, nt::fes::kInvalidHeaderField, 0, "PDU type 0Bh");
  }
  {
    Raw r(target->port());
    r.handshake();
    nt::CapsuleResp resp{};  // a controller's PDU, from the host
    resp.ch = {nt::pdu::kCapsuleResp, 0, nt::kCapsuleRespHlen, 0, nt::kCapsuleRespHlen};
    r.send(&resp, sizeof resp);
    expect_term(r, nt::fes::kInvalidHeaderField, 0, "CapsuleResp from the host");
  }
  {
    Raw r(target->port());
    r.handshake();
    nt::IcReq again{};
    again.ch.type = nt::pdu::kIcReq;
    again.ch.hlen = again.ch.plen = nt::kIcReqHlen;
    r.send(&again, sizeof again);
    expect_term(r, nt::fes::kPduSequenceError, 0, "a second ICReq");
  }
  {
    Raw r(target->port());
    r.handshake();
    auto v = capsule(sqe(sn::admin::kKeepAlive, 1), nullptr, 0, false, false);
    v[2] = 70;  // HLEN
    r.send(v);
    expect_term(r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, hlen),
                "CapsuleCmd HLEN 70");
  }
  {
    Raw r(target->port());
    r.handshake();
    const nf::ConnectData d = connect_data(target->nqn(), 0xffff);
    auto v = capsule(connect_sqe(0, 31), &d, sizeof d, false, false);
    v[3] = 64;  // PDO inside the header
    r.send(v);
    expect_term(r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, pdo), "PDO 64");
  }
}

TEST_F(TcpPdu, Digests) {
  {
    Raw r(target->port());
    r.handshake(nt::dgst::kHdgstEnable | nt::dgst::kDdgstEnable);
    auto v = capsule(sqe(sn::admin::kKeepAlive, 1), nullptr, 0, true, true);
    v[nt::kCapsuleCmdHlen] ^= 1;  // the header digest
    r.send(v);
    expect_term(r, nt::fes::kHeaderDigestError, 0, "header digest");
  }
  {
    Raw r(target->port());
    r.handshake(nt::dgst::kHdgstEnable);
    auto v = capsule(sqe(sn::admin::kKeepAlive, 1), nullptr, 0, false, false);  // no HDGSTF
    r.send(v);
    expect_term(r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags),
                "HDGSTF missing");
  }
  {
    // A data digest error is not fatal: that command fails (Transient Transport Error, no
    // DNR), the connection serves the next one.
    Raw r(target->port());
    r.handshake(nt::dgst::kDdgstEnable);
    const nf::ConnectData d = connect_data(target->nqn(), 0xffff);
    auto v = capsule(connect_sqe(0, 31), &d, sizeof d, false, true);
    v.back() ^= 0xff;
    r.send(v);
    const sn::CompletionEntry c = response(r);
    EXPECT_EQ(sn::status::sct(c.status), sn::sct::kGeneric);
    EXPECT_EQ(sn::status::sc(c.status), sn::sc::kTransientTransportError);
    EXPECT_FALSE(sn::status::dnr(c.status));
    EXPECT_NE(connect_admin(r, target->nqn()), 0);
    still_serving("a data digest error");
  }
}

TEST_F(TcpPdu, CapsuleDataAndSgls) {
  const nf::ConnectData d = connect_data(target->nqn(), 0xffff);
  {
    Raw r(target->port());
    r.handshake();
    std::vector<uint8_t> big(nt::kAdminInCapsuleDataSize + 16, 0);
    std::memcpy(big.data(), &d, sizeof d);
    sn::SubmissionEntry e = connect_sqe(0, 31);
    e.dptr.sgl1 = nf::sgl::in_capsule(static_cast<uint32_t>(big.size()));
    r.send(capsule(e, big.data(), static_cast<uint32_t>(big.size()), false, false));
    expect_term(r, nt::fes::kDataTransferLimitExceeded, 0,
                "in-capsule data above the capsule size");
  }
  {
    Raw r(target->port());
    r.handshake();
    sn::SubmissionEntry e = connect_sqe(0, 31);
    e.dptr.sgl1 = nf::sgl::in_capsule(sizeof d, 16);  // an offset: TCP has ICDOFF 0
    r.send(capsule(e, &d, sizeof d, false, false));
    expect_term(r, nt::fes::kUnsupportedParameter, 32, "in-capsule SGL offset 16");
  }
  {
    Raw r(target->port());
    r.handshake();
    sn::SubmissionEntry e = connect_sqe(0, 31);
    e.dptr.sgl1 = nf::sgl::in_capsule(512);  // says 512, carries 1024
    r.send(capsule(e, &d, sizeof d, false, false));
    expect_term(r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen),
                "SGL length vs PDU");
  }
  {
    Raw r(target->port());
    r.handshake();
    connect_admin(r, target->nqn());
    sn::SubmissionEntry e = sqe(sn::admin::kIdentify, 3);
    e.cdw10 = sn::cns::kController;
    const auto keyed = nf::KeyedSglDescriptor::make(0x1000, 4096, 7);
    std::memcpy(&e.dptr.sgl1, &keyed, sizeof keyed);  // RDMA's form, on TCP
    r.send(capsule(e, nullptr, 0, false, false));
    expect_term(r, nt::fes::kUnsupportedParameter, 47, "keyed SGL");
  }
  {
    Raw r(target->port());
    r.handshake();
    connect_admin(r, target->nqn());
    sn::SubmissionEntry e = sqe(sn::admin::kGetLogPage, 3);
    e.dptr.sgl1 = nf::sgl::transport(1u << 20);  // beyond max_io_size
    r.send(capsule(e, nullptr, 0, false, false));
    expect_term(r, nt::fes::kDataTransferLimitExceeded, 0, "transport SGL of 1 MiB");
  }
}

// An I/O queue whose writes go by R2T, for the H2CData cases.
struct H2c {
  H2c(LiveTarget& t, uint32_t maxr2t = 0) : admin(t.port()), r(t.port()) {
    admin.handshake();
    cntlid = connect_admin(admin, t.nqn());
    resp = r.handshake(0, 0, maxr2t);
    EXPECT_EQ(connect_io(r, t.nqn(), cntlid), 0);
  }
  // A write of `bytes` from LBA 0; returns the first R2T.
  nt::R2t write(uint16_t cid, uint32_t bytes) {
    sn::SubmissionEntry e = sqe(sn::nvm::kWrite, cid, 1);
    e.cdw12 = bytes / 512 - 1;
    e.dptr.sgl1 = nf::sgl::transport(bytes);
    r.send(capsule(e, nullptr, 0, false, false));
    return next_r2t();
  }
  nt::R2t next_r2t() {
    auto p = r.pdu();
    nt::R2t t{};
    EXPECT_EQ(p.size(), sizeof t);
    if (p.size() == sizeof t) std::memcpy(&t, p.data(), sizeof t);
    EXPECT_EQ(t.ch.type, nt::pdu::kR2t);
    return t;
  }
  Raw admin;  // the association's admin queue, kept open
  Raw r;
  nt::IcResp resp;
  uint16_t cntlid = 0;
};

struct TcpH2c : Fixture {
  LiveTargetOptions options() override {
    LiveTargetOptions o;
    o.tcp.max_h2c_data_size = 8192;
    return o;
  }
};

TEST_F(TcpH2c, DataMustAnswerAnR2t) {
  std::vector<uint8_t> data(65536, 0x3c);
  {
    H2c h(*target);
    const nt::R2t t = h.write(5, 16384);
    EXPECT_EQ(t.r2to, 0u);
    EXPECT_EQ(t.r2tl, 8192u);  // MAXH2CDATA per R2T
    h.r.send(h2c(5, static_cast<uint16_t>(t.ttag + 1), 0, data.data(), 4096, false, false, false));
    expect_term(h.r, nt::fes::kInvalidHeaderField, offsetof(nt::H2cData, ttag), "unknown TTAG");
  }
  {
    H2c h(*target);
    const nt::R2t t = h.write(5, 16384);
    h.r.send(h2c(6, t.ttag, 0, data.data(), 4096, false, false, false));
    expect_term(h.r, nt::fes::kInvalidHeaderField, offsetof(nt::H2cData, cccid), "wrong CCCID");
  }
  {
    H2c h(*target);
    const nt::R2t t = h.write(5, 16384);
    h.r.send(h2c(5, t.ttag, 4096, data.data(), 4096, false, false, false));
    expect_term(h.r, nt::fes::kDataTransferOutOfRange, 0, "DATAO ahead of the data");
  }
  {
    H2c h(*target);
    const nt::R2t t = h.write(5, 16384);
    h.r.send(h2c(5, t.ttag, 0, data.data(), 12288, true, false, false));
    expect_term(h.r, nt::fes::kDataTransferLimitExceeded, 0, "DATAL above MAXH2CDATA");
  }
  {
    H2c h(*target);
    const nt::R2t t = h.write(5, 16384);
    h.r.send(h2c(5, t.ttag, 0, data.data(), 8192, false, false, false));  // LAST_PDU missing
    expect_term(h.r, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags), "LAST_PDU");
  }
}

TEST_F(TcpH2c, MaxR2tBoundsR2tsInFlight) {
  std::vector<uint8_t> data(65536);
  fill(data.data(), data.size(), 77);
  for (uint32_t maxr2t : {0u, 2u}) {
    H2c h(*target, maxr2t);
    // 64 KiB in 8 KiB R2Ts: MAXR2T + 1 of them at once, the next after one's data is in.
    std::vector<nt::R2t> r2ts{h.write(9, 65536)};
    for (uint32_t i = 0; i < maxr2t; ++i) r2ts.push_back(h.next_r2t());
    for (uint32_t i = 0; i < r2ts.size(); ++i) EXPECT_EQ(r2ts[i].r2to, i * 8192u);
    uint32_t sent = 0;
    while (sent < 65536) {
      const nt::R2t t = r2ts[sent / 8192];
      h.r.send(h2c(9, t.ttag, t.r2to, data.data() + t.r2to, t.r2tl, true, false, false));
      sent += t.r2tl;
      if (r2ts.size() * 8192 < 65536) r2ts.push_back(h.next_r2t());
    }
    const sn::CompletionEntry c = response(h.r);
    EXPECT_EQ(c.status, 0) << "MAXR2T " << maxr2t;
    ASSERT_EQ(host->io(false, host->buf(0), 0, 128), 0);
    EXPECT_EQ(std::memcmp(host->buf(0), data.data(), data.size()), 0) << "MAXR2T " << maxr2t;
  }
}

TEST_F(TcpPdu, C2hDataAlignmentAndSuccessFlag) {
  fill(host->buf(0), 4096, 31);
  ASSERT_EQ(host->io(true, host->buf(0), 200, 8), 0);
  for (bool no_sq_flow : {false, true}) {
    Raw r(target->port());
    r.handshake(nt::dgst::kHdgstEnable, /*hpda=*/7);  // 32-byte alignment for C2H data
    Raw admin(target->port());
    admin.handshake();
    const uint16_t cntlid = connect_admin(admin, target->nqn());
    ASSERT_EQ(connect_io(r, target->nqn(), cntlid,
                         no_sq_flow ? nf::connect::kCattrDisableSqFlowControl : 0),
              0);
    sn::SubmissionEntry e = sqe(sn::nvm::kRead, 4, 1);
    e.cdw10 = 200;
    e.cdw12 = 7;
    e.dptr.sgl1 = nf::sgl::transport(4096);
    r.send(capsule(e, nullptr, 0, true, false));
    auto p = r.pdu();
    nt::C2hData c{};
    ASSERT_GE(p.size(), sizeof c);
    std::memcpy(&c, p.data(), sizeof c);
    EXPECT_EQ(c.ch.type, nt::pdu::kC2hData);
    EXPECT_EQ(c.ch.pdo, 32);  // 24 + header digest, up to HPDA's 32
    EXPECT_EQ(c.datal, 4096u);
    EXPECT_TRUE(c.ch.flags & nt::flags::kLastPdu);
    EXPECT_EQ(bool(c.ch.flags & nt::flags::kSuccess), no_sq_flow);
    EXPECT_EQ(std::memcmp(p.data() + 32, host->buf(0), 4096), 0);
    if (!no_sq_flow) {
      const sn::CompletionEntry cqe = response(r);
      EXPECT_EQ(cqe.status, 0);
      EXPECT_EQ(cqe.cid, 4);
      EXPECT_EQ(cqe.sqhd, 2);  // Connect, then this read
    }
  }
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
