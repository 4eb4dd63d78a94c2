// Figures of the emulated RNIC with a timing profile, in virtual time, through driver/rdma:
// QD1 latencies of SEND/RECV, RDMA WRITE and RDMA READ (the host's software takes no virtual
// time here: these are the NICs, PCIe and network alone), streaming bandwidth at depth 32,
// and the simulation's own speed (NIC messages per host second).
//   bazel run -c opt //tests/rdma:rdma_figures -- [--profile cx5-100g] [--ms 2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/cluster.h"
#include "emulator/rnic/nic_profile.h"

namespace pollux::rdma {
namespace {

constexpr std::size_t kBuf = 8 << 20;

struct Side {
  env::MemoryRegistry registry;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  uint64_t addr(std::size_t off) const { return reinterpret_cast<uintptr_t>(buf->data()) + off; }
  Sge sge(std::size_t off, uint32_t len) const { return Sge{addr(off), len, mr->lkey()}; }
};

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().message.c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

struct Pair {
  std::unique_ptr<emu::rnic::Cluster> cluster;
  Side a, b;
  explicit Pair(const std::optional<emu::rnic::NicProfile>& p) {
    cluster = p ? std::make_unique<emu::rnic::Cluster>(1, *p)
                : std::make_unique<emu::rnic::Cluster>(1);
    open(a);
    open(b);
    connect(*a.qp, b);
    connect(*b.qp, a);
    cluster->run_until_idle();
  }
  void open(Side& s) {
    auto* dev = cluster->add_nic();
    if (dev == nullptr) std::exit(1);
    s.ctx = must(open_rnic(must(env::VfioUserDevice::attach(dev->connect(), s.registry),
                                "attach"),
                           s.registry),
                 "open");
    s.buf = must(env::DmaRegion::create(s.registry, kBuf, env::DmaOptions{false}), "memory");
    s.pd = must(s.ctx->alloc_pd(), "pd");
    s.cq = must(s.ctx->create_cq(2048), "cq");
    s.mr = must(s.ctx->reg_mr(*s.pd, s.buf->data(), kBuf,
                              access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead),
                "mr");
    QpInitAttr init;
    init.send_cq = init.recv_cq = s.cq.get();
    init.cap = QpCap{512, 512, 1, 1};
    s.qp = must(s.ctx->create_qp(*s.pd, init), "qp");
  }
  static void connect(Qp& qp, const Side& peer) {
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.qp_access_flags = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
    int rc = qp.modify(at, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort |
                               qp_attr::kAccessFlags);
    at.qp_state = QpState::kRtr;
    at.dest_address = peer.ctx->port_address();
    at.dest_qp_num = peer.qp->qp_num();
    at.path_mtu = Mtu::k4096;
    at.max_dest_rd_atomic = 16;
    at.min_rnr_timer = 1;
    rc |= qp.modify(at, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                            qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer);
    at.qp_state = QpState::kRts;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 16;
    rc |= qp.modify(at, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout |
                            qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic);
    if (rc != 0) std::exit(1);
  }
  // Steps event by event until the requester's CQ (and, for a SEND, the receiver's) holds a
  // completion; the virtual time each was first seen at.
  std::pair<uint64_t, uint64_t> until_both(bool recv) {
    uint64_t rx = recv ? 0 : 1, tx = 0;
    WorkCompletion wc;
    for (;;) {
      while (cluster->step()) {
      }
      for (auto [cq, at] : {std::pair{b.cq.get(), &rx}, std::pair{a.cq.get(), &tx}}) {
        if (*at != 0) continue;
        if (cq->poll(&wc, 1) == 1) {
          if (wc.status != WcStatus::kSuccess) std::exit(3);
          *at = cluster->now_ns();
        }
      }
      if (rx != 0 && tx != 0) return {rx, tx};
      const uint64_t next = cluster->next_event_ns();
      if (next == UINT64_MAX) std::exit(2);
      cluster->step_at(next);
    }
  }
};

SendWr wr(WrOpcode op, Sge* sge, uint64_t raddr, uint32_t rkey) {
  SendWr w;
  w.opcode = op;
  w.sg_list = sge;
  w.num_sge = 1;
  w.send_flags = send_flag::kSignaled;
  w.remote_addr = raddr;
  w.rkey = rkey;
  return w;
}

struct Latency {
  double one_way_ns = 0;  // SEND: until the receiver's completion
  double done_ns = 0;     // until the requester's completion
};

// QD 1: one operation at a time, `n` times; the mean of each.
Latency latency(Pair& p, WrOpcode op, uint32_t len, int n) {
  Sge tx = p.a.sge(0, len);
  Sge rx = p.b.sge(0, len);
  SendWr w = wr(op, &tx, p.b.addr(1 << 20), p.b.mr->rkey());
  RecvWr r;
  r.sg_list = &rx;
  r.num_sge = 1;
  Latency l;
  for (int i = 0; i < n; ++i) {
    const uint64_t t0 = p.cluster->now_ns();
    if (op == WrOpcode::kSend) p.b.qp->post_recv(r, nullptr);
    p.a.qp->post_send(w, nullptr);
    const auto [rx, tx] = p.until_both(op == WrOpcode::kSend);
    l.one_way_ns += static_cast<double>(rx - t0);
    l.done_ns += static_cast<double>(tx - t0);
    p.cluster->run_until_idle();
  }
  l.one_way_ns /= n;
  l.done_ns /= n;
  return l;
}

struct Stream {
  double gbps = 0;           // payload, virtual time
  double msgs_per_host_s = 0;
  double virtual_ms = 0;
  uint64_t messages = 0;
};

// `depth` operations of `len` bytes in flight for `ms` of virtual time after a warm-up.
Stream stream(Pair& p, WrOpcode op, uint32_t len, int depth, double ms) {
  Sge tx = p.a.sge(0, len);
  Sge rx = p.b.sge(0, len);
  SendWr w = wr(op, &tx, p.b.addr(1 << 20), p.b.mr->rkey());
  RecvWr r;
  r.sg_list = &rx;
  r.num_sge = 1;
  if (op == WrOpcode::kSend)
    for (int i = 0; i < 512; ++i) p.b.qp->post_recv(r, nullptr);
  for (int i = 0; i < depth; ++i) p.a.qp->post_send(w, nullptr);
  emu::rnic::Cluster& c = *p.cluster;
  const uint64_t warm = c.now_ns() + 100'000;
  const uint64_t end = warm + static_cast<uint64_t>(ms * 1e6);
  uint64_t done = 0, at_warm = 0;
  WorkCompletion wc[64];
  const auto h0 = std::chrono::steady_clock::now();
  while (c.now_ns() < end) {
    while (c.step()) {
    }
    const int n = p.a.cq->poll(wc, 64);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) std::exit(3);
      p.a.qp->post_send(w, nullptr);
    }
    if (op == WrOpcode::kSend) {
      const int m = p.b.cq->poll(wc, 64);
      for (int i = 0; i < m; ++i) p.b.qp->post_recv(r, nullptr);
    }
    done += n;
    if (c.now_ns() < warm) at_warm = done;
    c.step_at(std::min(c.next_event_ns(), end));
  }
  const double host_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
  Stream s;
  s.messages = done - at_warm;
  s.virtual_ms = ms;
  s.gbps = static_cast<double>(s.messages) * len * 8 / (ms * 1e6);
  s.msgs_per_host_s = static_cast<double>(done) / host_s;
  return s;
}

}  // namespace
}  // namespace pollux::rdma

int main(int argc, char** argv) {
  using namespace pollux::rdma;
  std::vector<std::string> profiles = {"cx5-100g", "cx4lx-25g"};
  double ms = 2;
  const bool timed_only = std::getenv("RDMA_FIGURES_TIMED_ONLY") != nullptr;  // for profiling
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--profile") == 0) profiles = {argv[i + 1]};
    if (std::strcmp(argv[i], "--ms") == 0) ms = std::atof(argv[i + 1]);
  }
  for (const std::string& name : profiles) {
    auto prof = pollux::emu::rnic::load_nic_profile(name);
    if (!prof) {
      std::fprintf(stderr, "%s\n", prof.error().c_str());
      return 1;
    }
    std::printf("## %s: %s\n\n", name.c_str(), prof.value().description.c_str());
    std::printf("| QD 1, virtual time | one way (receiver's CQE) | requester's CQE |\n"
                "|---|---|---|\n");
    struct L {
      const char* what;
      WrOpcode op;
      uint32_t len;
    };
    for (const L& l : {L{"SEND/RECV 64 B", WrOpcode::kSend, 64},
                       L{"SEND/RECV 4 KiB", WrOpcode::kSend, 4096},
                       L{"RDMA WRITE 4 KiB", WrOpcode::kRdmaWrite, 4096},
                       L{"RDMA READ 64 B", WrOpcode::kRdmaRead, 64},
                       L{"RDMA READ 4 KiB", WrOpcode::kRdmaRead, 4096}}) {
      Pair p(prof.value());
      const Latency r = latency(p, l.op, l.len, 200);
      if (l.op == WrOpcode::kSend)
        std::printf("| %s | %.3f µs | %.3f µs |\n", l.what, r.one_way_ns / 1000,
                    r.done_ns / 1000);
      else
        std::printf("| %s | — | %.3f µs |\n", l.what, r.done_ns / 1000);
    }
    std::printf("\n| stream, depth 32, %.0f ms virtual | payload Gb/s | NIC messages per host "
                "second (timed) | same stream, functional NICs |\n|---|---|---|---|\n",
                ms);
    struct S {
      const char* what;
      WrOpcode op;
      uint32_t len;
    };
    for (const S& s : {S{"RDMA WRITE 4 KiB", WrOpcode::kRdmaWrite, 4096},
                       S{"RDMA READ 4 KiB", WrOpcode::kRdmaRead, 4096},
                       S{"SEND/RECV 4 KiB", WrOpcode::kSend, 4096},
                       S{"RDMA WRITE 64 KiB", WrOpcode::kRdmaWrite, 65536}}) {
      Pair timed(prof.value());
      const Stream t = stream(timed, s.op, s.len, 32, ms);
      Stream f;
      if (!timed_only) {
        Pair functional(std::nullopt);
        f = stream(functional, s.op, s.len, 32, ms);
      }
      std::printf("| %s | %.2f | %.0f k | %.0f k |\n", s.what, t.gbps, t.msgs_per_host_s / 1e3,
                  f.msgs_per_host_s / 1e3);
    }
    std::printf("\n");
  }
  return 0;
}
