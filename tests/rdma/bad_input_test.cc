// Randomised bad input through the verbs API: malformed work requests (bad opcodes, SGE
// counts, null lists, bad keys, addresses and lengths, unknown flags), modify_qp with random
// masks, states and values, polls with bad arguments, all in random QP states. Every call
// must return 0 or the error verbs give (-EINVAL, -ENOMEM), every completion must name a
// posted WR with a defined status, nothing may crash, and afterwards the NICs still work.
#include <cstdlib>
#include <random>
#include <set>

#include "tests/rdma/rdma_test_util.h"

namespace pollux::rdma::testing {
namespace {

// Posted WRs whose completion is owed (signaled sends, receives) and those that may complete
// (unsignaled sends complete only in error; a move to RESET discards without completing).
struct Posted {
  std::set<uint64_t> must, may;
  std::set<uint64_t> srq;  // receives on an SRQ: no QP's error flushes them; they stay
};

class BadInput : public RdmaTest {
 protected:
  static uint64_t seed() {
    const char* env = std::getenv("POLLUX_SEED");
    return env != nullptr ? std::strtoull(env, nullptr, 0) : 0xbad;
  }
  BadInput() : RdmaTest(seed()) {}

  uint64_t random_addr(std::mt19937_64& rng, Host& h) {
    switch (rng() % 4) {
      case 0:
        return h.addr(rng() % kBufBytes);
      case 1:
        return h.addr(kBufBytes - 1 - rng() % 64);  // near the end
      case 2:
        return rng();
      default:
        return 0;
    }
  }
  uint32_t random_len(std::mt19937_64& rng) {
    switch (rng() % 5) {
      case 0:
        return 0;
      case 1:
        return static_cast<uint32_t>(rng() % 64);
      case 2:
        return static_cast<uint32_t>(rng() % 20000);
      case 3:
        return static_cast<uint32_t>(rng() % (2 * kBufBytes));
      default:
        return static_cast<uint32_t>(rng());
    }
  }
  uint32_t random_key(std::mt19937_64& rng, Host& h) {
    switch (rng() % 4) {
      case 0:
      case 1:
        return h.mr->lkey();
      case 2:
        return h.mr->lkey() ^ (1u << (rng() % 32));
      default:
        return static_cast<uint32_t>(rng());
    }
  }

  void random_call(std::mt19937_64& rng, Host& h, Qp& qp, Host& peer, Qp& peer_qp, Srq* srq,
                   Posted& posted, uint64_t& next_id) {
    Sge sges[10];
    for (Sge& s : sges) s = Sge{random_addr(rng, h), random_len(rng), random_key(rng, h)};
    const int nsge = static_cast<int>(rng() % 11) - 2;  // -2 .. 8
    const Sge* list = rng() % 16 == 0 ? nullptr : sges;
    switch (rng() % 6) {
      case 0:
      case 1: {
        SendWr wr[3];
        const int chain = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < chain; ++i) {
          wr[i].wr_id = next_id++;
          wr[i].opcode = static_cast<WrOpcode>(rng() % 8);
          wr[i].sg_list = list;
          wr[i].num_sge = nsge;
          wr[i].send_flags = static_cast<uint32_t>(rng() % 16);
          wr[i].imm_data = static_cast<uint32_t>(rng());
          wr[i].remote_addr = random_addr(rng, peer);
          wr[i].rkey = random_key(rng, peer);
          wr[i].next = i + 1 < chain ? &wr[i + 1] : nullptr;
        }
        const SendWr* bad = nullptr;
        const int rc = qp.post_send(wr[0], &bad);
        ASSERT_TRUE(rc == 0 || rc == -EINVAL || rc == -ENOMEM) << rc;
        for (int i = 0; i < chain && &wr[i] != bad; ++i)
          ((wr[i].send_flags & send_flag::kSignaled) ? posted.must : posted.may)
              .insert(wr[i].wr_id);
        if (rc != 0) {
          ASSERT_NE(bad, nullptr);
        }
        break;
      }
      case 2: {
        RecvWr wr;
        wr.wr_id = next_id++;
        wr.sg_list = list;
        wr.num_sge = nsge;
        const RecvWr* bad = nullptr;
        const bool to_srq = srq != nullptr && rng() % 2;
        const int rc = to_srq ? srq->post_recv(wr, &bad) : qp.post_recv(wr, &bad);
        ASSERT_TRUE(rc == 0 || rc == -EINVAL || rc == -ENOMEM) << rc;
        if (rc == 0) (to_srq ? posted.srq : posted.must).insert(wr.wr_id);
        break;
      }
      case 3: {
        QpAttr a;
        a.qp_state = static_cast<QpState>(rng() % 9);
        a.cur_qp_state = static_cast<QpState>(rng() % 9);
        a.path_mtu = static_cast<Mtu>(rng() % 8);
        a.qp_access_flags = static_cast<uint32_t>(rng() % 32);
        a.port_num = static_cast<uint8_t>(rng() % 3);
        a.pkey_index = static_cast<uint16_t>(rng() % 2);
        a.dest_address = rng() % 2 ? peer.ctx->port_address() : rng();
        a.dest_qp_num = rng() % 2 ? peer_qp.qp_num() : static_cast<uint32_t>(rng());
        a.rq_psn = static_cast<uint32_t>(rng() % (1u << 25));
        a.sq_psn = static_cast<uint32_t>(rng() % (1u << 25));
        a.timeout = static_cast<uint8_t>(rng() % 40);
        a.retry_cnt = static_cast<uint8_t>(rng() % 10);
        a.rnr_retry = static_cast<uint8_t>(rng() % 10);
        a.min_rnr_timer = static_cast<uint8_t>(rng() % 40);
        a.max_rd_atomic = static_cast<uint8_t>(rng() % 20);
        a.max_dest_rd_atomic = static_cast<uint8_t>(rng() % 20);
        const uint32_t mask = static_cast<uint32_t>(rng() % (1u << 22));
        const int rc = qp.modify(a, mask);
        ASSERT_TRUE(rc == 0 || rc == -EINVAL) << rc;
        if (rc == 0 && (mask & qp_attr::kState) && a.qp_state == QpState::kReset) {
          // RESET drops outstanding work without completions (those already in the CQ stay).
          posted.may.insert(posted.must.begin(), posted.must.end());
          posted.must.clear();
        }
        break;
      }
      case 4: {
        WorkCompletion wc[8];
        const int n = static_cast<int>(rng() % 10) - 1;
        const bool null_wc = rng() % 8 == 0;
        const int got = h.cq->poll(null_wc ? nullptr : wc, n);
        if (n < 0 || (null_wc && n > 0)) {
          ASSERT_EQ(got, -EINVAL);
        } else {
          ASSERT_GE(got, 0);
          for (int i = 0; i < got; ++i) check(wc[i], posted);
        }
        break;
      }
      default:
        cluster_.run_for(rng() % 2'000'000);
        break;
    }
  }

  void check(const WorkCompletion& w, Posted& posted) {
    const std::size_t from_srq = posted.srq.erase(w.wr_id);
    srq_completions_ += from_srq;
    ASSERT_EQ(posted.must.erase(w.wr_id) + posted.may.erase(w.wr_id) + from_srq, 1u)
        << "completion for a WR never posted (or twice): " << w.wr_id;
    const auto s = static_cast<int>(w.status);
    ASSERT_TRUE(s <= 13 || s == 19 || s == 21) << s;
  }

  void drain_checked(Host& h, Posted& posted) {
    cluster_.run_until_idle(60'000'000'000ull);
    WorkCompletion wc[16];
    for (int n; (n = h.cq->poll(wc, 16)) > 0;)
      for (int i = 0; i < n; ++i) check(wc[i], posted);
  }

  uint64_t srq_completions_ = 0;

  void reset_and_connect(const QpOptions& o) {
    QpAttr r;
    r.qp_state = QpState::kReset;
    ASSERT_EQ(a_.qp->modify(r, qp_attr::kState), 0);
    ASSERT_EQ(b_.qp->modify(r, qp_attr::kState), 0);
    connect(a_, *a_.qp, b_, *b_.qp, o);
    connect(b_, *b_.qp, a_, *a_.qp, o);
  }
};

TEST_F(BadInput, RandomCallsGetVerbsErrorsNeverACrash) {
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed()));
  QpOptions o;
  o.timeout = 6;
  o.retry_cnt = 2;
  o.rnr_retry = 2;
  o.cap = QpCap{16, 16, 6, 6};
  open_pair(o);
  std::mt19937_64 rng(seed());
  Posted posted_a, posted_b;
  uint64_t next_id = 1;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 100; ++i) {
      const bool on_a = rng() % 2;
      Host& h = on_a ? a_ : b_;
      Host& peer = on_a ? b_ : a_;
      random_call(rng, h, *h.qp, peer, *peer.qp, nullptr, on_a ? posted_a : posted_b, next_id);
      if (HasFatalFailure()) return;
    }
    // Whatever the QPs went through, moving them to Error completes everything posted.
    QpAttr e;
    e.qp_state = QpState::kErr;
    ASSERT_EQ(a_.qp->modify(e, qp_attr::kState), 0);
    ASSERT_EQ(b_.qp->modify(e, qp_attr::kState), 0);
    drain_checked(a_, posted_a);
    drain_checked(b_, posted_b);
    EXPECT_TRUE(posted_a.must.empty())
        << posted_a.must.size() << " WRs on A never completed (round " << round << ")";
    EXPECT_TRUE(posted_b.must.empty())
        << posted_b.must.size() << " WRs on B never completed (round " << round << ")";
    posted_a = Posted{};
    posted_b = Posted{};
    reset_and_connect(o);
    if (HasFatalFailure()) return;
  }
  // The NICs still do real work.
  fill(a_.at(0), 4096, 1);
  ASSERT_EQ(post_recv(*b_.qp, {b_.sge(8192, 4096)}, 1), 0);
  ASSERT_EQ(post_send(*a_.qp, WrOpcode::kSend, {a_.sge(0, 4096)}, 2), 0);
  auto rx = drain(b_);
  ASSERT_EQ(rx.size(), 1u);
  EXPECT_EQ(rx[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a_.at(0), b_.at(8192), 4096), 0);
  std::printf("A: %llu commands (%llu refused), %llu packets sent\n",
              (unsigned long long)a_.device->nic().counters().commands,
              (unsigned long long)a_.device->nic().counters().command_errors,
              (unsigned long long)a_.device->nic().counters().tx_packets);
}

// The same with a second pair of QPs, B's on a shared receive queue that the random calls
// also post to. SRQ receives survive QP errors and resets; each completes at most once.
TEST_F(BadInput, RandomCallsOnQpsSharingAnSrq) {
  std::printf("seed %llu (POLLUX_SEED replays)\n", static_cast<unsigned long long>(seed()));
  QpOptions o;
  o.timeout = 6;
  o.retry_cnt = 2;
  o.rnr_retry = 2;
  o.cap = QpCap{16, 16, 6, 6};
  open_pair(o);
  auto srq = b_.ctx->create_srq(*b_.pd, 16, 6);
  ASSERT_TRUE(srq.ok());
  auto a2 = make_qp(a_, o);
  auto b2 = make_qp(b_, o, srq.value().get());
  auto bring_up = [&] {
    QpAttr r;
    r.qp_state = QpState::kReset;
    for (Qp* q : {a_.qp.get(), b_.qp.get(), a2.get(), b2.get()})
      ASSERT_EQ(q->modify(r, qp_attr::kState), 0);
    connect(a_, *a_.qp, b_, *b_.qp, o);
    connect(b_, *b_.qp, a_, *a_.qp, o);
    connect(a_, *a2, b_, *b2, o);
    connect(b_, *b2, a_, *a2, o);
  };
  bring_up();
  std::mt19937_64 rng(seed() ^ 0x5a5a);
  Posted posted_a, posted_b;
  uint64_t next_id = 1;
  for (int round = 0; round < 30; ++round) {
    for (int i = 0; i < 100; ++i) {
      switch (rng() % 4) {
        case 0:
          random_call(rng, a_, *a_.qp, b_, *b_.qp, nullptr, posted_a, next_id);
          break;
        case 1:
          random_call(rng, b_, *b_.qp, a_, *a_.qp, nullptr, posted_b, next_id);
          break;
        case 2:
          random_call(rng, a_, *a2, b_, *b2, nullptr, posted_a, next_id);
          break;
        default:
          random_call(rng, b_, *b2, a_, *a2, srq.value().get(), posted_b, next_id);
          break;
      }
      if (HasFatalFailure()) return;
    }
    // A few well-formed SENDs into the SRQ, whatever state the QPs are in by now.
    for (int k = 0; k < 3; ++k) {
      const uint64_t id = next_id++;
      const int rc = post_send(*a2, WrOpcode::kSend, {a_.sge(0, 16)}, id);
      ASSERT_TRUE(rc == 0 || rc == -EINVAL || rc == -ENOMEM) << rc;
      if (rc == 0) posted_a.must.insert(id);
    }
    cluster_.run_until_idle(60'000'000'000ull);
    QpAttr e;
    e.qp_state = QpState::kErr;
    for (Qp* q : {a_.qp.get(), b_.qp.get(), a2.get(), b2.get()})
      ASSERT_EQ(q->modify(e, qp_attr::kState), 0);
    drain_checked(a_, posted_a);
    drain_checked(b_, posted_b);
    EXPECT_TRUE(posted_a.must.empty()) << posted_a.must.size() << " WRs on A never completed";
    EXPECT_TRUE(posted_b.must.empty()) << posted_b.must.size() << " WRs on B never completed";
    posted_a = Posted{{}, {}, posted_a.srq};
    posted_b = Posted{{}, {}, posted_b.srq};
    bring_up();
    if (HasFatalFailure()) return;
  }
  // The SRQ still feeds B's QP: a good SEND lands in one of its receives (or a fresh one).
  Sge s = b_.sge(900000, 8192);
  RecvWr wr;
  wr.wr_id = 424242;
  wr.sg_list = &s;
  wr.num_sge = 1;
  posted_b.srq.insert(wr.wr_id);
  const int rc = srq.value()->post_recv(wr, nullptr);
  ASSERT_TRUE(rc == 0 || rc == -ENOMEM) << rc;
  ASSERT_EQ(post_send(*a2, WrOpcode::kSend, {a_.sge(0, 0)}, 7), 0);
  cluster_.run_until_idle(60'000'000'000ull);
  WorkCompletion wc[16];
  int n = a_.cq->poll(wc, 16);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(wc[0].wr_id, 7u);
  // An SRQ WQE left over may have bad SGEs (then the SEND fails with a remote error), but the
  // NIC answered and nothing crashed; a valid one gives success.
  const auto st = wc[0].status;
  drain_checked(b_, posted_b);  // the receive it used (and any flushes) are checked too
  EXPECT_TRUE(st == WcStatus::kSuccess || st == WcStatus::kRemOpErr ||
              st == WcStatus::kRemInvReqErr)
      << to_string(st);
  std::printf("SRQ receives completed: %llu\n", static_cast<unsigned long long>(srq_completions_));
  EXPECT_GT(srq_completions_, 0u);
  a2.reset();
  b2.reset();
}

}  // namespace
}  // namespace pollux::rdma::testing
