// The NVMe/TCP host transport's recovery (host_test_fixture.h): resets that reconnect every
// queue, refused and broken connects, bad transport IDs, connect timeouts.
#include "fabric/tcp/host_test_fixture.h"

namespace pollux::fabric::tcp::host_testing {
namespace {

struct Retry {
  nvme::Qpair* qp = nullptr;
  const nvme::Namespace* ns = nullptr;
  Done first, second;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
};

TEST_F(TcpHostTest, ResetReconnectsEveryQueueAfterTheTargetDropsOne) {
  start_target();
  attach();
  const auto want = pattern(64 * kBlock, 21);
  target_->fill_ram(0, want);
  auto hold = std::make_shared<std::atomic<bool>>(true);  // the hook outlives this body
  target_->set_hook([hold](st::Conn&, const st::Command& cmd) {
    return hold->load() && cmd.qid == 1 && cmd.sqe.opcode == sn::nvm::kRead;
  });
  const auto [old_admin, old_io, old_cntlid] = target_->inspect([](const st::Log& l) {
    return std::tuple{l.conn_of_qid(0), l.conn_of_qid(1), l.conns[l.conn_of_qid(0)].cntlid};
  });

  // Three reads the target holds; one whose callback retries at once (what the retry submits
  // must wait for the reconnected queue's Connect).
  std::vector<std::vector<uint8_t>> bufs(3, std::vector<uint8_t>(4096));
  std::vector<Done*> held;
  for (int i = 0; i < 3; ++i) held.push_back(&submit_rw(*qp_, false, i * 8, bufs[i].data(), 4096));
  Retry retry;
  retry.qp = qp_.get();
  retry.ns = ns_;
  ASSERT_EQ(qp_->read(
                *ns_, retry.buf.data(), 24, 8,
                [](void* ctx, const sn::CompletionEntry& cpl) {
                  auto* r = static_cast<Retry*>(ctx);
                  r->first.cpl = cpl;
                  r->first.done = true;
                  if (nvme::Status::from_cqe(cpl.status).retriable()) {
                    EXPECT_EQ(r->qp->read(*r->ns, r->buf.data(), 24, 8, on_done, &r->second), 0);
                  }
                },
                &retry),
            0);
  ASSERT_TRUE(poll_until([&] {
    return target_->inspect([&](const st::Log& l) {
      int reads = 0;
      for (const auto& c : l.commands(old_io)) reads += c.opcode == sn::nvm::kRead;
      return reads == 4;
    });
  }));

  target_->close_connection(old_io);
  ASSERT_TRUE(poll_until([&] { return io_queue().broken(); }));
  EXPECT_FALSE(ctrl_->healthy());
  *hold = false;

  const std::size_t conns_before =
      target_->inspect([](const st::Log& l) { return l.conns.size(); });
  ASSERT_EQ(ctrl_->reset(), 0);
  EXPECT_TRUE(ctrl_->healthy());

  // What the device held ended retriable (it may or may not have executed it).
  for (Done* d : held) {
    ASSERT_TRUE(d->done);
    EXPECT_TRUE(is_status(d->cpl, sn::sct::kGeneric, sn::sc::kAbortedSqDeletion));
    EXPECT_FALSE(sn::status::dnr(d->cpl.status));
  }
  ASSERT_TRUE(retry.first.done);
  EXPECT_TRUE(nvme::Status::from_cqe(retry.first.cpl.status).retriable());

  // The host left the old association's connections.
  EXPECT_TRUE(target_->wait(
      [&](const st::Log& l) { return l.conns[old_admin].closed && l.conns[old_io].closed; }));
  target_->inspect([&](const st::Log& l) {
    // A new connection per queue, each opened with ICReq and Connect before anything else.
    ASSERT_EQ(l.conns.size(), conns_before + 2);
    const st::ConnInfo& admin = l.conns[conns_before];
    const st::ConnInfo& io = l.conns[conns_before + 1];
    EXPECT_TRUE(admin.icreq_seen);
    EXPECT_TRUE(io.icreq_seen);
    EXPECT_EQ(admin.qid, 0);
    EXPECT_EQ(admin.connect_data.cntlid, nf::connect::kCntlidDynamic);
    EXPECT_NE(admin.cntlid, old_cntlid);
    EXPECT_EQ(io.qid, 1);
    EXPECT_EQ(io.connect_data.cntlid, admin.cntlid);
    for (std::size_t i = conns_before; i < l.conns.size(); ++i) {
      const auto cmds = l.commands(static_cast<int>(i));
      ASSERT_FALSE(cmds.empty());
      EXPECT_EQ(cmds[0].opcode, nf::kOpcodeFabrics);
      EXPECT_EQ(reinterpret_cast<const uint8_t*>(&cmds[0])[4], nf::fctype::kConnect);
    }
    // The old controller was disabled first, over the admin connection that still held.
    bool disabled = false;
    for (const auto& c : l.commands(old_admin)) {
      nf::PropertySetCommand s;
      std::memcpy(&s, &c, sizeof s);
      if (s.opcode == nf::kOpcodeFabrics && s.fctype == nf::fctype::kPropertySet &&
          s.ofst == sn::reg::kCc && !(s.value & sn::cc::kEn)) {
        disabled = true;
      }
    }
    EXPECT_TRUE(disabled);
  });

  // The retry went out on the new connection, after its Connect; new I/O works.
  ASSERT_TRUE(poll_until([&] { return retry.second.done; }));
  EXPECT_FALSE(nvme::cpl_is_error(retry.second.cpl));
  EXPECT_TRUE(std::equal(retry.buf.begin(), retry.buf.end(), want.begin() + 24 * kBlock));
  std::vector<uint8_t> buf(8192);
  EXPECT_FALSE(nvme::cpl_is_error(rw(false, 32, buf.data(), 8192)));
  EXPECT_TRUE(std::equal(buf.begin(), buf.end(), want.begin() + 32 * kBlock));
  auto w = pattern(16384, 22);
  write_ok(200, w);
}

// ------------------------------------------------------------- bad transport IDs ---

// A reset whose admin Connect the target refused leaves the admin queue open but unconnected
// (paused). The next reset must connect again at once: a Property Get on that queue would never
// go out and only wait out the admin timeout, with the reset's thread blocked (outside testing:
// 5 ms stalls of every I/O after digest errors). The timeout here is a minute: waiting on the
// dead queue would show as a minute-long reset.
TEST_F(TcpHostTest, AResetAfterARefusedAdminConnectConnectsAgainAtOnce) {
  start_target();
  nvme::ControllerOptions copt;
  copt.admin_timeout_us = 60'000'000;
  attach({}, copt);
  auto refuse = std::make_shared<std::atomic<bool>>(true);  // the hook outlives this body
  auto refused_conn = std::make_shared<std::atomic<int>>(-1);
  target_->set_hook([refuse, refused_conn](st::Conn& c, const st::Command& cmd) {
    if (!refuse->load() || !cmd.is_connect()) return false;
    nf::ConnectCommand connect;
    std::memcpy(&connect, &cmd.sqe, sizeof connect);
    if (connect.qid != 0) return false;
    refused_conn->store(c.id());
    c.send_resp(cmd.sqe.cid,
                sn::status::make(sn::sct::kCommandSpecific, nf::sc::kConnectInvalidParameters));
    return true;
  });
  const int old_admin = conn_of(0);
  target_->close_connection(old_admin);
  ASSERT_TRUE(poll_until([&] {
    ctrl_->process_admin_completions();
    return !ctrl_->healthy();
  }));
  EXPECT_NE(ctrl_->reset(), 0);  // connected again, but the Connect is refused
  const int refused = refused_conn->load();
  ASSERT_GE(refused, 0);
  EXPECT_NE(refused, old_admin);
  refuse->store(false);
  const auto t0 = Clock::now();
  ASSERT_EQ(ctrl_->reset(), 0);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30)) << "the reset waited on the dead queue";
  // Nothing was sent on the refused connection after its Connect, and I/O works again.
  target_->inspect([&](const st::Log& l) {
    const auto cmds = l.commands(refused);
    ASSERT_EQ(cmds.size(), 1u);
  });
  EXPECT_NE(conn_of(0), refused);
  auto data = pattern(8 * kBlock, 5);
  write_ok(0, data);
}

// An admin command whose connection breaks under it ends as soon as the break is seen, not at
// the next health check (a reset's reconnect waits on it). The health check here is a minute.
TEST_F(TcpHostTest, AnAdminCommandEndsAsSoonAsItsConnectionBreaks) {
  start_target();
  nvme::ControllerOptions copt;
  copt.admin_health_check_us = 60'000'000;
  copt.admin_timeout_us = 120'000'000;
  attach({}, copt);
  auto drop = std::make_shared<std::atomic<bool>>(true);
  target_->set_hook([drop](st::Conn& c, const st::Command& cmd) {
    if (!drop->load() || cmd.qid != 0 || cmd.sqe.opcode != sn::admin::kGetFeatures) return false;
    c.send_c2h_term(nt::fes::kInvalidHeaderField, 0);
    c.close();
    return true;
  });
  const auto t0 = Clock::now();
  sn::SubmissionEntry get{};
  get.opcode = sn::admin::kGetFeatures;
  get.cdw10 = sn::feature::kNumberOfQueues;
  EXPECT_FALSE(ctrl_->admin_sync(get));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30)) << "waited for the health check";
  drop->store(false);
  EXPECT_FALSE(ctrl_->healthy());
  ASSERT_EQ(ctrl_->reset(), 0);
  auto data = pattern(8 * kBlock, 6);
  write_ok(8, data);
}

TEST_F(TcpHostTest, TransportIdWithoutSubnqnOrTraddrIsRefused) {
  nvme::TransportId t;
  t.trtype = nvme::TransportType::kTcp;
  t.traddr = "127.0.0.1";
  t.trsvcid = "4420";
  auto r = TcpTransport::create(t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, -EINVAL);
  EXPECT_NE(r.error().message.find("subnqn"), std::string::npos) << r.error().message;
  // The same through the transport registry (nvme::connect), from text.
  auto parsed = nvme::parse_transport_id("trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:4420");
  ASSERT_TRUE(parsed) << parsed.error().message;
  auto c = nvme::connect(*parsed);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("subnqn"), std::string::npos) << c.error().message;

  t.subnqn = "nqn.2026-01.io.pollux:x";
  t.traddr.clear();
  r = TcpTransport::create(t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, -EINVAL);
  EXPECT_NE(r.error().message.find("traddr"), std::string::npos) << r.error().message;
  c = nvme::connect(t);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("traddr"), std::string::npos) << c.error().message;
}

TEST_F(TcpHostTest, PortWithoutListenerFailsWithinTheConnectTimeout) {
  // A bound socket that does not listen: its port refuses connections, and nothing else can
  // take it meanwhile.
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint16_t port = ntohs(a.sin_port);
  TcpOptions topt;
  topt.connect_timeout_ms = 3000;
  const auto start = Clock::now();
  auto c = try_attach(topt, {}, port);
  const auto took = Clock::now() - start;
  ::close(s);
  ASSERT_FALSE(c);
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
  EXPECT_NE(m.find("cannot connect"), std::string::npos) << m;
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
  EXPECT_LT(took, milliseconds(3000));
}

TEST_F(TcpHostTest, MissingIcRespTimesOut) {
  st::TargetOptions o;
  o.send_icresp = false;
  start_target(o);
  TcpOptions topt;
  topt.connect_timeout_ms = 300;
  const auto start = Clock::now();
  auto c = try_attach(topt);
  const auto took = Clock::now() - start;
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("no ICResp within 300 ms"), std::string::npos)
      << c.error().message;
  EXPECT_GE(took, milliseconds(290));  // poll() counts whole milliseconds
  EXPECT_LT(took, milliseconds(3000));
  // The host gave up on the connection.
  EXPECT_TRUE(
      target_->wait([](const st::Log& l) { return l.conns.size() == 1 && l.conns[0].closed; }));
  target_->inspect([](const st::Log& l) { EXPECT_TRUE(l.conns[0].icreq_seen); });
}

}  // namespace
}  // namespace pollux::fabric::tcp::host_testing
