// The NVMe/RDMA target (fabric/rdma's transport and connections, and the target core behind
// them) against up to three hostile RDMA hosts on the emulated RNIC, in virtual time: any CM
// private data, any capsule (SQE, SGLs and in-capsule bytes, of any length), keyed SGLs that
// name the host's memory with its key or not, disconnects and queue pairs put in error with
// commands in flight, and time. The hosts speak raw verbs (no NVMe driver): what a buggy or
// malicious initiator on the fabric can send.
//
// Input: one configuration byte, then records, each starting with an opcode byte (low 3 bits):
//   0 H(1) LEN(1) PD(LEN % 57)    host H % 3 connects with these bytes as its private data
//   1 H(1) QID(2) SIZE(2)         host H % 3 connects with a well-formed request: QID,
//                                 HRQSIZE = SIZE, HSQSIZE = SIZE - 1, CNTLID 0xffff
//   2 H(1) LEN(2) BYTES           host H sends a capsule of LEN % 8193 bytes: the input's next
//                                 bytes (zeros past its end)
//   3 H(1) SQE(64) X(2)           host H sends a command: the SQE as given, SGL1 rewritten by
//                                 opcode bits 3-4: 1 a Keyed SGL Data Block at data offset
//                                 ADDR % 256 KiB of the host's memory with its key, 2 the same
//                                 with a wrong key, 3 in-capsule (offset 0, length X % 8193)
//                                 followed by that many of the input's bytes
//   4 N(1)                        the world turns 1 + N times
//   5 E(1)                        virtual time moves on 2^(E % 28) ns, the world turning
//   6 H(1)                        host H disconnects (CM DREQ); opcode bit 3: its QP goes to
//                                 error instead, without a word (the target finds out by its
//                                 own sends failing)
//   7 H(1)                        host H stops reposting receive buffers (bit 3: resumes)
// Configuration byte: bit 0 no SRQ (each connection posts its own receives), bit 1 no
// in-capsule data, bit 2 four data buffers (the pool runs dry), bit 3 max queue depth 16.
//
// What must hold: no crash, hang or sanitizer report; every response capsule is 16 bytes and
// answers a command the host sent (no more responses for a CID than commands with it); when
// the hosts disconnect every connection closes, every data buffer is back in the pool and
// every SRQ buffer back in the SRQ; afterwards a new host connects, its Fabrics Connect
// succeeds, and the target stops cleanly.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "driver/env/dma_memory.h"
#include "driver/env/vfio_user_client.h"
#include "driver/rdma/rnic_provider.h"
#include "emulator/rnic/cluster.h"
#include "fabric/net/sim_network.h"
#include "fabric/rdma/cm.h"
#include "fabric/rdma/target_transport.h"
#include "spec/nvme.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_rdma.h"
#include "tests/fuzz/target_world.h"

namespace {

namespace fr = pollux::fabric::rdma;
namespace verbs = pollux::rdma;
namespace env = pollux::env;
namespace sn = pollux::spec::nvme;
namespace nf = pollux::spec::nvmf;
namespace nr = pollux::spec::nvme_rdma;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr char kNqn[] = "nqn.2026-11.io.pollux:rdma-fuzz";
constexpr char kAddress[] = "10.0.0.1";
constexpr int kHosts = 3;
constexpr uint64_t kMaxPumps = 400000;  // a livelock fails instead of hanging
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

// A host's memory: capsules are staged in slots (a capsule's bytes must stay until its NIC read
// them), responses land in receive buffers, keyed SGLs name the data area.
constexpr std::size_t kCapsuleMax = 8192;
constexpr std::size_t kSlots = 16;
constexpr std::size_t kRecvOff = kSlots * kCapsuleMax;  // 128 KiB
constexpr uint32_t kRecvs = 32;
constexpr std::size_t kDataOff = 192 * 1024;
constexpr std::size_t kDataLen = 256 * 1024;
constexpr std::size_t kHostMemory = kDataOff + kDataLen;
constexpr uint64_t kSendWr = uint64_t{1} << 32;  // in a send's wr_id; receives' are 0..kRecvs-1

// One side of the wire: its memory, its NIC, verbs over it.
struct Machine {
  env::MemoryRegistry registry;
  std::unique_ptr<verbs::Context> ctx;
  void open(pollux::emu::rnic::Cluster& cluster) {
    auto* device = cluster.add_nic();
    check(device != nullptr, "a NIC");
    auto pci = env::VfioUserDevice::attach(device->connect(), registry);
    check(pci.ok(), "the NIC's vfio-user device");
    auto c = verbs::open_rnic(std::move(pci).value(), registry);
    check(c.ok(), "verbs on the NIC");
    ctx = std::move(c).value();
  }
};

// A host that speaks only RDMA: one QP, its memory registered for the target to read and write.
struct Host {
  Machine& m;
  std::unique_ptr<verbs::Pd> pd;
  std::unique_ptr<env::DmaRegion> mem;
  std::unique_ptr<verbs::Mr> mr;
  std::unique_ptr<verbs::Cq> cq;
  std::unique_ptr<verbs::Qp> qp;
  std::unique_ptr<fr::CmId> cm;
  bool established = false;
  bool reposting = true;
  uint32_t next_slot = 0;
  int sends_out = 0;
  uint32_t recvs_owed = 0;  // receive buffers consumed and not yet posted again
  std::unordered_map<uint16_t, uint32_t> unanswered;  // by CID: commands sent, not answered

  explicit Host(Machine& machine) : m(machine) {
    auto p = m.ctx->alloc_pd();
    check(p.ok(), "a PD");
    pd = std::move(p).value();
    auto r = env::DmaRegion::create(m.registry, kHostMemory, env::DmaOptions{false});
    check(r.ok(), "host memory");
    mem = std::move(r).value();
    auto k = m.ctx->reg_mr(
        *pd, mem->data(), kHostMemory,
        verbs::access::kLocalWrite | verbs::access::kRemoteRead | verbs::access::kRemoteWrite);
    check(k.ok(), "an MR");
    mr = std::move(k).value();
  }
  ~Host() { close(); }
  uint8_t* at(std::size_t off) { return static_cast<uint8_t*>(mem->data()) + off; }
  uint64_t addr(std::size_t off) { return reinterpret_cast<uintptr_t>(at(off)); }

  // A fresh QP and CM id (the old ones, if any, gone without a word).
  void close() {
    if (cm) cm->disconnect();
    cm.reset();
    qp.reset();
    cq.reset();
    established = false;
    sends_out = 0;
    recvs_owed = 0;
    unanswered.clear();
  }
  void start_connect(const void* pd_bytes, std::size_t len, fr::ConnectionManager& cmgr) {
    close();
    auto c = m.ctx->create_cq(256);
    check(c.ok(), "a CQ");
    cq = std::move(c).value();
    verbs::QpInitAttr init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap = verbs::QpCap{64, kRecvs, 1, 1};
    auto q = m.ctx->create_qp(*pd, init);
    check(q.ok(), "a QP");
    qp = std::move(q).value();
    const fr::CmQpInfo me{qp->qp_num(), m.ctx->port_address(), 700};
    auto id = cmgr.connect(kAddress, "4420", me, pd_bytes, len);
    if (id.ok()) cm = std::move(id).value();
  }
  void post_recv(uint32_t i) {
    const verbs::Sge sge{addr(kRecvOff + 16 * i), 16, mr->lkey()};
    verbs::RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const verbs::RecvWr* bad = nullptr;
    if (qp->post_recv(wr, &bad) != 0) ++recvs_owed;
  }
  // The CM's answer, once: on a connect response the QP is readied and receives posted.
  void poll_cm() {
    if (!cm) return;
    const fr::CmEvent e = cm->poll();
    if (e.type == fr::CmEventType::kConnectResponse && !established) {
      if (fr::connect_qp(*qp, e.peer, 700, fr::QpTiming{}) != 0 || cm->establish() != 0) {
        close();
        return;
      }
      for (uint32_t i = 0; i < kRecvs; ++i) post_recv(i);
      established = true;
    } else if (e.type == fr::CmEventType::kRejected || e.type == fr::CmEventType::kUnreachable ||
               e.type == fr::CmEventType::kDisconnected) {
      established = false;
    }
  }
  // Completions: responses are checked and their buffers posted again (unless told not to).
  void poll_cq() {
    if (!cq) return;
    verbs::WorkCompletion wc;
    while (cq->poll(&wc, 1) == 1) {
      if (wc.wr_id & kSendWr) {  // a send's, or its flush (an error's opcode means nothing)
        --sends_out;
        continue;
      }
      if (wc.status != verbs::WcStatus::kSuccess) continue;  // flushed
      check(wc.byte_len == 16, "a response capsule that is not 16 bytes");
      sn::CompletionEntry cqe;
      std::memcpy(&cqe, at(kRecvOff + 16 * wc.wr_id), sizeof cqe);
      auto it = unanswered.find(cqe.cid);
      check(it != unanswered.end() && it->second > 0, "a response to no command sent");
      if (--it->second == 0) unanswered.erase(it);
      if (g_debug)
        std::fprintf(stderr, "response cid %u status %#x dw0 %#x\n", cqe.cid, cqe.status >> 1,
                     cqe.dw0);
      if (reposting) {
        post_recv(static_cast<uint32_t>(wc.wr_id));
      } else {
        ++recvs_owed;
      }
    }
  }
  void resume_reposting() {
    reposting = true;
    if (!qp || !established) return;
    // The buffers were not tracked one by one: post the whole set again where room is left.
    const uint32_t owed = std::min(recvs_owed, kRecvs);
    recvs_owed = 0;
    for (uint32_t i = 0; i < owed; ++i) post_recv(i);
  }
  // A capsule of `len` bytes staged by `fill`; the CID is read back from what was staged.
  template <typename F>
  void send(std::size_t len, F fill) {
    if (!established || !qp || sends_out >= 60) return;
    const std::size_t off = (next_slot++ % kSlots) * kCapsuleMax;
    std::memset(at(off), 0, kCapsuleMax);
    fill(at(off));
    const verbs::Sge sge{addr(off), static_cast<uint32_t>(len), mr->lkey()};
    verbs::SendWr wr;
    wr.wr_id = kSendWr | off;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = verbs::WrOpcode::kSend;
    wr.send_flags = verbs::send_flag::kSignaled;
    const verbs::SendWr* bad = nullptr;
    if (qp->post_send(wr, &bad) != 0) return;
    ++sends_out;
    if (len >= sizeof(sn::SubmissionEntry)) {
      sn::SubmissionEntry e;
      std::memcpy(&e, at(off), sizeof e);
      ++unanswered[e.cid];
    }
  }
  void to_error() {
    if (!qp) return;
    verbs::QpAttr a;
    a.qp_state = verbs::QpState::kErr;
    qp->modify(a, verbs::qp_attr::kState);
  }
};

struct Rig {
  pollux::fuzz::TargetWorld w;
  pollux::emu::rnic::Cluster cluster{1};
  pollux::fabric::net::SimNetwork net{w.clock, 1};
  std::unique_ptr<fr::ConnectionManager> cmgr = fr::stream_cm(net);
  Machine target_machine, host_machine;
  fr::RdmaTargetTransport* transport = nullptr;
  fr::RdmaTargetOptions opts;
  std::unique_ptr<Host> hosts[kHosts];

  explicit Rig(uint8_t config) {
    target_machine.open(cluster);
    host_machine.open(cluster);
    opts.num_shared_buffers = (config & 4) ? 4 : 32;
    opts.buf_cache_size = (config & 4) ? 2 : 8;
    opts.num_cqe = 4096;
    opts.max_srq_depth = 64;
    opts.no_srq = (config & 1) != 0;
    opts.in_capsule_data_size = (config & 2) ? 0 : 4096;
    opts.max_queue_depth = (config & 8) ? 16 : 128;
    opts.max_aq_depth = 32;
    w.add_malloc("Malloc0", 1024, 512);
    w.on_app([&] {
      auto tr = fr::RdmaTargetTransport::create(*w.tgt, opts, *target_machine.ctx, &net,
                                                &target_machine.registry);
      if (!tr) std::fprintf(stderr, "transport: %s\n", tr.error().message.c_str());
      check(tr.ok(), "the RDMA transport");
      transport = tr.value().get();
      check(w.tgt->add_transport(std::move(tr).value()).ok(), "add the transport");
      w.add_open_subsystem(kNqn, "Malloc0", {"RDMA", "IPv4", kAddress, "4420"});
    });
    bool settled = false;
    w.on_app([&] { w.tgt->when_settled([&] { settled = true; }); });
    for (uint64_t i = 0; i < kMaxPumps && !settled; ++i) pump();
    check(settled, "the target settles");
  }
  // Hosts go first; the target stops while its NIC is still there (TargetWorld's destructor
  // then finds no target and stops only the framework).
  ~Rig() {
    for (auto& h : hosts) h.reset();
    w.stop_target([this] { pump(); });
  }

  fr::RdmaTargetGroup& group() { return *transport->group_of(*w.tgt->groups().at(0)); }

  // One turn: the target's reactor, the NICs, the hosts; then time moves on by a little when
  // something happened, else to the next event (at most 1 ms: the target's timed pollers).
  void pump() {
    bool work = w.fw->step();
    work = cluster.step_at(w.clock.now()) || work;
    for (auto& h : hosts) {
      if (!h) continue;
      h->poll_cm();
      h->poll_cq();
    }
    const uint64_t now = w.clock.now();
    uint64_t next = now + 100;
    if (!work)
      next = std::max(now + 1,
                      std::min({now + 1'000'000, cluster.next_event_ns(), net.next_event_ns()}));
    w.clock.set(next);
  }
  void turn(int n) {
    for (int i = 0; i < n; ++i) pump();
  }
  void advance(uint64_t ns) {
    const uint64_t end = w.clock.now() + ns;
    for (uint64_t i = 0; i < kMaxPumps && w.clock.now() < end; ++i) pump();
  }
  // Made on first use: most inputs speak through one or two.
  Host& host(uint8_t h) {
    auto& p = hosts[h % kHosts];
    if (!p) p = std::make_unique<Host>(host_machine);
    return *p;
  }

  // Every host leaves; every connection must close and give back what it held.
  void drain() {
    for (auto& h : hosts)
      if (h) h->close();
    const uint64_t end = w.clock.now() + 5'000'000'000ull;
    for (uint64_t i = 0; i < kMaxPumps && group().connections() > 0 && w.clock.now() < end; ++i)
      pump();
    check(group().connections() == 0, "a connection never closed after its host left");
    turn(64);
    const std::size_t buffers = transport->pool().available_approx() + group().cached_buffers();
    if (buffers != opts.num_shared_buffers)
      std::fprintf(stderr, "data buffers back: %zu of %u\n", buffers, opts.num_shared_buffers);
    check(buffers == opts.num_shared_buffers, "a data buffer was not given back");
    if (group().srq() != nullptr)
      check(group().stats().srq_posted == opts.max_srq_depth, "an SRQ buffer was not given back");
  }
  // A well-behaved host still gets in: an admin queue, then a Fabrics Connect that succeeds.
  void check_still_serves() {
    Host& h = host(0);
    nr::CmRequest req{};
    req.qid = 0;
    req.hrqsize = 32;
    req.hsqsize = 31;
    req.cntlid = 0xffff;
    h.start_connect(&req, sizeof req, *cmgr);
    for (uint64_t i = 0; i < kMaxPumps && !h.established && h.cm; ++i) pump();
    check(h.established, "a well-formed connect refused after the input");
    nf::ConnectData d{};
    std::memset(d.hostid, 0x5a, sizeof d.hostid);
    d.cntlid = nf::connect::kCntlidDynamic;
    std::snprintf(d.subnqn, sizeof d.subnqn, "%s", kNqn);
    std::snprintf(d.hostnqn, sizeof d.hostnqn, "%s", "nqn.2026-11.io.pollux:fuzz-host");
    std::memcpy(h.at(kDataOff), &d, sizeof d);
    h.send(64, [&](uint8_t* p) {
      nf::ConnectCommand c{};
      c.opcode = nf::kOpcodeFabrics;
      c.fctype = nf::fctype::kConnect;
      c.flags = static_cast<uint8_t>(sn::kPsdtSglMptrContiguous << 6);
      c.cid = 0x1234;
      c.qid = 0;
      c.sqsize = 31;
      c.kato = 0;
      const auto k = nf::KeyedSglDescriptor::make(h.addr(kDataOff), sizeof d, h.mr->rkey());
      std::memcpy(&c.sgl1, &k, sizeof k);
      std::memcpy(p, &c, sizeof c);
    });
    for (uint64_t i = 0; i < kMaxPumps && !h.unanswered.empty(); ++i) pump();
    check(h.unanswered.empty(), "the Connect after the input was never answered");
    sn::CompletionEntry last{};
    bool ok = false;
    for (uint32_t i = 0; i < kRecvs; ++i) {
      std::memcpy(&last, h.at(kRecvOff + 16 * i), sizeof last);
      if (last.cid == 0x1234 && (last.status >> 1) == 0) ok = true;
    }
    check(ok, "the Connect after the input failed");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader in{data, size};
  uint8_t config = 0;
  in.get(&config);
  Rig rig(config);
  for (uint8_t code = 0; in.take(&code, 1);) {
    switch (code & 7) {
      case 0: {
        uint8_t h = 0, len = 0;
        if (!in.get(&h) || !in.get(&len)) break;
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(len % (fr::kCmPrivateDataMax + 1), &got);
        rig.host(h).start_connect(b, got, *rig.cmgr);
        break;
      }
      case 1: {
        uint8_t h = 0;
        uint16_t qid = 0, entries = 0;
        if (!in.get(&h) || !in.get(&qid) || !in.get(&entries)) break;
        nr::CmRequest req{};
        req.qid = qid;
        req.hrqsize = entries;
        req.hsqsize = static_cast<uint16_t>(entries - 1);
        req.cntlid = 0xffff;
        rig.host(h).start_connect(&req, sizeof req, *rig.cmgr);
        break;
      }
      case 2: {
        uint8_t h = 0;
        uint16_t len = 0;
        if (!in.get(&h) || !in.get(&len)) break;
        const std::size_t n = len % (kCapsuleMax + 1);
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(n, &got);
        rig.host(h).send(n, [&](uint8_t* p) { std::memcpy(p, b, got); });
        break;
      }
      case 3: {
        uint8_t h = 0;
        sn::SubmissionEntry sqe;
        uint16_t x = 0;
        if (!in.get(&h) || !in.get(&sqe) || !in.get(&x)) break;
        Host& host = rig.host(h);
        const uint8_t mode = (code >> 3) & 3;
        std::size_t icd = 0;
        const uint8_t* icd_bytes = nullptr;
        if (mode == 1 || mode == 2) {
          const uint64_t off = sqe.dptr.sgl1.address % kDataLen;
          const uint32_t len = std::min<uint32_t>(sqe.dptr.sgl1.length % (128 * 1024 + 1),
                                                  static_cast<uint32_t>(kDataLen - off));
          const uint32_t key = mode == 1 ? host.mr->rkey() : host.mr->rkey() ^ 0x00a5a500;
          const auto k = nf::KeyedSglDescriptor::make(host.addr(kDataOff + off), len, key);
          std::memcpy(&sqe.dptr.sgl1, &k, sizeof k);
        } else if (mode == 3) {
          icd = x % (kCapsuleMax - sizeof sqe + 1);
          sqe.dptr.sgl1 = nf::sgl::in_capsule(static_cast<uint32_t>(icd));
          icd_bytes = in.take_up_to(icd, &icd);
        }
        host.send(sizeof sqe + icd, [&](uint8_t* p) {
          std::memcpy(p, &sqe, sizeof sqe);
          if (icd) std::memcpy(p + sizeof sqe, icd_bytes, icd);
        });
        break;
      }
      case 4: {
        uint8_t n = 0;
        if (in.get(&n)) rig.turn(1 + n);
        break;
      }
      case 5: {
        uint8_t e = 0;
        if (in.get(&e)) rig.advance(uint64_t{1} << (e % 28));
        break;
      }
      case 6: {
        uint8_t h = 0;
        if (!in.get(&h)) break;
        if (code & 8) {
          rig.host(h).to_error();
        } else {
          rig.host(h).close();
        }
        break;
      }
      default: {
        uint8_t h = 0;
        if (!in.get(&h)) break;
        if (code & 8) {
          rig.host(h).resume_reposting();
        } else {
          rig.host(h).reposting = false;
        }
      }
    }
    rig.turn(4);
  }
  rig.turn(256);
  rig.drain();
  rig.check_still_serves();
  return 0;
}
