// Simulation speed of the emulated RDMA path: how many RDMA messages per second of host time
// the driver (post, poll) plus two emulated NICs (fetch, segment, transmit, receive, ACK,
// complete) and the wire sustain, in virtual time on one thread. Not a model of a real NIC's
// speed: the NIC has no timing yet.
//   bazel run -c opt //tests/rdma:rdma_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/cluster.h"

namespace pollux::rdma {
namespace {

constexpr std::size_t kBuf = 4 << 20;

struct Side {
  env::MemoryRegistry registry;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  uint64_t addr(std::size_t off) const { return reinterpret_cast<uintptr_t>(buf->data()) + off; }
};

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().message.c_str());
    std::abort();
  }
  return std::move(r).value();
}

void open_side(emu::rnic::Cluster& cluster, Side& s) {
  auto* dev = cluster.add_nic();
  if (dev == nullptr) std::abort();
  s.ctx = must(open_rnic(must(env::VfioUserDevice::attach(dev->connect(), s.registry), "attach"),
                         s.registry),
               "open");
  s.buf = must(env::DmaRegion::create(s.registry, kBuf, env::DmaOptions{false}), "memory");
  s.pd = must(s.ctx->alloc_pd(), "pd");
  s.cq = must(s.ctx->create_cq(1024), "cq");
  s.mr = must(s.ctx->reg_mr(*s.pd, s.buf->data(), kBuf,
                            access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead),
              "mr");
  QpInitAttr init;
  init.send_cq = init.recv_cq = s.cq.get();
  init.cap = QpCap{512, 512, 1, 1};
  s.qp = must(s.ctx->create_qp(*s.pd, init), "qp");
}

void connect(Qp& qp, const Side& peer) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead;
  int rc =
      qp.modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags);
  a.qp_state = QpState::kRtr;
  a.dest_address = peer.ctx->port_address();
  a.dest_qp_num = peer.qp->qp_num();
  a.path_mtu = Mtu::k4096;
  a.max_dest_rd_atomic = 16;
  rc |= qp.modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn |
                         qp_attr::kRqPsn | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer);
  a.qp_state = QpState::kRts;
  a.max_rd_atomic = 16;
  rc |= qp.modify(a, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout | qp_attr::kRetryCnt |
                         qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic);
  if (rc != 0) std::abort();
}

struct Pair {
  emu::rnic::Cluster cluster{1};
  Side a, b;
  Pair() {
    open_side(cluster, a);
    open_side(cluster, b);
    connect(*a.qp, b);
    connect(*b.qp, a);
  }
};

// One message at a time (queue depth 1): post, run the NICs until idle, poll.
void BM_SendRecvQd1(benchmark::State& state) {
  Pair p;
  const uint32_t len = static_cast<uint32_t>(state.range(0));
  Sge tx{p.a.addr(0), len, p.a.mr->lkey()}, rx{p.b.addr(0), len, p.b.mr->lkey()};
  SendWr s;
  s.sg_list = &tx;
  s.num_sge = 1;
  s.send_flags = send_flag::kSignaled;
  RecvWr r;
  r.sg_list = &rx;
  r.num_sge = 1;
  WorkCompletion wc[4];
  for (auto _ : state) {
    p.b.qp->post_recv(r, nullptr);
    p.a.qp->post_send(s, nullptr);
    p.cluster.run_until_idle();
    if (p.a.cq->poll(wc, 4) != 1 || p.b.cq->poll(wc, 4) != 1)
      state.SkipWithError("lost completion");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * len);
}
BENCHMARK(BM_SendRecvQd1)->Arg(64)->Arg(4096);

// `depth` WRITEs or READs of `len` bytes in flight, refilled as they complete; an iteration
// is 0.5 us of virtual time.
void stream(benchmark::State& state, WrOpcode op) {
  Pair p;
  const uint32_t len = static_cast<uint32_t>(state.range(0));
  const int depth = static_cast<int>(state.range(1));
  Sge sge{p.a.addr(0), len, p.a.mr->lkey()};
  SendWr w;
  w.opcode = op;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = send_flag::kSignaled;
  w.remote_addr = p.b.addr(0);
  w.rkey = p.b.mr->rkey();
  for (int i = 0; i < depth; ++i) p.a.qp->post_send(w, nullptr);
  WorkCompletion wc[64];
  int64_t done = 0;
  for (auto _ : state) {
    p.cluster.run_for(500);  // 0.5 us of virtual time per iteration (the wire takes 1 us)
    const int n = p.a.cq->poll(wc, 64);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) state.SkipWithError("failed completion");
      p.a.qp->post_send(w, nullptr);
    }
    done += n;
  }
  state.SetItemsProcessed(done);
  state.SetBytesProcessed(done * len);
  state.counters["virtual_ms"] = static_cast<double>(p.cluster.now_ns()) / 1e6;
}
void BM_WriteStream(benchmark::State& s) {
  stream(s, WrOpcode::kRdmaWrite);
}
void BM_ReadStream(benchmark::State& s) {
  stream(s, WrOpcode::kRdmaRead);
}
BENCHMARK(BM_WriteStream)->Args({4096, 32})->Args({65536, 8});
BENCHMARK(BM_ReadStream)->Args({4096, 16});

}  // namespace
}  // namespace pollux::rdma

BENCHMARK_MAIN();
