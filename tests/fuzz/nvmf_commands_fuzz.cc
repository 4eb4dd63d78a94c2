// The NVMe-oF target's command handling (fabric/target: Connect, Property Get/Set, the admin
// command set, the discovery controller, the I/O commands on namespaces over malloc bdevs) fed
// any SQE, with any data, on up to three queues of one host, below any transport: the harness
// is the transport. Each command's data is a heap buffer of exactly its length, so a byte
// read or written past it is an AddressSanitizer report; a step-mode target in virtual time.
//
// Input: one configuration byte, then records, each starting with an opcode byte (low 3 bits):
//   0 Q(1) SQE(64)        a command on queue Q % 3; its data length is SGL1's length (more
//                         than the transport's MDTS is not submitted: a transport refuses it),
//                         host-to-controller data is the next bytes of the input (zeros past
//                         its end); opcode bit 3: left in flight (the framework not settled)
//   1 Q(1) SQSIZE(1) KATO(2) F(1)  a well-formed Connect on queue Q % 3 (queue 0: the admin
//                         queue, to the subsystem, or to the discovery subsystem if F bit 0;
//                         else I/O queue Q with the CNTLID the admin Connect returned; F bit 1:
//                         a wrong host NQN)
//   2 V(4)                Property Set CC = V on the admin queue (V = 0: enable, IOSQES 6,
//                         IOCQES 4)
//   3 E(1)                virtual time moves on 2^(E % 32) ns (keep-alive, AER)
//   4 Q(1)                queue Q % 3 is disconnected by its transport (a connection lost)
//   5 N(1)                the framework is stepped N times without settling (commands left in
//                         flight while the next record arrives)
// Configuration byte: bit 0 keyed SGLs and MSDBD 16 (RDMA's limits), bit 1 no in-capsule data
// on I/O queues, bit 2 a subsystem that allows only the harness's host.
//
// What must hold: no crash, hang or sanitizer report; every command completes exactly once,
// with its CID and its queue's SQID, and moves at most the data it was given room for; a queue
// that is disconnected gets every outstanding command back; the target then stops cleanly.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "fabric/target/poll_group.h"
#include "fabric/target/qpair.h"
#include "fabric/target/transport.h"
#include "spec/nvme.h"
#include "spec/nvme_fabrics.h"
#include "tests/fuzz/target_world.h"

namespace {

namespace nf = pollux::spec::nvmf;
namespace sn = pollux::spec::nvme;
namespace target = pollux::fabric::target;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr const char* kNqn = "nqn.2026-11.io.pollux:fuzz";
constexpr const char* kHost = "nqn.2026-11.io.pollux:fuzz-host";
constexpr int kQueues = 3;
const target::ListenAddress kListen{"TCP", "IPv4", "10.0.0.1", "4420"};
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

class FuzzTransport final : public target::Transport {
 public:
  explicit FuzzTransport(target::TransportLimits l) : limits_(l) {}
  const char* trtype() const override { return "TCP"; }
  const target::TransportLimits& limits() const override { return limits_; }
  target::Status listen(const target::ListenAddress&) override { return target::ok_status(); }
  void stop_listening(const target::ListenAddress&) override {}
  void add_group(target::PollGroup&) override {}
  void remove_group(target::PollGroup&) override {}
  nlohmann::json options_json() const override { return nlohmann::json::object(); }
  nlohmann::json group_stats(target::PollGroup&) const override {
    return nlohmann::json::object();
  }

 private:
  target::TransportLimits limits_;
};

// One queue: requests in flight, each with a data buffer of exactly its length.
class FuzzQpair final : public target::Qpair {
 public:
  struct Slot {
    target::Request req;
    std::unique_ptr<uint8_t[]> buf;
    uint32_t given = 0;  // the length the command was submitted with
    bool busy = false;
  };

  FuzzQpair(target::PollGroup& g, target::Transport& t, int index)
      : Qpair(g, t), index_(index), slots_(kMaxOutstanding) {
    for (int i = kMaxOutstanding - 1; i >= 0; --i) free_.push_back(i);
  }

  static constexpr int kMaxOutstanding = 64;

  void complete(target::Request& r) override {
    // The slot holding r, found without a scan (libFuzzer traces every comparison of one).
    const auto at = reinterpret_cast<uintptr_t>(&r) - reinterpret_cast<uintptr_t>(&slots_[0].req);
    const std::size_t i = at / sizeof(Slot);
    check(i < slots_.size() && &slots_[i].req == &r,
          "a completion for a request the transport never gave");
    Slot* s = &slots_[i];
    check(s->busy, "a command completed twice");
    check(r.rsp.cid == r.cmd.cid, "a completion whose CID is not its command's");
    check(r.rsp.sqid == qid, "a completion whose SQID is not its queue's");
    check(r.length <= s->given, "a command moved more data than it had room for");
    if (g_debug)
      std::fprintf(stderr, "queue %d: cid %u opcode %#x status %#x dw0 %#x length %u\n", index_,
                   r.cmd.cid, r.cmd.opcode, r.rsp.status >> 1, r.rsp.dw0, r.length);
    last_connect_dw0 = r.rsp.dw0;
    last_status = r.rsp.status;
    s->busy = false;
    s->buf.reset();
    free_.push_back(static_cast<int>(i));
    --outstanding;
    maybe_close();
  }
  void disconnect() override {
    if (closing) return;
    closing = true;
    state = State::kClosing;
    target::qpair_closing(*this);
    maybe_close();
  }
  bool prepare(uint16_t, uint32_t) override { return true; }
  const target::ListenAddress& listen_address() const override { return kListen; }
  std::string peer() const override { return "fuzz-host"; }

  // On the group's thread. False: no free slot (a transport holds one request per SQ entry).
  bool submit(const sn::SubmissionEntry& cmd, uint32_t length, const uint8_t* in,
              std::size_t in_len) {
    if (closing) return false;
    if (free_.empty()) return false;
    Slot* s = &slots_[static_cast<std::size_t>(free_.back())];
    free_.pop_back();
    s->busy = true;
    s->given = length;
    s->buf.reset(length ? new uint8_t[length] : nullptr);
    if (length) {
      std::memset(s->buf.get(), 0, length);
      std::memcpy(s->buf.get(), in, std::min<std::size_t>(in_len, length));
    }
    s->req = target::Request{};
    s->req.qpair = this;
    s->req.cmd = cmd;
    s->req.data = s->buf.get();
    s->req.length = length;
    s->req.xfer = target::xfer_of(cmd);
    ++outstanding;
    target::execute(s->req);
    return true;
  }

  bool closing = false;
  bool closed = false;
  int outstanding = 0;
  uint32_t last_connect_dw0 = 0;
  uint16_t last_status = 0;

 private:
  void maybe_close() {
    if (!closing || closed || outstanding > 0) return;
    closed = true;
    target::qpair_closed(*this);
    group().remove_qpair(this);
  }
  int index_;
  std::vector<Slot> slots_;
  std::vector<int> free_;  // indices of slots not busy
};

struct Rig {
  pollux::fuzz::TargetWorld w;
  FuzzTransport* transport = nullptr;
  std::unique_ptr<FuzzQpair> queues[kQueues];
  std::vector<std::unique_ptr<FuzzQpair>> retired;  // disconnected, kept until the end
  uint16_t cntlid = 0xffff;
  uint16_t next_cid = 1;

  explicit Rig(uint8_t config) {
    w.add_malloc("Malloc0", 256, 512);
    w.add_malloc("Malloc1", 32, 4096);
    target::TransportLimits l;
    l.max_queue_depth = 32;
    l.max_aq_depth = 32;
    l.max_io_qpairs_per_ctrlr = 2;
    l.max_io_size = 16384;
    l.in_capsule_data_size = (config & 2) ? 0 : 4096;
    if (config & 1) {
      l.keyed_sgl = true;
      l.msdbd = 16;
      l.discovery_trtype = nf::trtype::kRdma;
    }
    w.on_app([&] {
      auto t = std::make_unique<FuzzTransport>(l);
      transport = t.get();
      check(w.tgt->add_transport(std::move(t)).ok(), "add transport");
      target::SubsystemOptions so;
      so.nqn = kNqn;
      so.allow_any_host = (config & 4) == 0;
      so.max_namespaces = 4;
      check(w.tgt->create_subsystem(so).ok(), "subsystem");
      if (config & 4) check(w.tgt->add_host(kNqn, kHost).ok(), "host");
      for (const char* b : {"Malloc0", "Malloc1"}) {
        target::NamespaceOptions no;
        no.bdev_name = b;
        check(w.tgt->add_namespace(kNqn, no).ok(), "namespace");
      }
      check(w.tgt->add_listener(kNqn, kListen).ok(), "listener");
    });
    w.settle();
  }

  FuzzQpair& queue(int i) {
    if (!queues[i]) {
      queues[i] = w.on_group([&] {
        return std::make_unique<FuzzQpair>(*w.tgt->groups()[0], *transport, i);
      });
    }
    return *queues[i];
  }
  // Submits without settling; false if the queue had no room.
  bool submit(int q, sn::SubmissionEntry cmd, uint32_t length, const uint8_t* in,
              std::size_t in_len) {
    FuzzQpair& qp = queue(q);
    return w.on_group([&] { return qp.submit(cmd, length, in, in_len); });
  }
  void connect(int q, uint8_t sqsize, uint16_t kato, uint8_t flags) {
    nf::ConnectCommand c{};
    c.opcode = nf::kOpcodeFabrics;
    c.fctype = nf::fctype::kConnect;
    c.flags = static_cast<uint8_t>(sn::kPsdtSglMptrContiguous << 6);
    c.cid = next_cid++;
    c.sgl1 = nf::sgl::in_capsule(sizeof(nf::ConnectData));
    c.qid = static_cast<uint16_t>(q);
    c.sqsize = sqsize;
    c.kato = kato;
    nf::ConnectData d{};
    std::memset(d.hostid, 0x5a, sizeof d.hostid);
    d.cntlid = q == 0 ? nf::connect::kCntlidDynamic : cntlid;
    const std::string subnqn = q == 0 && (flags & 1) ? nf::kDiscoveryNqn : kNqn;
    const std::string hostnqn = (flags & 2) ? "nqn.2026-11.io.pollux:stranger" : kHost;
    std::memcpy(d.subnqn, subnqn.data(), subnqn.size());
    std::memcpy(d.hostnqn, hostnqn.data(), hostnqn.size());
    sn::SubmissionEntry e;
    std::memcpy(&e, &c, sizeof e);
    submit(q, e, sizeof d, reinterpret_cast<const uint8_t*>(&d), sizeof d);
    w.settle();
    FuzzQpair& qp = queue(q);
    if (q == 0 && qp.last_status == 0) cntlid = static_cast<uint16_t>(qp.last_connect_dw0);
  }
  void property_set_cc(uint32_t value) {
    nf::PropertySetCommand c{};
    c.opcode = nf::kOpcodeFabrics;
    c.fctype = nf::fctype::kPropertySet;
    c.cid = next_cid++;
    c.attrib = nf::property::kSize4;
    c.ofst = sn::reg::kCc;
    c.value = value != 0 ? value : sn::cc::make(true, 0, 0, 0, 0, 6, 4);
    sn::SubmissionEntry e;
    std::memcpy(&e, &c, sizeof e);
    submit(0, e, 0, nullptr, 0);
    w.settle();
  }
  void disconnect(int q) {
    if (!queues[q]) return;
    FuzzQpair* qp = queues[q].get();
    w.on_group([&] { qp->disconnect(); });
    w.settle();
    retired.push_back(std::move(queues[q]));
  }

  // Every queue goes, every command comes back, and the target stops cleanly (~TargetWorld).
  void finish() {
    w.settle();
    for (int q = kQueues - 1; q >= 0; --q) disconnect(q);
    // Up to 100 ms of virtual time for every queue to close (it ends earlier once they have).
    const auto all_back = [&] {
      for (const auto& qp : retired)
        if (qp->outstanding > 0 || !qp->closed) return false;
      return true;
    };
    for (int i = 0; i < 100 && !all_back(); ++i) w.advance(1'000'000);
    for (const auto& qp : retired) {
      check(qp->outstanding == 0, "a disconnected queue still has commands outstanding");
      check(qp->closed, "a disconnected queue never closed");
    }
  }
};


}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader in{data, size};
  uint8_t config = 0;
  in.take(&config, 1);
  Rig rig(config);
  for (uint8_t op = 0; in.take(&op, 1);) {
    switch (op & 7) {
      case 0: {
        uint8_t q = 0;
        sn::SubmissionEntry cmd;
        if (!in.take(&q, 1) || !in.take(&cmd, sizeof cmd)) break;
        const uint32_t length = cmd.dptr.sgl1.length;
        const target::Xfer x = target::xfer_of(cmd);
        if (length > rig.transport->limits().max_io_size) break;  // a transport refuses it
        const uint32_t len = x == target::Xfer::kNone ? 0 : length;
        std::size_t have = 0;
        const uint8_t* d =
            in.take_up_to(x == target::Xfer::kHostToController ? len : 0, &have);
        rig.submit(q % kQueues, cmd, len, d, have);
        if ((op & 8) == 0) rig.w.settle();
        break;
      }
      case 1: {
        uint8_t q = 0, sqsize = 0, flags = 0;
        uint16_t kato = 0;
        if (!in.take(&q, 1) || !in.take(&sqsize, 1) || !in.take(&kato, 2) || !in.take(&flags, 1))
          break;
        rig.connect(q % kQueues, sqsize, kato, flags);
        break;
      }
      case 2: {
        uint32_t v = 0;
        if (in.take(&v, 4)) rig.property_set_cc(v);
        break;
      }
      case 3: {
        uint8_t e = 0;
        if (in.take(&e, 1)) rig.w.advance(uint64_t{1} << (e % 32));
        break;
      }
      case 4: {
        uint8_t q = 0;
        if (in.take(&q, 1)) rig.disconnect(q % kQueues);
        break;
      }
      default: {
        uint8_t n = 0;
        if (in.take(&n, 1))
          for (int i = 0; i < n % 16; ++i) rig.w.fw->step();
      }
    }
  }
  rig.finish();
  return 0;
}
