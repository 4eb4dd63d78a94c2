// The NVMe/TCP host transport, driven by the real nvme::Controller and nvme::Qpair against a
// scripted target on a loopback socket (testing/scripted_target.h): attach, data transfer,
// digests, and the protocol errors that end a connection. The target checks every PDU the host
// sends; each test expects it to have found nothing wrong unless it says so. Recovery:
// host_recovery_test.cc.
#include "fabric/tcp/host_test_fixture.h"

namespace pollux::fabric::tcp::host_testing {
namespace {

// ------------------------------------------------------------------------- attach ---

TEST_F(TcpHostTest, AttachSendsIcReqConnectsQueuesAndReadsProperties) {
  start_target();
  TcpOptions topt;
  topt.header_digest = true;  // ICReq asks for exactly what was asked for
  nvme::ControllerOptions copt;
  copt.keep_alive_timeout_ms = 7000;
  attach(topt, copt);

  const std::string subnqn = target_->subnqn();  // (inspect holds the target's lock)
  const uint16_t cntlid = target_->inspect([&](const st::Log& l) {
    EXPECT_EQ(l.conns.size(), 2u);
    for (const st::ConnInfo& c : l.conns) {
      EXPECT_TRUE(c.icreq_seen);
      const nt::IcReq& ic = c.icreq;
      EXPECT_EQ(ic.ch.type, nt::pdu::kIcReq);
      EXPECT_EQ(ic.ch.hlen, nt::kIcReqHlen);
      EXPECT_EQ(ic.ch.plen, nt::kIcReqHlen);
      EXPECT_EQ(ic.ch.pdo, 0);
      EXPECT_EQ(ic.ch.flags, 0);
      EXPECT_EQ(ic.pfv, nt::kPfv10);
      EXPECT_EQ(ic.hpda, 0);
      EXPECT_EQ(ic.maxr2t, 0u);  // one R2T per command at a time
      EXPECT_EQ(ic.dgst, nt::dgst::kHdgstEnable);
    }
    // The admin queue: Connect first, for a dynamic controller, with KATO.
    const st::ConnInfo& a = l.conns[0];
    EXPECT_EQ(a.qid, 0);
    EXPECT_EQ(a.connect.qid, 0);
    EXPECT_EQ(a.connect.recfmt, 0);
    EXPECT_EQ(a.connect.sqsize, 31);  // admin_queue_size 32, 0's based
    EXPECT_EQ(a.connect.kato, 7000u);
    EXPECT_TRUE(a.connect.cattr & nf::connect::kCattrDisableSqFlowControl);
    EXPECT_EQ(a.connect_data.cntlid, nf::connect::kCntlidDynamic);
    EXPECT_STREQ(a.connect_data.subnqn, subnqn.c_str());
    EXPECT_STREQ(a.connect_data.hostnqn, kHostNqn);
    const uint8_t zero[16] = {};
    EXPECT_NE(std::memcmp(a.connect_data.hostid, zero, 16), 0);
    const auto admin = l.commands(0);
    EXPECT_EQ(admin.at(0).opcode, nf::kOpcodeFabrics);
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(&admin.at(0))[4], nf::fctype::kConnect);
    // Connect data in-capsule (the admin queue takes 8 KiB).
    const auto connect_pdu = l.of_type(nt::pdu::kCapsuleCmd, 0).at(0);
    EXPECT_EQ(connect_pdu->sqe().dptr.sgl1.id, nf::sgl::kIdInCapsule);
    EXPECT_EQ(connect_pdu->data.size(), sizeof(nf::ConnectData));
    // Then Property Get CAP (8 bytes), ..., Property Set CC with EN, then Identify.
    int get_cap = -1, set_en = -1, identify = -1;
    for (int i = 0; i < static_cast<int>(admin.size()); ++i) {
      nf::PropertyGetCommand g;
      std::memcpy(&g, &admin[i], sizeof g);
      nf::PropertySetCommand s;
      std::memcpy(&s, &admin[i], sizeof s);
      if (g.opcode == nf::kOpcodeFabrics && g.fctype == nf::fctype::kPropertyGet &&
          g.ofst == sn::reg::kCap && get_cap < 0) {
        EXPECT_EQ(g.attrib, nf::property::kSize8);
        get_cap = i;
      }
      if (s.opcode == nf::kOpcodeFabrics && s.fctype == nf::fctype::kPropertySet &&
          s.ofst == sn::reg::kCc && (s.value & sn::cc::kEn) && set_en < 0) {
        EXPECT_EQ(s.attrib, nf::property::kSize4);
        set_en = i;
      }
      if (admin[i].opcode == sn::admin::kIdentify && identify < 0) identify = i;
    }
    EXPECT_GT(get_cap, 0);
    EXPECT_GT(set_en, get_cap);
    EXPECT_GT(identify, set_en);
    // The I/O queue: its own connection, Connect first, the CNTLID the admin Connect got.
    const st::ConnInfo& io = l.conns[1];
    EXPECT_EQ(io.qid, 1);
    EXPECT_EQ(io.connect.sqsize, 31);  // queue_size 32
    EXPECT_EQ(io.connect.kato, 0u);
    EXPECT_TRUE(io.connect.cattr & nf::connect::kCattrDisableSqFlowControl);
    EXPECT_EQ(io.connect_data.cntlid, a.cntlid);
    EXPECT_EQ(std::memcmp(io.connect_data.hostid, a.connect_data.hostid, 16), 0);
    EXPECT_STREQ(io.connect_data.hostnqn, kHostNqn);
    EXPECT_STREQ(io.connect_data.subnqn, subnqn.c_str());
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(&l.commands(1).at(0))[4], nf::fctype::kConnect);
    return a.cntlid;
  });

  // Identify went through: the controller knows what the target said.
  EXPECT_EQ(ctrl_->identify().cntlid, cntlid);
  EXPECT_EQ(std::string(ctrl_->identify().mn, 8), "Pollux s");
  nf::IdentifyControllerFabrics f;
  std::memcpy(&f, ctrl_->identify().nvmeof, sizeof f);
  EXPECT_EQ(f.ioccsz, (64u + 8192) / 16);
  EXPECT_EQ(ctrl_->version(), sn::make_version(1, 4));
  EXPECT_EQ(ctrl_->max_queue_entries(), 128u);
  EXPECT_EQ(ctrl_->io_queues_granted(), 4u);
  EXPECT_EQ(ns_->block_size, kBlock);
  EXPECT_EQ(ns_->num_blocks, 8192u);
  EXPECT_TRUE(io_queue().header_digest());
  EXPECT_FALSE(io_queue().data_digest());
  EXPECT_TRUE(ctrl_->healthy());
  auto data = pattern(4096, 1);
  write_ok(0, data);
}

TEST_F(TcpHostTest, KeepAliveArrivesWithinKato) {
  start_target();
  nvme::ControllerOptions copt;
  copt.keep_alive_timeout_ms = 400;
  attach({}, copt);
  EXPECT_EQ(target_->inspect([](const st::Log& l) { return l.conns[0].connect.kato; }), 400u);
  const auto attached = Clock::now();
  auto keep_alives = [&] {
    return target_->inspect([](const st::Log& l) {
      std::vector<Clock::time_point> at;
      for (const st::Pdu* p : l.of_type(nt::pdu::kCapsuleCmd, 0)) {
        if (p->sqe().opcode == sn::admin::kKeepAlive) at.push_back(p->at);
      }
      return at;
    });
  };
  // The admin poll sends them (the application calls it regularly).
  const auto deadline = Clock::now() + kWait;
  while (keep_alives().size() < 4 && Clock::now() < deadline) {
    ctrl_->process_admin_completions();
    std::this_thread::yield();
  }
  const auto at = keep_alives();
  ASSERT_GE(at.size(), 4u);
  EXPECT_LT(at[0] - attached, milliseconds(400));
  for (std::size_t i = 1; i < at.size(); ++i) {
    EXPECT_LT(at[i] - at[i - 1], milliseconds(400)) << "Keep Alive " << i;
    EXPECT_GE(at[i] - at[i - 1], milliseconds(150)) << "Keep Alive " << i << ": every KATO/2";
  }
  EXPECT_TRUE(ctrl_->healthy());
}

// The host's side of KATO: a Keep Alive the controller never answers means it is gone —
// after KATO the host resets (reconnects) instead of waiting for the admin timeout (5 s).
TEST_F(TcpHostTest, AKeepAliveUnansweredForKatoResetsTheController) {
  start_target();
  std::atomic<bool> hold{true};
  std::atomic<int> held{0};
  target_->set_hook([&](st::Conn&, const st::Command& c) {
    if (c.qid != 0 || c.sqe.opcode != sn::admin::kKeepAlive || !hold.load()) return false;
    ++held;
    return true;  // never answered
  });
  nvme::ControllerOptions copt;
  copt.keep_alive_timeout_ms = 200;
  // The first Keep Alive goes during attach: measure from before it, not after.
  const auto start = Clock::now();
  attach({}, copt);
  const auto deadline = Clock::now() + kWait;
  while (ctrl_->stats().keep_alive_expired.load() == 0 && Clock::now() < deadline) {
    ctrl_->process_admin_completions();
    std::this_thread::yield();
  }
  ASSERT_EQ(ctrl_->stats().keep_alive_expired.load(), 1u);
  // The first Keep Alive goes at once, expires one KATO later: far under the admin timeout.
  EXPECT_GE(Clock::now() - start, milliseconds(200));
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_EQ(held.load(), 1);  // one at a time: none sent while one is out
  hold = false;
  const uint64_t resets = ctrl_->stats().resets.load();
  while (ctrl_->stats().resets.load() == resets && Clock::now() < deadline) {
    ctrl_->process_admin_completions();
    std::this_thread::yield();
  }
  EXPECT_EQ(ctrl_->stats().resets.load(), resets + 1);
  EXPECT_TRUE(ctrl_->healthy());
  auto data = pattern(4096, 7);
  write_ok(0, data);
}

// -------------------------------------------------------------------------- writes ---

TEST_F(TcpHostTest, WritesGoInCapsuleUpToIoccszAndByR2tBeyond) {
  start_target();  // IOCCSZ: 8 KiB of in-capsule data
  attach();
  auto a = pattern(4096, 1), b = pattern(8192, 2), c = pattern(8192 + 512, 3);
  write_ok(0, a);
  write_ok(16, b);
  write_ok(64, c);
  const int conn = conn_of(1);
  target_->inspect([&](const st::Log& l) {
    std::vector<const st::Pdu*> writes;
    for (const st::Pdu* p : l.of_type(nt::pdu::kCapsuleCmd, conn)) {
      if (p->sqe().opcode == sn::nvm::kWrite) writes.push_back(p);
    }
    ASSERT_EQ(writes.size(), 3u);
    for (int i = 0; i < 2; ++i) {
      const auto& sgl = writes[i]->sqe().dptr.sgl1;
      EXPECT_EQ(sgl.id, nf::sgl::kIdInCapsule);
      EXPECT_EQ(sgl.length, i == 0 ? 4096u : 8192u);
      EXPECT_EQ(writes[i]->data, i == 0 ? a : b);
      EXPECT_EQ(writes[i]->ch.pdo, nt::kCapsuleCmdHlen);
      EXPECT_TRUE(pdus_for(l.sent, nt::pdu::kR2t, conn, writes[i]->sqe().cid).empty());
    }
    const auto& sgl = writes[2]->sqe().dptr.sgl1;
    EXPECT_EQ(sgl.id, nf::sgl::kIdTransport);
    EXPECT_EQ(sgl.length, c.size());
    EXPECT_TRUE(writes[2]->data.empty());
    EXPECT_EQ(writes[2]->ch.plen, nt::kCapsuleCmdHlen);
    const uint16_t cid = writes[2]->sqe().cid;
    EXPECT_EQ(pdus_for(l.sent, nt::pdu::kR2t, conn, cid).size(), 1u);
    const auto h2c = pdus_for(l.received, nt::pdu::kH2cData, conn, cid);
    ASSERT_EQ(h2c.size(), 1u);
    EXPECT_EQ(h2c[0].data, c);
    EXPECT_TRUE(h2c[0].ch.flags & nt::flags::kLastPdu);
  });
}

TEST_F(TcpHostTest, WritesAnswerEachR2tWithH2cDataSplitAtMaxH2cData) {
  st::TargetOptions o;
  o.ioccsz = 4;  // the SQE only: no in-capsule data at all
  o.maxh2cdata = 4096;
  o.r2t_plan = [](uint32_t len) -> std::vector<std::pair<uint32_t, uint32_t>> {
    if (len == 65536) return {{0, 6000}, {6000, 4096}, {10096, 20000}, {30096, 35440}};
    if (len == 32768) return {{16384, 16384}, {0, 16384}};  // the second half first
    return {{0, len}};
  };
  start_target(o);
  attach();
  EXPECT_EQ(io_queue().max_h2c_data(), 4096u);

  auto big = pattern(65536, 4), half = pattern(32768, 5), small = pattern(512, 6);
  write_ok(0, big);
  write_ok(256, half);
  write_ok(1000, small);  // even one block goes by R2T
  // Vectored: the H2CData PDUs cut across the caller's iovecs.
  auto v = pattern(8192, 7);
  std::vector<uint8_t> p0(v.begin(), v.begin() + 1000), p1(v.begin() + 1000, v.begin() + 4000),
      p2(v.begin() + 4000, v.end());
  const iovec iov[3] = {{p0.data(), p0.size()}, {p1.data(), p1.size()}, {p2.data(), p2.size()}};
  Done& d = done();
  ASSERT_EQ(qp_->writev(*ns_, iov, 3, 512, 16, on_done, &d), 0);
  ASSERT_TRUE(poll_until([&] { return d.done; }));
  EXPECT_FALSE(nvme::cpl_is_error(d.cpl));
  EXPECT_EQ(target_->ram(512 * kBlock, v.size()), v);

  // What went on the wire, per command: each R2T answered by PDUs of at most MAXH2CDATA, in
  // order from R2TO, TTAG echoed, LAST_PDU on the last of each R2T only.
  const int conn = conn_of(1);
  target_->inspect([&](const st::Log& l) {
    std::vector<uint16_t> cids;
    for (const st::Pdu* p : l.of_type(nt::pdu::kCapsuleCmd, conn)) {
      if (p->sqe().opcode == sn::nvm::kWrite) {
        EXPECT_EQ(p->sqe().dptr.sgl1.id, nf::sgl::kIdTransport);
        cids.push_back(p->sqe().cid);
      }
    }
    ASSERT_EQ(cids.size(), 4u);
    for (uint16_t cid : cids) {
      const auto r2ts = pdus_for(l.sent, nt::pdu::kR2t, conn, cid);
      const auto h2c = pdus_for(l.received, nt::pdu::kH2cData, conn, cid);
      std::size_t k = 0;
      for (const st::Pdu& r : r2ts) {
        const auto r2t = r.as<nt::R2t>();
        for (uint32_t off = r2t.r2to; off < r2t.r2to + r2t.r2tl; ++k) {
          ASSERT_LT(k, h2c.size()) << "CID " << cid << ": H2CData missing";
          const auto h = h2c[k].as<nt::H2cData>();
          const uint32_t want = std::min(4096u, r2t.r2to + r2t.r2tl - off);
          EXPECT_EQ(h.ttag, r2t.ttag);
          EXPECT_EQ(h.datao, off);
          EXPECT_EQ(h.datal, want);
          EXPECT_EQ(h2c[k].data.size(), want);
          EXPECT_EQ(bool(h.ch.flags & nt::flags::kLastPdu), off + want == r2t.r2to + r2t.r2tl);
          EXPECT_EQ(h.ch.pdo, nt::kDataHlen);
          EXPECT_EQ(h.ch.plen, nt::kDataHlen + want);
          off += want;
        }
      }
      EXPECT_EQ(k, h2c.size()) << "CID " << cid << ": H2CData nobody asked for";
    }
    EXPECT_EQ(pdus_for(l.sent, nt::pdu::kR2t, conn, cids[0]).size(), 4u);
    EXPECT_EQ(pdus_for(l.received, nt::pdu::kH2cData, conn, cids[0]).size(), 2u + 1 + 5 + 9);
  });
}

// --------------------------------------------------------------------------- reads ---

TEST_F(TcpHostTest, ReadTakesDataInSeveralC2hPdusThenCapsuleResp) {
  st::TargetOptions o;
  o.c2h_chunk = 3000;  // not a multiple of anything the host might assume
  start_target(o);
  attach();
  const auto want = pattern(65536, 8);
  target_->fill_ram(0, want);
  std::vector<uint8_t> buf(65536, 0xee);
  const auto cpl = rw(false, 0, buf.data(), 65536);
  EXPECT_FALSE(nvme::cpl_is_error(cpl));
  EXPECT_EQ(buf, want);
  const int conn = conn_of(1);
  target_->inspect([&](const st::Log& l) {
    const auto c2h = pdus_for(l.sent, nt::pdu::kC2hData, conn, cpl.cid);
    EXPECT_EQ(c2h.size(), (65536u + 2999) / 3000);
    EXPECT_EQ(pdus_for(l.sent, nt::pdu::kCapsuleResp, conn, cpl.cid).size(), 1u);
  });
}

TEST_F(TcpHostTest, ReadCompletesOnC2hSuccessWithoutCapsuleResp) {
  st::TargetOptions o;
  o.c2h_chunk = 4096;
  o.c2h_success = true;
  start_target(o);
  attach();
  const auto want = pattern(8 * 16384, 9);
  target_->fill_ram(0, want);
  // Several at once: completions come from the data stream alone.
  std::vector<std::vector<uint8_t>> bufs(8, std::vector<uint8_t>(16384));
  std::vector<Done*> ds;
  for (int i = 0; i < 8; ++i) ds.push_back(&submit_rw(*qp_, false, i * 32, bufs[i].data(), 16384));
  ASSERT_TRUE(poll_until(
      [&] { return std::all_of(ds.begin(), ds.end(), [](Done* d) { return d->done; }); }));
  const int conn = conn_of(1);
  for (int i = 0; i < 8; ++i) {
    EXPECT_FALSE(nvme::cpl_is_error(ds[i]->cpl));
    EXPECT_EQ(ds[i]->cpl.sqid, 1);
    EXPECT_TRUE(std::equal(bufs[i].begin(), bufs[i].end(), want.begin() + i * 16384));
    target_->inspect([&](const st::Log& l) {
      EXPECT_TRUE(pdus_for(l.sent, nt::pdu::kCapsuleResp, conn, ds[i]->cpl.cid).empty());
      const auto c2h = pdus_for(l.sent, nt::pdu::kC2hData, conn, ds[i]->cpl.cid);
      ASSERT_EQ(c2h.size(), 4u);
      EXPECT_EQ(c2h.back().ch.flags & (nt::flags::kLastPdu | nt::flags::kSuccess),
                nt::flags::kLastPdu | nt::flags::kSuccess);
    });
  }
  EXPECT_EQ(qp_->outstanding(), 0u);
  // A write still completes by CapsuleResp.
  auto w = pattern(2048, 10);
  write_ok(2000, w);
}

TEST_F(TcpHostTest, PduDataOffsetsHonourCpdaAndPaddedC2hPdo) {
  st::TargetOptions o;
  o.cpda = 7;       // H2C data aligned to 32 bytes
  o.c2h_pdo = 128;  // the target pads its C2H data further than HPDA 0 needs
  o.c2h_chunk = 4096;
  o.maxh2cdata = 4096;
  start_target(o);
  attach();
  auto in_capsule = pattern(4096, 11), by_r2t = pattern(16384, 12);
  write_ok(0, in_capsule);
  write_ok(100, by_r2t);
  std::vector<uint8_t> buf(16384);
  EXPECT_FALSE(nvme::cpl_is_error(rw(false, 100, buf.data(), 16384)));
  EXPECT_EQ(buf, by_r2t);
  const int conn = conn_of(1);
  target_->inspect([&](const st::Log& l) {
    int capsules_with_data = 0, h2c = 0;
    for (const st::Pdu* p : l.of_type(nt::pdu::kCapsuleCmd, conn)) {
      if (p->ch.pdo == 0) continue;
      ++capsules_with_data;
      EXPECT_EQ(p->ch.pdo, 96);  // 72 rounded up to 32
      EXPECT_EQ(p->pad, std::vector<uint8_t>(24, 0));
    }
    for (const st::Pdu* p : l.of_type(nt::pdu::kH2cData, conn)) {
      ++h2c;
      EXPECT_EQ(p->ch.pdo, 32);  // 24 rounded up to 32
      EXPECT_EQ(p->pad, std::vector<uint8_t>(8, 0));
    }
    EXPECT_EQ(capsules_with_data, 2);  // the Connect data and the 4 KiB write
    EXPECT_EQ(h2c, 4);
  });
}

TEST_F(TcpHostTest, ReadvScattersC2hDataIntoEveryIovec) {
  st::TargetOptions o;
  o.c2h_chunk = 1500;
  start_target(o);
  attach();
  const auto want = pattern(8192, 13);
  target_->fill_ram(100 * kBlock, want);
  // Each piece sits in a larger buffer: bytes outside the iovecs must stay untouched.
  const std::size_t sizes[3] = {1000, 5000, 2192};
  std::vector<std::vector<uint8_t>> bufs;
  iovec iov[3];
  for (int i = 0; i < 3; ++i) {
    bufs.emplace_back(sizes[i] + 64, 0xa5);
    iov[i] = iovec{bufs[i].data() + 32, sizes[i]};
  }
  Done& d = done();
  ASSERT_EQ(qp_->readv(*ns_, iov, 3, 100, 16, on_done, &d), 0);
  ASSERT_TRUE(poll_until([&] { return d.done; }));
  EXPECT_FALSE(nvme::cpl_is_error(d.cpl));
  std::size_t off = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        std::equal(bufs[i].begin() + 32, bufs[i].begin() + 32 + sizes[i], want.begin() + off))
        << "iovec " << i;
    EXPECT_EQ(std::count(bufs[i].begin(), bufs[i].begin() + 32, 0xa5), 32) << "before iovec " << i;
    EXPECT_EQ(std::count(bufs[i].end() - 32, bufs[i].end(), 0xa5), 32) << "after iovec " << i;
    off += sizes[i];
  }
}

// ------------------------------------------------------------------------- digests ---

TEST_F(TcpHostTest, DigestsNegotiatedInIcRespCoverEveryPdu) {
  st::TargetOptions o;
  o.maxh2cdata = 4096;
  o.c2h_chunk = 5000;
  start_target(o);
  // Asked for through the transport ID (hdgst:1 ddgst:1).
  nvme::TransportId t = trid();
  t.header_digest = t.data_digest = true;
  auto tr = TcpTransport::create(t);
  ASSERT_TRUE(tr) << tr.error().message;
  nvme::ControllerOptions copt;
  copt.hostnqn = kHostNqn;
  auto c = nvme::Controller::attach(std::move(tr).value(), copt);
  ASSERT_TRUE(c) << c.error().message;
  ctrl_ = std::move(c).value();
  auto q = ctrl_->alloc_io_qpair({.queue_size = 32});
  ASSERT_TRUE(q) << q.error().message;
  qp_ = std::move(q).value();
  ns_ = ctrl_->ns(1);
  EXPECT_TRUE(io_queue().header_digest());
  EXPECT_TRUE(io_queue().data_digest());

  auto a = pattern(4096, 14), b = pattern(32768, 15);
  write_ok(0, a);   // in-capsule
  write_ok(64, b);  // R2T, 8 H2CData PDUs
  std::vector<uint8_t> buf(32768);
  EXPECT_FALSE(nvme::cpl_is_error(rw(false, 64, buf.data(), 32768)));
  EXPECT_EQ(buf, b);
  target_->inspect([&](const st::Log& l) {
    int headers = 0, data = 0;
    for (const st::Pdu& p : l.received) {
      if (p.ch.type == nt::pdu::kIcReq) {
        EXPECT_EQ(p.as<nt::IcReq>().dgst, nt::dgst::kHdgstEnable | nt::dgst::kDdgstEnable);
        continue;
      }
      EXPECT_TRUE(p.has_hdgst && p.hdgst_ok);
      ++headers;
      if (p.ch.pdo != 0) {
        EXPECT_TRUE(p.has_ddgst && p.ddgst_ok);
        ++data;
      }
    }
    EXPECT_GT(headers, 10);
    EXPECT_GE(data, 1 + 8 + 1);  // Connect data, the H2CData, the in-capsule write at least
  });
}

TEST_F(TcpHostTest, IcRespGrantingAnUnaskedDigestIsRefused) {
  for (const auto& [asked_hd, asked_dd, granted] :
       {std::tuple{false, false, uint8_t{nt::dgst::kHdgstEnable}},
        std::tuple{false, true, uint8_t{nt::dgst::kHdgstEnable | nt::dgst::kDdgstEnable}}}) {
    st::TargetOptions o;
    o.icresp_dgst = granted;
    start_target(o);
    TcpOptions topt;
    topt.header_digest = asked_hd;
    topt.data_digest = asked_dd;
    auto c = try_attach(topt);
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().message.find("bad ICResp"), std::string::npos) << c.error().message;
    EXPECT_TRUE(target_->wait([](const st::Log& l) {
      return l.conns.size() == 1 && l.conns[0].closed;
    })) << "the host kept the connection";
    target_->inspect(
        [](const st::Log& l) { EXPECT_TRUE(l.of_type(nt::pdu::kCapsuleCmd).empty()); });
    EXPECT_TRUE(target_->violations().empty()) << join(target_->violations());
  }
}

TEST_F(TcpHostTest, BadDataDigestOnC2hDataEndsCommandWithTransientTransportError) {
  start_target();
  TcpOptions topt;
  topt.data_digest = true;
  attach(topt);
  target_->fill_ram(0, pattern(64 * kBlock, 16));
  st::ScriptedTarget* t = target_.get();  // (target_ is reset while its threads stop)
  target_->set_hook([t](st::Conn& c, const st::Command& cmd) {
    if (cmd.qid < 1 || cmd.sqe.opcode != sn::nvm::kRead || cmd.sqe.slba() > 8) return false;
    const auto data = t->ram(cmd.sqe.slba() * kBlock, cmd.sqe.nlb() * kBlock);
    st::Conn::C2h d;
    d.cccid = cmd.sqe.cid;
    d.data = data;
    d.bad_ddgst = true;
    if (cmd.sqe.slba() == 0) {  // then a successful CapsuleResp
      d.flags = nt::flags::kLastPdu;
      c.send_c2h(d);
      c.send_resp(cmd.sqe.cid);
    } else {  // the SUCCESS flag: the C2HData is the completion
      d.flags = nt::flags::kLastPdu | nt::flags::kSuccess;
      c.send_c2h(d);
    }
    return true;
  });
  std::vector<uint8_t> buf(4096);
  for (uint64_t lba : {0, 8}) {
    const auto cpl = rw(false, lba, buf.data(), 4096);
    EXPECT_TRUE(is_status(cpl, sn::sct::kGeneric, sn::sc::kTransientTransportError))
        << "LBA " << lba << ": " << nvme::describe(nvme::Status::from_cqe(cpl.status));
    EXPECT_FALSE(sn::status::dnr(cpl.status));
  }
  // Not a fatal error: the connection goes on.
  EXPECT_FALSE(io_queue().broken());
  const auto cpl = rw(false, 16, buf.data(), 4096);
  EXPECT_FALSE(nvme::cpl_is_error(cpl));
  EXPECT_EQ(buf, target_->ram(16 * kBlock, 4096));
  EXPECT_TRUE(ctrl_->healthy());
}

TEST_F(TcpHostTest, BadHeaderDigestIsAnsweredWithH2cTermReqAndClose) {
  start_target();
  TcpOptions topt;
  topt.header_digest = true;
  attach(topt);
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(cmd.sqe.nlb() * kBlock, 0x11);
    st::Conn::C2h d;
    d.cccid = cmd.sqe.cid;
    d.data = data;
    d.flags = nt::flags::kLastPdu | nt::flags::kSuccess;
    d.bad_hdgst = true;
    c.send_c2h(d);
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kHeaderDigestError, 0, nt::pdu::kC2hData);
}

// ------------------------------------------------------- protocol errors (target) ---

TEST_F(TcpHostTest, UnknownPduTypeIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command&) {
    std::vector<uint8_t> pdu(24, 0);
    pdu[0] = 0x08;  // reserved type
    pdu[2] = 24;
    pdu[4] = 24;
    c.send_raw(pdu);
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, 0, 0x08);  // FEI: PDU-TYPE
}

TEST_F(TcpHostTest, ControllerOnlyPduTypeFromTargetIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    nt::CapsuleCmd pdu{};  // a host's PDU type, sent by the controller
    pdu.ch.type = nt::pdu::kCapsuleCmd;
    pdu.ch.hlen = nt::kCapsuleCmdHlen;
    pdu.ch.plen = nt::kCapsuleCmdHlen;
    pdu.sqe = cmd.sqe;
    std::vector<uint8_t> b(sizeof pdu);
    std::memcpy(b.data(), &pdu, sizeof pdu);
    c.send_raw(b);
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, 0, nt::pdu::kCapsuleCmd);
}

TEST_F(TcpHostTest, WrongHlenIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    nt::CapsuleResp r{};
    r.ch.type = nt::pdu::kCapsuleResp;
    r.ch.hlen = 28;  // CapsuleResp's is 24
    r.ch.plen = 28;
    r.cqe.cid = cmd.sqe.cid;
    std::vector<uint8_t> b(28, 0);
    std::memcpy(b.data(), &r, sizeof r);
    c.send_raw(b);
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, hlen),
               nt::pdu::kCapsuleResp);
}

TEST_F(TcpHostTest, CapsuleRespWithPlenBeyondItsHeaderIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    nt::CapsuleResp r{};
    r.ch.type = nt::pdu::kCapsuleResp;
    r.ch.hlen = nt::kCapsuleRespHlen;
    r.ch.plen = nt::kCapsuleRespHlen + 8;  // a response capsule carries no data
    r.cqe.cid = cmd.sqe.cid;
    r.cqe.sqid = 1;
    std::vector<uint8_t> b(sizeof r + 8, 0);
    std::memcpy(b.data(), &r, sizeof r);
    c.send_raw(b);
  }));
  std::vector<uint8_t> buf(4096);
  Done& d = submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, plen),
               nt::pdu::kCapsuleResp);
  EXPECT_FALSE(d.done) << "a malformed response completed the command";
}

TEST_F(TcpHostTest, C2hDataForAWriteCommandIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kWrite, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(cmd.sqe.nlb() * kBlock, 0x22);
    c.send_c2h({.cccid = cmd.sqe.cid, .data = data, .flags = nt::flags::kLastPdu});
  }));
  auto w = pattern(4096, 17);
  submit_rw(*qp_, true, 0, w.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, offsetof(nt::C2hData, cccid), nt::pdu::kC2hData);
}

TEST_F(TcpHostTest, C2hDataForAnUnknownCidIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(cmd.sqe.nlb() * kBlock, 0x33);
    // Same request index, another generation: no command of the host's.
    c.send_c2h({.cccid = static_cast<uint16_t>(cmd.sqe.cid ^ 0x8000),
                .data = data,
                .flags = nt::flags::kLastPdu});
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, offsetof(nt::C2hData, cccid), nt::pdu::kC2hData);
}

TEST_F(TcpHostTest, C2hDataOffsetBeyondTheTransferIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(512, 0x44);
    c.send_c2h({.cccid = cmd.sqe.cid,
                .datao = cmd.sqe.nlb() * kBlock,
                .data = data,
                .flags = nt::flags::kLastPdu});
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kDataTransferOutOfRange, 0, nt::pdu::kC2hData);
}

TEST_F(TcpHostTest, C2hSuccessWithoutLastPduIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(cmd.sqe.nlb() * kBlock, 0x66);
    c.send_c2h({.cccid = cmd.sqe.cid, .data = data, .flags = nt::flags::kSuccess});
  }));
  std::vector<uint8_t> buf(4096);
  Done& d = submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kInvalidHeaderField, offsetof(nt::CommonHeader, flags),
               nt::pdu::kC2hData);
  EXPECT_FALSE(d.done);
}

TEST_F(TcpHostTest, C2hDataLengthWrappingPastFourGiBIsFatal) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command& cmd) {
    std::vector<uint8_t> data(2048, 0x55);
    c.send_c2h({.cccid = cmd.sqe.cid, .data = data});
    // DATAO 2048 + DATAL wraps to 256 in 32 bits: within the 4 KiB transfer to a careless sum.
    c.send_c2h({.cccid = cmd.sqe.cid, .datao = 2048, .data = data, .datal = 0xfffff900u});
  }));
  std::vector<uint8_t> buf(4096);
  submit_rw(*qp_, false, 0, buf.data(), 4096);
  expect_fatal(*qp_, nt::fes::kDataTransferOutOfRange, 0, nt::pdu::kC2hData);
}

TEST_F(TcpHostTest, R2tBeyondTheTransferIsFatal) {
  st::TargetOptions o;
  o.ioccsz = 4;
  start_target(o);
  attach();
  target_->set_hook(on_io(sn::nvm::kWrite, [](st::Conn& c, const st::Command& cmd) {
    c.send_r2t(cmd.sqe.cid, 1, 0, cmd.sqe.nlb() * kBlock + 512);
  }));
  auto w = pattern(4096, 18);
  submit_rw(*qp_, true, 0, w.data(), 4096);
  expect_fatal(*qp_, nt::fes::kDataTransferOutOfRange, 0, nt::pdu::kR2t);
}

TEST_F(TcpHostTest, R2tWrappingPastFourGiBIsFatal) {
  st::TargetOptions o;
  o.ioccsz = 4;
  start_target(o);
  attach();
  target_->set_hook(on_io(sn::nvm::kWrite, [](st::Conn& c, const st::Command& cmd) {
    c.send_r2t(cmd.sqe.cid, 1, 0xfffff000u, 0x2000);  // R2TO + R2TL wraps to 4 KiB
  }));
  auto w = pattern(8192, 19);
  submit_rw(*qp_, true, 0, w.data(), 8192);
  expect_fatal(*qp_, nt::fes::kDataTransferOutOfRange, 0, nt::pdu::kR2t);
}

TEST_F(TcpHostTest, SecondR2tWhileOneIsActiveExceedsMaxR2t) {
  st::TargetOptions o;
  o.ioccsz = 4;
  start_target(o);
  attach();
  target_->set_hook(on_io(sn::nvm::kWrite, [](st::Conn& c, const st::Command& cmd) {
    // MAXR2T 0: one R2T at a time. Both in one segment, so the second one reaches the host
    // before it sent any data for the first.
    auto b = st::Conn::r2t_bytes(cmd.sqe.cid, 1, 0, 4096, false);
    const auto second = st::Conn::r2t_bytes(cmd.sqe.cid, 2, 4096, 4096, false);
    b.insert(b.end(), second.begin(), second.end());
    c.send_raw(b);
  }));
  auto w = pattern(8192, 20);
  submit_rw(*qp_, true, 0, w.data(), 8192);
  expect_fatal(*qp_, nt::fes::kR2tLimitExceeded, 0, nt::pdu::kR2t);
}

TEST_F(TcpHostTest, C2hTermReqFromTheTargetBreaksTheQueue) {
  start_target();
  attach();
  target_->set_hook(on_io(sn::nvm::kRead, [](st::Conn& c, const st::Command&) {
    c.send_c2h_term(nt::fes::kInvalidHeaderField, 0);
  }));
  std::vector<uint8_t> buf(4096);
  Done& d = submit_rw(*qp_, false, 0, buf.data(), 4096);
  const int conn = conn_of(1);
  ASSERT_TRUE(poll_until([&] {
    return io_queue().broken() &&
           target_->inspect([&](const st::Log& l) { return l.conns[conn].closed; });
  }));
  EXPECT_FALSE(ctrl_->healthy());
  EXPECT_FALSE(d.done);  // ended by the reset that follows, not by the broken connection
  // A TermReq is not answered with one.
  target_->inspect([&](const st::Log& l) { EXPECT_TRUE(l.of_type(nt::pdu::kH2cTermReq).empty()); });
}

// ------------------------------------------------------------------------ recovery ---

}  // namespace
}  // namespace pollux::fabric::tcp::host_testing
