// The Pollux RNIC (emulator/rnic) at its device boundary, driven by a hostile host and a
// hostile peer at once: any mailbox command, any bytes in its rings (WQEs, SGEs pointing
// anywhere), any doorbell value, any register write, and any packet on its port — with its
// ICRC made right, so mutations reach past the check — in virtual time.
//
// Each input runs on a fresh NIC (port address 1) enabled by an honest driver: 64 KiB of host
// memory at IOVA 1 MiB (a heap buffer of exactly that size behind HostMemory::translate), the
// command mailbox at its start. Its packets leave on a Wire to port 2 (the peer the input
// speaks for) or 3, where they are checked. Records, each starting with an opcode byte (low 3
// bits):
//   0 OPC(1) IN(56)            a mailbox command (written at the mailbox, then the doorbell)
//   1 OFF(2) LEN(1) BYTES      bytes written into host memory at OFF (WQEs, SGE data, rings)
//   2 OFF(2) VAL(4)            a store to the doorbell page at OFF (aligned to 4); opcode bit
//                              3: to the push window at OFF * 4 instead (WQEs and their counts)
//   3 SRC(1) LEN(2) BYTES      a packet from port SRC % 4 (ICRC appended; opcode bit 3: as is)
//   4 N(1)                     N rounds of work: process, the wire delivers, 1 us passes
//   5 E(1)                     virtual time moves on 2^(E % 32) ns (ACK and RNR timers)
//   6 OFF(1) VAL(4)            a register write at OFF * 4 (control, mailbox address, ...)
//   7 CQN(1) N(2)              the host returns N entries of CQ CQN (its consumer doorbell)
//
// What must hold: no crash, hang or sanitizer report; the NIC writes host memory only inside
// the mailbox (when a command runs), the rings of its live CQs and EQ, and memory regions that
// allow local write — never a send or receive queue, never anything else (the whole buffer is
// compared before and after each step); every command is answered with a defined status; every
// CQE it writes has a defined status and opcode and names a QP; every packet it sends is a
// well-formed RC packet with a correct ICRC; and at the end it still answers QUERY_DEVICE.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "emulator/rnic/rnic.h"
#include "emulator/rnic/wire.h"
#include "spec/rnic.h"
#include "spec/roce.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

namespace sr = pollux::spec::rnic;
namespace roce = pollux::spec::roce;
namespace op = pollux::spec::roce::opcode;
using pollux::emu::rnic::HostMemory;
using pollux::emu::rnic::packet_icrc;
using pollux::emu::rnic::Rnic;
using pollux::emu::rnic::Wire;
using pollux::emu::rnic::WirePort;
using pollux::fuzz::check;
using pollux::fuzz::fail;
using pollux::fuzz::Reader;

constexpr uint64_t kIova = 1ull << 20;
constexpr std::size_t kMemory = 64 * 1024;
constexpr uint64_t kNic = 1, kPeer = 2, kOther = 3;
const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

class FuzzMemory final : public HostMemory {
 public:
  explicit FuzzMemory(uint8_t* base) : base_(base) {}
  uint8_t* translate(uint64_t iova, std::size_t len) override {
    if (iova < kIova || len > kMemory || iova - kIova > kMemory - len) return nullptr;
    return base_ + (iova - kIova);
  }

 private:
  uint8_t* base_;
};

// Every packet the NIC sends must be a well-formed RC packet.
class CheckingPort final : public WirePort {
 public:
  void receive(uint64_t, const uint8_t* b, std::size_t n) override {
    ++packets;
    check(n >= sizeof(roce::Bth) + roce::kIcrcBytes, "a packet shorter than BTH + ICRC");
    check(packet_icrc(b, n - 4) == roce::load_be32(b + n - 4), "a packet with a wrong ICRC");
    roce::Bth bth;
    std::memcpy(bth.b, b, sizeof bth.b);
    const uint8_t code = bth.opcode();
    check(op::transport(code) == op::kTransportRc && code <= op::kAcknowledge,
          "a packet with an opcode RC does not define");
    check(bth.tver() == 0 && bth.pkey() == roce::kDefaultPkey, "BTH TVer or P_Key");
    std::size_t hdr = sizeof(roce::Bth) + (op::has_reth(code) ? sizeof(roce::Reth) : 0) +
                      (op::has_aeth(code) ? sizeof(roce::Aeth) : 0) +
                      (op::has_immediate(code) ? 4 : 0);
    const std::size_t tail = roce::kIcrcBytes + bth.pad_count();
    check(n >= hdr + tail, "a packet shorter than its headers");
    const std::size_t payload = n - hdr - tail;
    check(op::has_payload(code) || payload == 0, "payload on a packet that carries none");
    check(payload <= 4096, "a payload larger than the largest MTU");
    check((payload + bth.pad_count()) % 4 == 0, "PadCount does not align the payload");
    if (g_debug)
      std::fprintf(stderr, "tx op %#x qp %u psn %u payload %zu\n", code, bth.dest_qp(),
                   bth.psn(), payload);
  }
  uint64_t packets = 0;
};

struct Range {
  uint64_t iova, len;
  bool contains(uint64_t a) const { return a >= iova && a - iova < len; }
};

struct Rig {
  std::unique_ptr<uint8_t[]> mem{new uint8_t[kMemory]()};
  std::unique_ptr<uint8_t[]> doorbells{new uint8_t[sr::reg::kDoorbellSize]()};
  std::unique_ptr<uint8_t[]> push{new uint8_t[sr::reg::kPushSize]()};
  FuzzMemory host{mem.get()};
  Wire wire{1};
  CheckingPort peer, other;
  Rnic nic{host, doorbells.get(), kNic, {}, push.get()};
  uint64_t now = 0;
  uint64_t cmd_addr = kIova;

  // What the NIC may write, as the harness learnt it from the commands it saw succeed.
  struct MrInfo {
    uint32_t key;
    Range r;
    bool local_write;
  };
  std::vector<MrInfo> mrs;
  struct Ring {
    uint32_t handle;
    Range r;
    uint32_t log;
  };
  std::vector<Ring> cqs;
  bool have_eq = false;
  Range eq{};
  std::vector<uint8_t> before;

  Rig() {
    wire.attach(kNic, &nic);
    wire.attach(kPeer, &peer);
    wire.attach(kOther, &other);
    nic.connect(&wire);
    nic.write64(sr::reg::kCmdAddr, kIova);
    nic.write32(sr::reg::kControl, sr::control::kEnable);
    check(nic.read32(sr::reg::kStatus) == sr::status::kReady, "the NIC enables");
    before.assign(mem.get(), mem.get() + kMemory);
  }
  ~Rig() { wire.detach(kNic); }

  void forget_all() {
    mrs.clear();
    cqs.clear();
    have_eq = false;
  }

  // ---- the write check: `before` is host memory as the harness last saw it (its own writes
  // mirrored into it); after each step of the NIC's, every byte that changed must be one the
  // NIC may write. The NIC writes host memory only when it works (a register write, process()):
  // a packet it receives waits in its queue.
  void mirror(std::size_t off, std::size_t len) {
    std::memcpy(before.data() + off, mem.get() + off, len);
  }
  bool allowed(uint64_t a, bool command_ran) const {
    if (command_ran && a >= cmd_addr && a - cmd_addr < sizeof(sr::CommandMailbox)) return true;
    if (have_eq && eq.contains(a)) return true;
    for (const Ring& c : cqs)
      if (c.r.contains(a)) return true;
    for (const MrInfo& m : mrs)
      if (m.local_write && m.r.contains(a)) return true;
    return false;
  }
  void compare(bool command_ran) {
    // Most steps write nothing: one memcmp (ASan checks each call's ranges, libFuzzer traces
    // it), then by block, and bytes only where a block differs.
    if (std::memcmp(mem.get(), before.data(), kMemory) == 0) return;
    constexpr std::size_t kBlock = 256;
    std::size_t changed[kMemory / kBlock], n = 0;
    for (std::size_t b = 0; b < kMemory; b += kBlock) {
      if (std::memcmp(mem.get() + b, before.data() + b, kBlock) == 0) continue;
      changed[n++] = b;
      for (std::size_t i = b; i < b + kBlock; ++i) {
        if (mem[i] == before[i]) continue;
        const uint64_t a = kIova + i;
        if (!allowed(a, command_ran)) {
          std::fprintf(stderr, "the NIC wrote host memory at %#llx\n",
                       static_cast<unsigned long long>(a));
          fail("the NIC wrote outside its mailbox, CQ/EQ rings and writable memory regions");
        }
      }
    }
    if (n == 0) return;
    check_new_cqes();
    for (std::size_t i = 0; i < n; ++i) mirror(changed[i], kBlock);
  }
  // Whether r shares a byte with anything else the NIC may write (then its bytes may be data).
  bool shared(const Ring& c) const {
    auto overlap = [&](const Range& x) {
      return x.iova < c.r.iova + c.r.len && c.r.iova < x.iova + x.len;
    };
    if (overlap({cmd_addr, sizeof(sr::CommandMailbox)}) || (have_eq && overlap(eq))) return true;
    for (const Ring& o : cqs)
      if (&o != &c && overlap(o.r)) return true;
    for (const MrInfo& m : mrs)
      if (m.local_write && overlap(m.r)) return true;
    return false;
  }
  void check_new_cqes() {
    for (const Ring& c : cqs) {
      if (shared(c)) continue;
      const std::size_t entries = std::size_t{1} << c.log;
      for (std::size_t e = 0; e < entries; ++e) {
        const std::size_t off = (c.r.iova - kIova) + e * sizeof(sr::Cqe);
        if (off + sizeof(sr::Cqe) > kMemory) break;
        if (std::memcmp(mem.get() + off, before.data() + off, sizeof(sr::Cqe)) == 0) continue;
        sr::Cqe q;
        std::memcpy(&q, mem.get() + off, sizeof q);
        const auto st = static_cast<sr::WcStatus>(q.status);
        switch (st) {
          case sr::WcStatus::kSuccess: case sr::WcStatus::kLocLenErr:
          case sr::WcStatus::kLocQpOpErr: case sr::WcStatus::kLocProtErr:
          case sr::WcStatus::kWrFlushErr: case sr::WcStatus::kBadRespErr:
          case sr::WcStatus::kLocAccessErr: case sr::WcStatus::kRemInvReqErr:
          case sr::WcStatus::kRemAccessErr: case sr::WcStatus::kRemOpErr:
          case sr::WcStatus::kRetryExcErr: case sr::WcStatus::kRnrRetryExcErr:
          case sr::WcStatus::kFatalErr: case sr::WcStatus::kGeneralErr:
            break;
          default:
            fail("a CQE with a status the verbs do not define");
        }
        const auto oc = static_cast<sr::WcOpcode>(q.opcode);
        check(oc == sr::WcOpcode::kSend || oc == sr::WcOpcode::kRdmaWrite ||
                  oc == sr::WcOpcode::kRdmaRead || oc == sr::WcOpcode::kRecv ||
                  oc == sr::WcOpcode::kRecvRdmaWithImm,
              "a CQE with an opcode the verbs do not define");
        check(q.qpn >= sr::kFirstQpn && q.qpn < sr::kMaxQp, "a CQE naming no QP");
        if (g_debug)
          std::fprintf(stderr, "cq %u: qp %u wr_id %llu status %u opcode %u len %u\n", c.handle,
                       q.qpn, static_cast<unsigned long long>(q.wr_id), q.status, q.opcode,
                       q.byte_len);
      }
    }
  }

  // ---- the host's actions.
  void command(uint8_t opcode, const uint8_t* in) {
    const bool mailbox_ok = cmd_addr % 64 == 0 && host.translate(cmd_addr, 128) != nullptr;
    sr::CommandMailbox m{};
    m.opcode = opcode;
    m.owner = sr::kOwnerDevice;
    std::memcpy(m.in, in, sizeof m.in);
    uint8_t* at = mailbox_ok ? host.translate(cmd_addr, 128) : nullptr;
    if (at != nullptr) {
      std::memcpy(at, &m, sizeof m);
      mirror(static_cast<std::size_t>(at - mem.get()), sizeof m);
    }
    nic.write32(sr::reg::kCmdDoorbell, 1);
    compare(mailbox_ok);
    if (!mailbox_ok) return;
    sr::CommandMailbox out;
    std::memcpy(&out, at, sizeof out);
    check(out.owner == sr::kOwnerHost, "a command never answered");
    check(out.status <= static_cast<uint8_t>(sr::CmdStatus::kNotEnabled),
          "a command status the device does not define");
    if (g_debug)
      std::fprintf(stderr, "command %#x: status %u syndrome %#x out %02x%02x%02x%02x\n", opcode,
                   out.status, out.syndrome, out.out[0], out.out[1], out.out[2], out.out[3]);
    if (out.status != 0) return;
    learn(static_cast<sr::CmdOpcode>(opcode), m, out);
  }
  void learn(sr::CmdOpcode code, const sr::CommandMailbox& in, const sr::CommandMailbox& out) {
    auto get = [](const uint8_t* p, auto* v) { std::memcpy(v, p, sizeof *v); };
    switch (code) {
      case sr::CmdOpcode::kRegMr: {
        sr::RegMrIn r;
        get(in.in, &r);
        sr::RegMrOut o;
        get(out.out, &o);
        mrs.push_back({o.lkey, {r.iova, r.length}, (r.access & sr::access::kLocalWrite) != 0});
        break;
      }
      case sr::CmdOpcode::kDeregMr: {
        sr::HandleIn h;
        get(in.in, &h);
        std::erase_if(mrs, [&](const MrInfo& m) { return m.key == h.handle; });
        break;
      }
      case sr::CmdOpcode::kCreateCq: {
        sr::CreateCqIn c;
        get(in.in, &c);
        sr::HandleOut o;
        get(out.out, &o);
        cqs.push_back({o.handle, {c.ring_iova, sizeof(sr::Cqe) << c.log_size}, c.log_size});
        break;
      }
      case sr::CmdOpcode::kDestroyCq: {
        sr::HandleIn h;
        get(in.in, &h);
        std::erase_if(cqs, [&](const Ring& c) { return c.handle == h.handle; });
        break;
      }
      case sr::CmdOpcode::kCreateEq: {
        sr::CreateEqIn e;
        get(in.in, &e);
        have_eq = true;
        eq = {e.ring_iova, sizeof(sr::EventEntry) << e.log_size};
        break;
      }
      default:
        break;
    }
  }
  void work(int rounds) {
    for (int i = 0; i < rounds; ++i) {
      bool did = false;
      for (int k = 0; k < 64 && nic.process(now); ++k) did = true;
      compare(false);
      now += 1000;
      wire.deliver_until(now);
      if (!did && wire.idle() && !nic.busy()) break;
    }
  }
  void advance(uint64_t ns) {
    const uint64_t end = now + ns;
    // Timers fire on their own time: step to each one that falls before the end.
    for (int i = 0; i < 64; ++i) {
      const uint64_t next = std::min(nic.next_timer_ns(), wire.next_event_ns());
      if (next > end) break;
      now = std::max(now, next);
      wire.deliver_until(now);
      work(4);
    }
    now = std::max(now, end);
    wire.deliver_until(now);
    work(4);
  }
  void packet(uint64_t src, std::vector<uint8_t> bytes, bool add_icrc) {
    if (add_icrc) {
      uint8_t crc[4];
      roce::store_be32(crc, packet_icrc(bytes.data(), bytes.size()));
      bytes.insert(bytes.end(), crc, crc + 4);
    }
    nic.receive(src, bytes.data(), bytes.size());
    work(2);
  }
  void register_write(uint32_t offset, uint32_t value) {
    nic.write32(offset, value);
    if (offset == sr::reg::kControl && !(value & sr::control::kEnable)) forget_all();
    if (offset == sr::reg::kCmdAddr) cmd_addr = (cmd_addr & ~0xffffffffull) | value;
    if (offset == sr::reg::kCmdAddr + 4) cmd_addr = (cmd_addr & 0xffffffffull) | uint64_t{value} << 32;
    compare(offset == sr::reg::kCmdDoorbell);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Rig rig;
  Reader in{data, size};
  for (uint8_t code = 0; in.take(&code, 1);) {
    switch (code & 7) {
      case 0: {
        uint8_t opc = 0, body[56];
        if (!in.take(&opc, 1) || !in.take(body, sizeof body)) break;
        rig.command(opc, body);
        break;
      }
      case 1: {
        uint16_t off = 0;
        uint8_t len = 0;
        if (!in.get(&off) || !in.get(&len)) break;
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(len, &got);
        const std::size_t at = off % kMemory;
        std::memcpy(rig.mem.get() + at, b, std::min(got, kMemory - at));
        rig.mirror(at, std::min(got, kMemory - at));
        break;
      }
      case 2: {
        uint16_t off = 0;
        uint32_t v = 0;
        if (!in.get(&off) || !in.get(&v)) break;
        if (code & 8) {
          std::memcpy(rig.push.get() + (uint32_t{off} * 4) % sr::reg::kPushSize, &v, 4);
        } else {
          std::memcpy(rig.doorbells.get() + (off % sr::reg::kDoorbellSize) / 4 * 4, &v, 4);
        }
        break;
      }
      case 3: {
        uint8_t src = 0;
        uint16_t len = 0;
        if (!in.get(&src) || !in.get(&len)) break;
        std::size_t got = 0;
        const uint8_t* b = in.take_up_to(len, &got);
        const uint64_t from = src % 4;  // 2 is the peer; 1 (itself), 0 and 3 are strangers
        rig.packet(from, std::vector<uint8_t>(b, b + got), (code & 8) == 0);
        break;
      }
      case 4: {
        uint8_t n = 0;
        if (in.get(&n)) rig.work(1 + n % 32);
        break;
      }
      case 5: {
        uint8_t e = 0;
        if (in.get(&e)) rig.advance(uint64_t{1} << (e % 32));
        break;
      }
      case 6: {
        uint8_t off = 0;
        uint32_t v = 0;
        if (in.get(&off) && in.get(&v)) rig.register_write(uint32_t{off} * 4, v);
        break;
      }
      default: {
        uint8_t cqn = 0;
        uint16_t n = 0;
        if (!in.get(&cqn) || !in.get(&n)) break;
        const uint32_t at = sr::reg::cq_doorbell(cqn) - sr::reg::kDoorbellBase;
        uint32_t v;
        std::memcpy(&v, rig.doorbells.get() + at, 4);
        v += n;
        std::memcpy(rig.doorbells.get() + at, &v, 4);
        rig.work(2);
      }
    }
  }
  rig.work(32);
  if (g_debug) {
    std::fprintf(stderr, "WQEs pushed: %llu\n",
                 static_cast<unsigned long long>(rig.nic.counters().pushed_wqes));
  }
  // The NIC still answers, and honestly: QUERY_DEVICE at a mailbox of its own.
  rig.register_write(sr::reg::kControl, sr::control::kEnable);  // (re-)enabled if it was not
  rig.register_write(sr::reg::kCmdAddr, static_cast<uint32_t>(kIova));
  rig.register_write(sr::reg::kCmdAddr + 4, static_cast<uint32_t>(kIova >> 32));
  const uint8_t none[56] = {};
  rig.command(static_cast<uint8_t>(sr::CmdOpcode::kQueryDevice), none);
  sr::CommandMailbox m;
  std::memcpy(&m, rig.mem.get(), sizeof m);
  check(m.status == 0, "QUERY_DEVICE fails after the input");
  return 0;
}
