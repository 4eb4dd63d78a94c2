// The NVMe/TCP target (fabric/tcp's TcpConnection and the target's core behind it) fed any
// byte stream by up to four hosts, in process: no sockets, a network seam (FuzzNetwork) whose
// sockets carry what the input says, and a step-mode target in virtual time.
//
// Input: one configuration byte, then records, each starting with an opcode byte (low 3 bits):
//   0 LEN(2) BYTES  bytes to the current connection as they are
//   1 LEN(2) BYTES  a PDU to the current connection: PLEN set to LEN and the header and data
//                   digests computed when its flags ask for them (opcode bit 3: leave PLEN,
//                   bit 4: leave the digests) — mutations keep reaching past the digest checks
//   2 IDX(1)        switch to connection IDX % 4 (accepted on first use)
//   3 E(1)          virtual time moves on 2^(E % 32) ns (keep-alive, linger)
//   4 N(2)          the host reads N bytes of what the target sent (0: all of it)
//   5 N(2)          the host's receive window (N unread bytes at most; 0: unlimited); with
//                   opcode bit 3, the most one recv returns to the target (0: unlimited)
//   6               the host closes the connection (EOF after what it sent)
//   7               the connection is reset
// Configuration byte: bit 0 C2HData SUCCESS off, bit 1 no in-capsule data on I/O queues,
// bit 2 MAXH2CDATA 8 KiB (else 4 KiB), bits 3-4 shared data buffers 1, 2, 4 or 8.
//
// What must hold: no crash, hang or sanitizer report (free data buffers are poisoned: a touch
// of one nobody holds is reported); every byte the target sends parses as well-formed PDUs —
// ICResp first and once, digests as negotiated and correct, C2HData and R2T consistent, every
// response and data PDU for a command the host sent, nothing after a C2HTermReq, which is
// followed by FIN; a connection the target ends by itself ends with a C2HTermReq; when the
// hosts have closed, every connection is gone and every data buffer is back in the pool.
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "driver/env/dma_pool.h"
#include "fabric/net/socket.h"
#include "fabric/target/poll_group.h"
#include "fabric/tcp/target_transport.h"
#include "isa-l/crc.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_tcp.h"
#include "tests/fuzz/target_world.h"

namespace {

namespace nt = pollux::spec::nvme_tcp;
namespace nf = pollux::spec::nvmf;
namespace sn = pollux::spec::nvme;
namespace net = pollux::fabric::net;
namespace target = pollux::fabric::target;
namespace tcp = pollux::fabric::tcp;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr const char* kNqn = "nqn.2026-11.io.pollux:fuzz";
constexpr int kPeers = 4;
// POLLUX_FUZZ_DEBUG=1: every PDU the target sends is printed (for corpus authors).
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

uint32_t crc32c(const uint8_t* p, std::size_t n) {
  return ~crc32_iscsi(const_cast<uint8_t*>(p), static_cast<int>(n), ~0u);
}
uint32_t le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One host's end of a connection, and what the harness knows of its stream.
struct Peer {
  // Host -> target.
  std::vector<uint8_t> in;
  std::size_t in_pos = 0;
  std::size_t recv_chunk = 0;  // 0: unlimited
  bool eof = false, reset = false;
  // Target -> host.
  std::vector<uint8_t> out;
  std::size_t out_read = 0;  // bytes the host has read
  std::size_t window = 0;    // 0: unlimited
  bool send_blocked = false;  // a send found the window full
  bool write_shut = false;    // FIN from the target
  bool accepted = false, gone = false;  // gone: the target closed the socket
  bool opened = false;
  int index = 0;

  // The host's stream as the harness frames it (by PLEN).
  std::size_t framed = 0;
  bool unframed = false;
  bool first_pdu_seen = false;
  uint8_t hpda = 0, asked_dgst = 0;
  std::map<uint16_t, int> commands;  // CapsuleCmd CIDs sent, not yet answered
  bool host_term = false;            // an H2CTermReq went out
  bool may_end_association = false;  // a Disconnect or a Property Set went out

  // The target's stream as validated so far.
  std::size_t parsed = 0;
  bool icresp = false, hd = false, dd = false, term = false;
  uint32_t maxh2cdata = 0;

  std::size_t unread_out() const { return out.size() - out_read; }
};

class FuzzSocket final : public net::Socket {
 public:
  explicit FuzzSocket(Peer& p) : p_(p) {}
  ~FuzzSocket() override { p_.gone = true; }
  ssize_t send(const iovec* iov, int iovcnt) override {
    if (p_.reset) return -ECONNRESET;
    check(!p_.write_shut, "the target sends after its FIN");
    std::size_t room = p_.window == 0 ? SIZE_MAX : p_.window - std::min(p_.window, p_.unread_out());
    std::size_t moved = 0;
    for (int i = 0; i < iovcnt && room > 0; ++i) {
      const std::size_t n = std::min(room, iov[i].iov_len);
      const auto* b = static_cast<const uint8_t*>(iov[i].iov_base);
      p_.out.insert(p_.out.end(), b, b + n);
      moved += n;
      room -= n;
    }
    if (moved == 0) {
      std::size_t asked = 0;
      for (int i = 0; i < iovcnt; ++i) asked += iov[i].iov_len;
      if (asked > 0) p_.send_blocked = true;
    }
    return static_cast<ssize_t>(moved);
  }
  ssize_t recv(const iovec* iov, int iovcnt) override {
    if (p_.reset) return -ECONNRESET;
    std::size_t avail = p_.in.size() - p_.in_pos;
    if (avail == 0) return p_.eof ? net::kEof : net::kAgain;
    if (p_.recv_chunk != 0) avail = std::min(avail, p_.recv_chunk);
    std::size_t moved = 0;
    for (int i = 0; i < iovcnt && moved < avail; ++i) {
      const std::size_t n = std::min(avail - moved, iov[i].iov_len);
      std::memcpy(iov[i].iov_base, p_.in.data() + p_.in_pos + moved, n);
      moved += n;
    }
    p_.in_pos += moved;
    return static_cast<ssize_t>(moved);
  }
  void shutdown_write() override { p_.write_shut = true; }
  bool connected(int*) override { return true; }
  void wait(bool, uint64_t) override {}
  std::string peer() const override { return "fuzz-host"; }
  bool readable() const { return p_.reset || p_.eof || p_.in_pos < p_.in.size(); }

 private:
  Peer& p_;
};

class FuzzListener final : public net::Listener {
 public:
  explicit FuzzListener(std::deque<Peer*>& pending) : pending_(pending) {}
  std::unique_ptr<net::Socket> accept() override {
    if (pending_.empty()) return nullptr;
    Peer* p = pending_.front();
    pending_.pop_front();
    p->accepted = true;
    return std::make_unique<FuzzSocket>(*p);
  }
  uint16_t port() const override { return 4420; }

 private:
  std::deque<Peer*>& pending_;
};

class FuzzGroup final : public net::ReadinessGroup {
 public:
  void add(net::Socket& s, void* ctx) override { members_.push_back({&s, ctx}); }
  void remove(net::Socket& s) override {
    std::erase_if(members_, [&](const Member& m) { return m.s == &s; });
  }
  int poll(void** ready, int max) override {
    int n = 0;
    for (const Member& m : members_)
      if (n < max && static_cast<FuzzSocket*>(m.s)->readable()) ready[n++] = m.ctx;
    return n;
  }

 private:
  struct Member {
    net::Socket* s;
    void* ctx;
  };
  std::vector<Member> members_;
};

class FuzzNetwork final : public net::Network {
 public:
  explicit FuzzNetwork(const pollux::env::Clock& clock) : clock_(clock) {}
  pollux::Result<std::unique_ptr<net::Socket>> connect(const std::string&,
                                                       const std::string&) override {
    return pollux::make_error(ECONNREFUSED, "the fuzz network makes no outgoing connections");
  }
  pollux::Result<std::unique_ptr<net::Listener>> listen(const std::string&, const std::string&,
                                                        const std::string&) override {
    return std::unique_ptr<net::Listener>(std::make_unique<FuzzListener>(pending));
  }
  std::unique_ptr<net::ReadinessGroup> readiness_group() override {
    return std::make_unique<FuzzGroup>();
  }
  uint64_t now_ns() const override { return clock_.now(); }

  std::deque<Peer*> pending;

 private:
  const pollux::env::Clock& clock_;
};

// ------------------------------------------------------------------- the host's side ---

// Frames what the host sent (by PLEN) and notes what the checks need.
void frame_host_stream(Peer& p) {
  while (!p.unframed && p.in.size() - p.framed >= nt::kCommonHeaderLength) {
    const uint8_t* h = p.in.data() + p.framed;
    const uint32_t plen = le32(h + 4);
    if (plen < nt::kCommonHeaderLength || plen > (1u << 24)) {
      p.unframed = true;
      return;
    }
    if (p.in.size() - p.framed < plen) return;
    const uint8_t type = h[0];
    if (!p.first_pdu_seen) {
      p.first_pdu_seen = true;
      if (type == nt::pdu::kIcReq && plen >= nt::kIcReqHlen) {
        p.hpda = h[offsetof(nt::IcReq, hpda)];
        p.asked_dgst = h[offsetof(nt::IcReq, dgst)];
      }
    }
    if (type == nt::pdu::kH2cTermReq) p.host_term = true;
    if (type == nt::pdu::kCapsuleCmd && plen >= nt::kCapsuleCmdHlen) {
      sn::SubmissionEntry sqe;
      std::memcpy(&sqe, h + 8, sizeof sqe);
      ++p.commands[sqe.cid];
      if (sqe.opcode == nf::kOpcodeFabrics) {
        const uint8_t fctype = h[8 + 4];
        if (fctype == nf::fctype::kDisconnect || fctype == nf::fctype::kPropertySet)
          p.may_end_association = true;
      }
    }
    p.framed += plen;
  }
}

void answered(Peer& p, uint16_t cid, const char* what) {
  auto it = p.commands.find(cid);
  if (it == p.commands.end() || it->second == 0) fail(what);
  --it->second;
}

void check_digest(const uint8_t* pdu, uint32_t hlen) {
  check(le32(pdu + hlen) == crc32c(pdu, hlen), "a wrong header digest from the target");
}

// Validates every complete PDU the target has sent so far.
void validate_output(Peer& p) {
  while (p.out.size() - p.parsed >= nt::kCommonHeaderLength) {
    const uint8_t* h = p.out.data() + p.parsed;
    check(!p.term, "the target sent something after its C2HTermReq");
    nt::CommonHeader ch;
    std::memcpy(&ch, h, sizeof ch);
    check(ch.hlen == nt::hlen_of(ch.type) && ch.hlen != 0, "a PDU whose HLEN is not its type's");
    check(ch.plen >= ch.hlen && ch.plen <= (1u << 20), "a PDU whose PLEN is out of range");
    if (p.out.size() - p.parsed < ch.plen) return;  // the rest comes later
    const bool hd = p.hd, dd = p.dd;
    switch (ch.type) {
      case nt::pdu::kIcResp: {
        check(!p.icresp && p.parsed == 0, "an ICResp that is not the first PDU");
        check(ch.plen == nt::kIcRespHlen && ch.flags == 0 && ch.pdo == 0, "a malformed ICResp");
        nt::IcResp r;
        std::memcpy(&r, h, sizeof r);
        check(r.pfv == nt::kPfv10 && r.cpda <= nt::kMaxPda, "ICResp PFV or CPDA");
        check((r.dgst & ~p.asked_dgst) == 0, "ICResp grants a digest the host did not ask for");
        check(r.maxh2cdata >= nt::kMinMaxH2cData && r.maxh2cdata % 4 == 0, "ICResp MAXH2CDATA");
        p.icresp = true;
        p.hd = r.dgst & nt::dgst::kHdgstEnable;
        p.dd = r.dgst & nt::dgst::kDdgstEnable;
        p.maxh2cdata = r.maxh2cdata;
        if (g_debug) std::fprintf(stderr, "conn %d: ICResp dgst %u\n", p.index, r.dgst);
        break;
      }
      case nt::pdu::kC2hTermReq: {
        check(ch.plen <= nt::kTermReqMaxPlen && ch.flags == 0, "a malformed C2HTermReq");
        nt::TermReq t;
        std::memcpy(&t, h, sizeof t);
        check(t.fes >= nt::fes::kInvalidHeaderField && t.fes <= nt::fes::kUnsupportedParameter,
              "a C2HTermReq with an undefined FES");
        p.term = true;
        if (g_debug) std::fprintf(stderr, "conn %d: C2HTermReq FES %u FEI %u\n", p.index, t.fes, uint32_t{t.fei});
        break;
      }
      case nt::pdu::kCapsuleResp: {
        check(p.icresp, "a CapsuleResp before the ICResp");
        check(ch.plen == ch.hlen + (hd ? 4u : 0u) && ch.pdo == 0, "CapsuleResp PLEN or PDO");
        check(ch.flags == (hd ? nt::flags::kHdgst : 0), "CapsuleResp flags");
        if (hd) check_digest(h, ch.hlen);
        sn::CompletionEntry cqe;
        std::memcpy(&cqe, h + 8, sizeof cqe);
        if (g_debug)
          std::fprintf(stderr, "conn %d: CapsuleResp cid %u status %#x dw0 %#x\n", p.index, cqe.cid,
                       cqe.status >> 1, cqe.dw0);
        answered(p, cqe.cid, "a CapsuleResp for a command the host never sent (or twice)");
        break;
      }
      case nt::pdu::kR2t: {
        check(p.icresp, "an R2T before the ICResp");
        check(ch.plen == ch.hlen + (hd ? 4u : 0u) && ch.pdo == 0, "R2T PLEN or PDO");
        check(ch.flags == (hd ? nt::flags::kHdgst : 0), "R2T flags");
        if (hd) check_digest(h, ch.hlen);
        nt::R2t r;
        std::memcpy(&r, h, sizeof r);
        check(r.r2tl > 0 && r.r2tl <= p.maxh2cdata, "an R2T for 0 bytes or more than MAXH2CDATA");
        auto it = p.commands.find(r.cccid);
        check(it != p.commands.end() && it->second > 0, "an R2T for a command not outstanding");
        if (g_debug)
          std::fprintf(stderr, "conn %d: R2T cid %u ttag %u offset %u length %u\n", p.index, r.cccid, r.ttag,
                       r.r2to, r.r2tl);
        break;
      }
      case nt::pdu::kC2hData: {
        check(p.icresp, "a C2HData before the ICResp");
        nt::C2hData d;
        std::memcpy(&d, h, sizeof d);
        const uint8_t want = static_cast<uint8_t>((hd ? nt::flags::kHdgst : 0) |
                                                  (dd ? nt::flags::kDdgst : 0) |
                                                  nt::flags::kLastPdu);
        check((ch.flags & ~nt::flags::kSuccess) == want, "C2HData flags");
        check(d.datal > 0 && d.datao == 0, "C2HData DATAO or DATAL");
        check(ch.pdo == nt::data_offset(nt::kDataHlen, hd, p.hpda), "C2HData PDO (HPDA)");
        check(ch.plen == ch.pdo + d.datal + (dd ? 4u : 0u), "C2HData PLEN");
        if (hd) check_digest(h, ch.hlen);
        if (dd)
          check(le32(h + ch.plen - 4) == crc32c(h + ch.pdo, d.datal), "a wrong data digest");
        if (g_debug)
          std::fprintf(stderr, "conn %d: C2HData cid %u length %u%s\n", p.index, d.cccid, d.datal,
                       ch.flags & nt::flags::kSuccess ? " SUCCESS" : "");
        if (ch.flags & nt::flags::kSuccess) {
          answered(p, d.cccid, "a C2HData SUCCESS for a command the host never sent (or twice)");
        } else {
          auto it = p.commands.find(d.cccid);
          check(it != p.commands.end() && it->second > 0, "C2HData for a command not outstanding");
        }
        break;
      }
      default:
        fail("a PDU type the controller never sends");
    }
    p.parsed += ch.plen;
  }
}

// ------------------------------------------------------------------------- the rig ---

struct Rig {
  pollux::fuzz::TargetWorld w;
  FuzzNetwork net{w.clock};
  tcp::TcpTargetTransport* transport = nullptr;
  std::unique_ptr<Peer> peers[kPeers];
  int current = 0;
  uint64_t time_advanced = 0;

  explicit Rig(uint8_t config) {
    w.add_malloc("Malloc0", 256, 512);  // small: a fresh target per input must be cheap
    w.add_malloc("Malloc1", 32, 4096);
    tcp::TcpTargetOptions o;
    o.c2h_success = (config & 1) == 0;
    o.in_capsule_data_size = (config & 2) ? 0 : 4096;
    o.max_h2c_data_size = (config & 4) ? 8192 : 4096;
    o.num_shared_buffers = 1u << ((config >> 3) & 3);
    o.buf_cache_size = 1;
    o.max_io_size = 16384;
    o.io_unit_size = 16384;
    o.max_queue_depth = 16;
    o.max_aq_depth = 16;
    o.max_io_qpairs_per_ctrlr = 2;
    w.on_app([&] {
      auto t = tcp::TcpTargetTransport::create(*w.tgt, o, &net);
      check(t.ok(), "TCP transport");
      transport = t->get();
      check(w.tgt->add_transport(std::move(t).value()).ok(), "add transport");
      target::SubsystemOptions so;
      so.nqn = kNqn;
      so.allow_any_host = true;
      so.max_namespaces = 4;
      check(w.tgt->create_subsystem(so).ok(), "subsystem");
      for (const char* b : {"Malloc0", "Malloc1"}) {
        target::NamespaceOptions no;
        no.bdev_name = b;
        check(w.tgt->add_namespace(kNqn, no).ok(), "namespace");
      }
      check(w.tgt->add_listener(kNqn, {"TCP", "IPv4", "10.0.0.1", "4420"}).ok(), "listener");
    });
    w.settle();
  }

  Peer& peer() {
    std::unique_ptr<Peer>& p = peers[current];
    if (!p) {
      p = std::make_unique<Peer>();
      p->opened = true;
      p->index = current;
      net.pending.push_back(p.get());
      // The acceptor polls every millisecond; the connection then travels by message.
      for (int i = 0; i < 20 && !p->accepted; ++i) advance(250'000);
      check(p->accepted, "the target accepts a connection");
      w.settle();
    }
    return *p;
  }
  void advance(uint64_t ns) {
    time_advanced += ns;
    w.advance(ns);
  }
  std::size_t connections() {
    return w.on_group([&] { return transport->group_of(*w.tgt->groups()[0])->connections(); });
  }
  void deliver(Peer& p, const uint8_t* b, std::size_t n) {
    if (p.eof || p.reset || p.gone) return;  // nobody reads it
    p.in.insert(p.in.end(), b, b + n);
    frame_host_stream(p);
    w.settle();
  }
  void read(Peer& p, std::size_t n) {
    p.out_read = n == 0 ? p.out.size() : std::min(p.out.size(), p.out_read + n);
    validate_output(p);
    w.settle();  // room in the window: the target sends more
  }
  bool any_ended_other_than(const Peer& me) const {
    for (const auto& p : peers)
      if (p && p.get() != &me && (p->eof || p->reset || p->gone || p->host_term || p->term))
        return true;
    return false;
  }
  bool any_may_end_association() const {
    for (const auto& p : peers)
      if (p && p->may_end_association) return true;
    return false;
  }

  // The end of the input: the hosts read everything, then the checks, then they close.
  void finish() {
    for (auto& p : peers) {
      if (!p) continue;
      p->window = 0;
      p->recv_chunk = 0;
    }
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < kPeers; ++i) {
        if (!peers[i]) continue;
        read(*peers[i], 0);
      }
    }
    for (auto& p : peers) {
      if (!p) continue;
      validate_output(*p);
      const bool truncated = p->parsed != p->out.size();
      // A connection cut while its host was not reading may end inside a PDU.
      check(!truncated || (p->gone && p->send_blocked) || p->reset,
            "the target's stream ends inside a PDU");
      if (p->term && !p->reset) check(p->write_shut || p->gone, "no FIN after a C2HTermReq");
      // Ended by the target, by itself: the host must have been told why.
      const bool explained = p->term || p->eof || p->reset || p->host_term ||
                             any_ended_other_than(*p) || any_may_end_association() ||
                             time_advanced >= 100'000'000;  // keep-alive: 100 ms units
      check(!p->gone || explained, "the target closed a connection without a C2HTermReq");
    }
    for (auto& p : peers)
      if (p) p->eof = true;
    w.settle();
    for (int i = 0; i < 3000 && connections() > 0; ++i) advance(1'000'000);  // linger: 2 s
    check(connections() == 0, "a connection outlives its host's close");
    for (auto& p : peers)
      if (p) check(p->gone, "a socket the target still holds");
    // Every data buffer is back: free in the pool, or in the group's cache.
    const std::size_t cached =
        w.on_group([&] { return transport->group_of(*w.tgt->groups()[0])->cached_buffers(); });
    check(transport->pool().available_approx() + cached == transport->pool().capacity(),
          "a data buffer was not given back");
  }
};


// PLEN and digests of a PDU the input wrote, made right unless the opcode says not to.
void fix_pdu(std::vector<uint8_t>& pdu, uint8_t op) {
  if (pdu.size() < nt::kCommonHeaderLength) return;
  if ((op & 0x08) == 0) {
    const uint32_t plen = static_cast<uint32_t>(pdu.size());
    std::memcpy(pdu.data() + 4, &plen, 4);
  }
  if (op & 0x10) return;
  const uint8_t flags = pdu[1], hlen = pdu[2], pdo = pdu[3];
  if ((flags & nt::flags::kHdgst) && hlen >= nt::kCommonHeaderLength && pdu.size() >= hlen + 4u) {
    const uint32_t d = crc32c(pdu.data(), hlen);
    std::memcpy(pdu.data() + hlen, &d, 4);
  }
  if ((flags & nt::flags::kDdgst) && pdo != 0 && pdu.size() >= pdo + 4u) {
    const uint32_t d = crc32c(pdu.data() + pdo, pdu.size() - pdo - 4);
    std::memcpy(pdu.data() + pdu.size() - 4, &d, 4);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const bool poisoned = [] {
    pollux::env::poison_free_dma_buffers(true);
    return true;
  }();
  (void)poisoned;
  Reader in{data, size};
  uint8_t config = 0;
  in.take(&config, 1);
  Rig rig(config);
  for (uint8_t op = 0; in.take(&op, 1);) {
    uint16_t u16 = 0;
    switch (op & 7) {
      case 0:
      case 1: {
        if (!in.get(&u16)) break;
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(u16, &got);
        std::vector<uint8_t> bytes(b, b + got);
        if ((op & 7) == 1) fix_pdu(bytes, op);
        rig.deliver(rig.peer(), bytes.data(), bytes.size());
        break;
      }
      case 2: {
        uint8_t idx = 0;
        if (in.take(&idx, 1)) rig.current = idx % kPeers;
        break;
      }
      case 3: {
        uint8_t e = 0;
        if (in.take(&e, 1)) rig.advance(uint64_t{1} << (e % 32));
        break;
      }
      case 4: {
        if (in.get(&u16)) rig.read(rig.peer(), u16);
        break;
      }
      case 5: {
        if (!in.get(&u16)) break;
        Peer& p = rig.peer();
        (op & 0x08 ? p.recv_chunk : p.window) = u16;
        rig.w.settle();
        break;
      }
      case 6:
        rig.peer().eof = true;
        rig.w.settle();
        break;
      default:
        rig.peer().reset = true;
        rig.w.settle();
    }
  }
  rig.finish();
  return 0;
}
