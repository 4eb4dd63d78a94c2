// Pollux's NVMe/TCP host (fabric/tcp's TcpTransport and TcpQueue under the driver's Controller
// and Qpair) behind a hostile network: a man in the middle between it and a real Pollux
// target, in process on a SimNetwork in virtual time. What the host sends reaches the target
// unchanged; what the target sends back reaches the host as the input says — PDU by PDU as it
// is, with a byte changed, cut, dropped, preceded by other bytes — so a mutation can strike at
// any point of the conversation (ICResp, Connect, Identify, R2T, C2HData, responses).
//
// Input: one configuration byte, then records, each taken when the target has sent something
// the host has not yet been given (opcode byte, low 3 bits):
//   0            the next PDU (by its PLEN) goes to the host as it is
//   1 OFF(2) X(1) the next PDU goes with its byte OFF % PLEN XORed with X (0: with 0x80)
//   2 N(2)       the next N % 4096 + 1 bytes go as they are (PDU boundaries lost)
//   3            the next PDU is dropped
//   4 LEN(1) B   LEN bytes of the input go to the host first
//   5            the connection is closed, both ways
//   6 E(1)       virtual time moves on 2^(E % 30) ns first
//   7 P(4)       the next PDU goes with its PLEN set to P
// When the records run out, everything goes as it is. Configuration byte: bit 0 header
// digest, bit 1 data digest, bit 2 C2HData SUCCESS off at the target, bit 3 no in-capsule
// data (writes go by R2T).
//
// The host attaches, opens an I/O queue, and writes and reads 4 KiB and 16 KiB.
// What must hold: no crash, hang or sanitizer report; attach and every command end — with
// success or an error, never twice: every I/O callback runs exactly once, by the time its
// queue pair is freed; the controller detaches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "driver/env/dma_memory.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/transport_id.h"
#include "fabric/net/sim_network.h"
#include "fabric/tcp/host.h"
#include "fabric/tcp/target_transport.h"
#include "tests/fuzz/target_world.h"

namespace {

namespace net = pollux::fabric::net;
namespace tcp = pollux::fabric::tcp;
namespace nvme = pollux::nvme;
namespace env = pollux::env;
namespace sn = pollux::spec::nvme;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr char kNqn[] = "nqn.2026-11.io.pollux:tcp-host-fuzz";
constexpr char kTarget[] = "10.0.0.1";  // the real target listens here
constexpr char kFront[] = "10.0.0.9";   // the host connects here: the man in the middle
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

// One host connection and its twin towards the target.
struct Relay {
  std::unique_ptr<net::Socket> host, target;
  std::vector<uint8_t> up, down;  // not yet delivered: host -> target, target -> host
  bool closed = false;
};

// Sends what it can of `buf` (the rest stays); false when the socket is gone.
bool send_some(net::Socket& s, std::vector<uint8_t>& buf, std::size_t n) {
  n = std::min(n, buf.size());
  if (n == 0) return true;
  iovec v{buf.data(), n};
  const ssize_t r = s.send(&v, 1);
  if (r < 0) return false;
  buf.erase(buf.begin(), buf.begin() + r);
  return true;
}
bool recv_all(net::Socket& s, std::vector<uint8_t>& into) {
  uint8_t b[16384];
  for (;;) {
    iovec v{b, sizeof b};
    const ssize_t r = s.recv(&v, 1);
    if (r == net::kAgain) return true;
    if (r < 0) return false;
    into.insert(into.end(), b, b + r);
  }
}

struct Rig {
  pollux::fuzz::TargetWorld w;
  net::SimNetwork net{w.clock, 1};
  std::unique_ptr<net::Listener> front;
  std::vector<Relay> relays;
  Reader& in;
  bool in_pump = false;

  Rig(Reader& input, uint8_t config) : in(input) {
    w.add_malloc("Malloc0", 256, 512);
    w.on_app([&] {
      tcp::TcpTargetOptions o;
      o.c2h_success = (config & 4) == 0;
      o.in_capsule_data_size = (config & 8) ? 0 : 8192;
      o.num_shared_buffers = 16;
      o.buf_cache_size = 4;
      auto tr = tcp::TcpTargetTransport::create(*w.tgt, o, &net);
      check(tr.ok(), "the TCP transport");
      check(w.tgt->add_transport(std::move(tr).value()).ok(), "add the transport");
      w.add_open_subsystem(kNqn, "Malloc0", {"TCP", "IPv4", kTarget, "4420"});
    });
    w.settle();
    auto l = net.listen("IPv4", kFront, "4420");
    check(l.ok(), "the front listener");
    front = std::move(l).value();
    net.set_wait_hook([this] { pump(); });
  }
  ~Rig() {
    relays.clear();
    w.stop_target([this] { pump(); });
  }

  // The next PDU's length in `down`, or 0 while its header has not all come.
  static std::size_t pdu_len(const std::vector<uint8_t>& d) {
    if (d.size() < 8) return 0;
    uint32_t plen;
    std::memcpy(&plen, d.data() + 4, 4);
    if (plen < 8) plen = 8;  // garbage: taken as its 8-byte header
    return plen <= d.size() ? plen : 0;
  }
  void give(Relay& r, std::size_t n) {  // the first n bytes of down go to the host
    std::vector<uint8_t> out(r.down.begin(), r.down.begin() + static_cast<long>(n));
    r.down.erase(r.down.begin(), r.down.begin() + static_cast<long>(n));
    if (!r.closed) pending_to_host(r).insert(pending_to_host(r).end(), out.begin(), out.end());
  }
  std::vector<uint8_t>& pending_to_host(Relay& r) { return to_host_[&r - relays.data()]; }
  void close(Relay& r) {
    r.closed = true;
    r.host.reset();
    r.target.reset();
    r.down.clear();
    r.up.clear();
  }

  // One record applied to what the target sent on r; false: wait for more bytes.
  bool apply(Relay& r) {
    uint8_t code = 0;
    const std::size_t plen = pdu_len(r.down);
    if (in.left == 0) {  // no more records: everything as it is
      give(r, r.down.size());
      return true;
    }
    // Records that need a whole PDU wait for one (the peek does not consume).
    code = in.p[0];
    const uint8_t op = code & 7;
    if ((op == 0 || op == 1 || op == 3 || op == 7) && plen == 0) return false;
    in.take(&code, 1);
    switch (op) {
      case 0:
        give(r, plen);
        break;
      case 1: {
        uint16_t off = 0;
        uint8_t x = 0;
        in.get(&off);
        in.get(&x);
        r.down[off % plen] ^= x ? x : 0x80;
        give(r, plen);
        break;
      }
      case 2: {
        uint16_t n = 0;
        in.get(&n);
        give(r, std::min<std::size_t>(n % 4096 + 1, r.down.size()));
        break;
      }
      case 3:
        r.down.erase(r.down.begin(), r.down.begin() + static_cast<long>(plen));
        break;
      case 4: {
        uint8_t len = 0;
        in.get(&len);
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(len, &got);
        auto& p = pending_to_host(r);
        p.insert(p.end(), b, b + got);
        break;
      }
      case 5:
        close(r);
        break;
      case 6: {
        uint8_t e = 0;
        in.get(&e);
        w.clock.advance(uint64_t{1} << (e % 30));
        break;
      }
      default: {
        uint32_t p = 0;
        in.get(&p);
        std::memcpy(r.down.data() + 4, &p, 4);
        give(r, plen);
      }
    }
    return true;
  }

  // One turn: the target, new connections, both directions of every relay; time moves on a
  // little, or to the network's next event (at most 1 ms) when nothing moved.
  void pump() {
    if (in_pump) return;
    in_pump = true;
    bool work = w.fw->step();
    while (auto s = front->accept()) {
      auto t = net.connect(kTarget, "4420");
      Relay r;
      r.host = std::move(s);
      if (t.ok()) r.target = std::move(t).value();
      if (!r.target) r.closed = true;
      relays.push_back(std::move(r));
      to_host_.resize(relays.size());
      work = true;
    }
    for (Relay& r : relays) {
      if (r.closed) continue;
      const std::size_t before = r.down.size() + r.up.size();
      bool ok = recv_all(*r.host, r.up) && send_some(*r.target, r.up, r.up.size()) &&
                recv_all(*r.target, r.down);
      while (ok && !r.closed && !r.down.empty() && apply(r)) {
      }
      if (!r.closed) ok = ok && send_some(*r.host, pending_to_host(r), SIZE_MAX);
      if (!ok) close(r);
      work |= r.down.size() + r.up.size() != before;
    }
    const uint64_t now = w.clock.now();
    uint64_t next = now + 1000;
    if (!work) next = std::max(now + 1, std::min(now + 1'000'000, net.next_event_ns()));
    w.clock.set(next);
    in_pump = false;
  }

  std::vector<std::vector<uint8_t>> to_host_;  // given to the host, not yet sent
};

struct Done {
  int calls = 0;
  uint16_t status = 0;
};
void on_done(void* ctx, const sn::CompletionEntry& e) {
  auto* d = static_cast<Done*>(ctx);
  ++d->calls;
  d->status = e.status >> 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Reader in{data, size};
  uint8_t config = 0;
  in.get(&config);
  Rig rig(in, config);
  nvme::TransportId trid;
  trid.trtype = nvme::TransportType::kTcp;
  trid.traddr = kFront;
  trid.trsvcid = "4420";
  trid.subnqn = kNqn;
  tcp::TcpOptions to;
  to.header_digest = (config & 1) != 0;
  to.data_digest = (config & 2) != 0;
  to.connect_timeout_ms = 100;
  to.network = &rig.net;
  nvme::ControllerOptions co;
  co.clock = &rig.w.clock;
  co.wait_hook = [&] { rig.pump(); };
  co.hostnqn = "nqn.2026-11.io.pollux:fuzz-host";
  co.admin_timeout_us = 200'000;
  co.io_queues_requested = 1;
  co.keep_alive_timeout_ms = 1000;
  auto t = tcp::TcpTransport::create(trid, to);
  check(t.ok(), "the TCP transport");
  auto c = nvme::Controller::attach(std::move(t).value(), co);
  if (g_debug && !c.ok()) std::fprintf(stderr, "attach: %s\n", c.error().message.c_str());
  if (!c.ok()) return 0;
  std::unique_ptr<nvme::Controller> ctrl = std::move(c).value();
  nvme::QpairOptions qo;
  qo.queue_size = 16;
  qo.timeout_us = 100'000;
  auto q = ctrl->alloc_io_qpair(qo);
  if (g_debug && !q.ok()) std::fprintf(stderr, "I/O queue: %s\n", q.error().message.c_str());
  const nvme::Namespace* ns = ctrl->ns(1);
  if (q.ok() && ns != nullptr && ns->block_size == 512) {
    std::unique_ptr<nvme::Qpair> qp = std::move(q).value();
    auto mem =
        env::DmaRegion::create(env::MemoryRegistry::global(), 64 * 1024, env::DmaOptions{false});
    check(mem.ok(), "host buffers");
    auto* b = static_cast<uint8_t*>(mem.value()->data());
    for (std::size_t i = 0; i < 20 * 1024; ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
    // The 16 KiB read ends where the region does: a write past it leaves the DMA memory.
    Done d[4];
    const int rc[4] = {qp->write(*ns, b, 0, 8, on_done, &d[0]),
                       qp->write(*ns, b + 4096, 8, 32, on_done, &d[1]),
                       qp->read(*ns, b + 32768, 0, 8, on_done, &d[2]),
                       qp->read(*ns, b + 49152, 8, 32, on_done, &d[3])};
    auto done = [&] {
      for (int i = 0; i < 4; ++i)
        if (rc[i] == 0 && d[i].calls == 0) return false;
      return true;
    };
    for (int i = 0; i < 200000 && !done(); ++i) {
      qp->process_completions();
      ctrl->process_admin_completions();
      rig.pump();
    }
    (void)ctrl->free_io_qpair(std::move(qp));
    for (int i = 0; i < 4; ++i) {
      if (g_debug)
        std::fprintf(stderr, "io %d: rc %d calls %d status %#x\n", i, rc[i], d[i].calls,
                     d[i].status);
      if (rc[i] == 0) check(d[i].calls == 1, "an I/O did not end exactly once");
    }
  }
  ctrl.reset();  // detaches: the host's queues close
  return 0;
}
