// rdma_pingpong: two RNICs, one QP each, connected to each other; a message goes A -> B and
// back (SEND/RECV, or RDMA WRITE with immediate) N times and the round trip is timed — in the
// manner of ibv_rc_pingpong, but both ends in this process. Against pollux-rnic:
//   pollux-rnic --dir /tmp/rnic --nics 2 &
//   rdma_pingpong --dir /tmp/rnic -n 10000 -s 64
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/cli.h"
#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"

namespace {

using namespace pollux;
using namespace pollux::rdma;

struct End {
  env::MemoryRegistry registry;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<env::DmaRegion> buf;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  ~End() {
    mr.reset();
    qp.reset();
    cq.reset();
    pd.reset();
    buf.reset();
    ctx.reset();
  }
};

bool open_end(End& e, const std::string& socket, std::size_t bytes) {
  auto pci = env::VfioUserDevice::connect("vfio-user:" + socket, e.registry);
  if (!pci.ok()) {
    std::fprintf(stderr, "rdma_pingpong: %s: %s\n", socket.c_str(), pci.error().message.c_str());
    return false;
  }
  auto ctx = open_rnic(std::move(pci).value(), e.registry);
  if (!ctx.ok()) {
    std::fprintf(stderr, "rdma_pingpong: %s\n", ctx.error().message.c_str());
    return false;
  }
  e.ctx = std::move(ctx).value();
  auto buf = env::DmaRegion::create(e.registry, std::max<std::size_t>(bytes, 4096),
                                    env::DmaOptions{false});
  auto pd = e.ctx->alloc_pd();
  auto cq = e.ctx->create_cq(16);
  if (!buf.ok() || !pd.ok() || !cq.ok()) return false;
  e.buf = std::move(buf).value();
  e.pd = std::move(pd).value();
  e.cq = std::move(cq).value();
  auto mr = e.ctx->reg_mr(*e.pd, e.buf->data(), e.buf->size(),
                          access::kLocalWrite | access::kRemoteWrite);
  QpInitAttr init;
  init.send_cq = init.recv_cq = e.cq.get();
  auto qp = e.ctx->create_qp(*e.pd, init);
  if (!mr.ok() || !qp.ok()) return false;
  e.mr = std::move(mr).value();
  e.qp = std::move(qp).value();
  return true;
}

bool connect(End& e, const End& peer, Mtu mtu) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = access::kLocalWrite | access::kRemoteWrite;
  int rc = e.qp->modify(
      a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kAccessFlags);
  a.qp_state = QpState::kRtr;
  a.dest_address = peer.ctx->port_address();
  a.dest_qp_num = peer.qp->qp_num();
  a.path_mtu = mtu;
  rc = rc != 0 ? rc
               : e.qp->modify(a, qp_attr::kState | qp_attr::kAv | qp_attr::kPathMtu |
                                     qp_attr::kDestQpn | qp_attr::kRqPsn |
                                     qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer);
  a.qp_state = QpState::kRts;
  rc = rc != 0
           ? rc
           : e.qp->modify(a, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout |
                                 qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic);
  return rc == 0;
}

// Polls until a completion of `want` opcode arrives; false on an error or after 10 s.
bool wait_for(Cq& cq, WcOpcode want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  WorkCompletion wc[4];
  for (;;) {
    const int n = cq.poll(wc, 4);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "rdma_pingpong: completion error: %s\n", to_string(wc[i].status));
        return false;
      }
      if (wc[i].opcode == want) return true;
    }
    if (n < 0 || std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rdma_pingpong: round trips between two Pollux RNICs"};
  std::string dir;
  uint64_t iterations = 1000;
  uint32_t size = 64;
  bool write_imm = false;
  app.add_option("-d,--dir", dir, "pollux-rnic's socket directory (rnic0.sock, rnic1.sock)")
      ->required();
  app.add_option("-n,--iters", iterations, "round trips")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("-s,--size", size, "message bytes")->check(CLI::Range(0u, 1u << 20));
  app.add_flag("-w,--write-imm", write_imm, "RDMA WRITE with immediate instead of SEND");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;

  End a, b;
  if (!open_end(a, dir + "/rnic0.sock", size) || !open_end(b, dir + "/rnic1.sock", size)) return 1;
  if (!connect(a, b, Mtu::k4096) || !connect(b, a, Mtu::k4096)) {
    std::fprintf(stderr, "rdma_pingpong: cannot connect the QPs\n");
    return 1;
  }
  End* ends[2] = {&a, &b};
  std::vector<double> rtt_us;
  rtt_us.reserve(iterations);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int hop = 0; hop < 2; ++hop) {
      End& from = *ends[hop];
      End& to = *ends[1 - hop];
      Sge rs{reinterpret_cast<uintptr_t>(to.buf->data()), size, to.mr->lkey()};
      RecvWr r;
      r.sg_list = &rs;
      r.num_sge = write_imm ? 0 : 1;
      Sge ss{reinterpret_cast<uintptr_t>(from.buf->data()), size, from.mr->lkey()};
      SendWr s;
      s.sg_list = &ss;
      s.num_sge = 1;
      s.opcode = write_imm ? WrOpcode::kRdmaWriteWithImm : WrOpcode::kSend;
      s.remote_addr = reinterpret_cast<uintptr_t>(to.buf->data());
      s.rkey = to.mr->rkey();
      s.send_flags = send_flag::kSignaled;
      if (to.qp->post_recv(r, nullptr) != 0 || from.qp->post_send(s, nullptr) != 0) return 1;
      const WcOpcode rx = write_imm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
      const WcOpcode tx = write_imm ? WcOpcode::kRdmaWrite : WcOpcode::kSend;
      if (!wait_for(*to.cq, rx) || !wait_for(*from.cq, tx)) return 1;
    }
    rtt_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(rtt_us.begin(), rtt_us.end());
  auto pct = [&](double p) { return rtt_us[static_cast<std::size_t>(p * (rtt_us.size() - 1))]; };
  std::printf(
      "%llu round trips of %u bytes (%s): %.0f round trips/s; RTT us p50 %.2f p99 %.2f max %.2f\n",
      static_cast<unsigned long long>(iterations), size,
      write_imm ? "WRITE with immediate" : "SEND/RECV", double(iterations) / total_s, pct(0.5),
      pct(0.99), rtt_us.back());
  return 0;
}
