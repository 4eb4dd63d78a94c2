// The target's NVMe/TCP PDU handling, byte by byte from raw sockets: every malformed or
// out-of-place PDU is answered with a C2HTermReq carrying the Fatal Error Status and Field
// Information the specification names (the header in error as its data), then the connection
// closes — while a Pollux host on another connection keeps doing verified I/O. And what a
// correct host may ask for: MAXR2T (several R2Ts outstanding), HPDA (C2H data alignment), the
// SUCCESS flag without SQ flow control, a data digest error that ends only its command.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fabric/tcp/live_target.h"
#include "fabric/tcp/raw_host.h"

namespace pollux::fabric::tcp::testing {
namespace {

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

// An SQ entry is held until its command completes: SQHD says so, and a host that sends more
// commands than its queue has entries — here while the writes it has hold their R2Ts, so the
// data that would free them sits behind the extra capsule — gets a C2HTermReq, not a
// connection that stops reading (it used to wait for a free request that could never come,
// and never saw the host's close).
TEST_F(TcpPdu, MoreCommandsThanQueueEntriesEndTheConnection) {
  Raw admin(target->port());
  admin.handshake();
  const uint16_t cntlid = connect_admin(admin, target->nqn());
  Raw r(target->port());
  r.handshake();
  const nf::ConnectData d = connect_data(target->nqn(), cntlid);
  r.send(capsule(connect_sqe(1, 3), &d, sizeof d, false, false));  // 4 entries
  const sn::CompletionEntry connected = response(r);
  ASSERT_EQ(connected.status, 0);
  EXPECT_EQ(connected.sqhd, 1);              // the Connect completed
  for (uint16_t cid = 1; cid <= 4; ++cid) {  // four writes by R2T, their data never sent
    sn::SubmissionEntry e = sqe(sn::nvm::kWrite, cid, 1);
    e.cdw10 = cid * 16u;
    e.cdw12 = 15;
    e.dptr.sgl1 = nf::sgl::transport(8192);
    r.send(capsule(e, nullptr, 0, false, false));
    auto p = r.pdu();
    ASSERT_GE(p.size(), sizeof(nt::R2t));
    EXPECT_EQ(p[0], nt::pdu::kR2t) << "write " << cid;
  }
  r.send(capsule(sqe(sn::nvm::kFlush, 5, 1), nullptr, 0, false, false));  // a fifth
  expect_term(r, nt::fes::kPduSequenceError, 0, "a command beyond the queue's entries");
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
