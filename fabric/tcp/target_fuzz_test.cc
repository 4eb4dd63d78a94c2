// The target against a hostile stream: at least 100,000 PDUs, most of them what a correct host
// sends and the rest mutated (bit flips, header fields, SQE fields, SGLs, lengths, digests,
// truncation, junk, unsolicited data), from raw sockets at three depths: before the ICReq, on
// a connected admin queue, on a connected I/O queue with R2T flows answered. What must hold:
// - every PDU the target sends is well formed (type, HLEN, PLEN, digests as negotiated);
// - a connection the target ends gets a C2HTermReq with a defined FES and the header in error,
//   then EOF; it closes without one only after the host's own H2CTermReq or a Disconnect;
// - the target never stalls (it keeps reading or writing), never crashes, closes every
//   connection the hosts closed, and a Pollux host on another subsystem keeps doing verified
//   I/O throughout.
// POLLUX_FUZZ_SEED and POLLUX_FUZZ_PDUS (default 100000) choose the run; the seed is printed.
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "driver/bdev/modules/malloc.h"
#include "fabric/tcp/live_target.h"
#include "fabric/tcp/raw_host.h"

namespace pollux::fabric::tcp::testing {
namespace {

constexpr char kFuzzNqn[] = "nqn.2026-11.io.pollux:hostile-stream-under-test";
constexpr uint64_t kFuzzBlocks = 8192;  // 4 MiB of 512-byte blocks
constexpr uint32_t kBlock = 512;
constexpr int kStallMs = 5000;  // the target neither read nor wrote for this long: a stall

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : dflt;
}

struct Rng {
  std::mt19937_64 g;
  uint64_t below(uint64_t n) { return n == 0 ? 0 : g() % n; }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  uint8_t byte() { return static_cast<uint8_t>(g()); }
};

struct Totals {
  uint64_t pdus = 0, mutated = 0, sessions = 0, terminated = 0, closed_by_host_pdu = 0, r2ts = 0,
           responses = 0, c2h_data = 0, host_checks = 0;
};

// Follows the bytes sent the way the target frames them (each PDU's PLEN), to know whether the
// target can have seen an H2CTermReq or a Disconnect — the only reasons to close silently.
class SentFramer {
 public:
  void feed(const uint8_t* p, std::size_t n) {
    while (n > 0 && !lost_) {
      if (skip_ > 0) {
        const std::size_t k = std::min<std::size_t>(skip_, n);
        skip_ -= k, p += k, n -= k;
        continue;
      }
      head_.push_back(*p++), --n;
      if (head_.size() == 8) {
        std::memcpy(&plen_, head_.data() + 4, 4);
        if (plen_ < 8) lost_ = true;  // the target ends the connection here
        if (head_[0] == nt::pdu::kH2cTermReq) may_close_ = true;
      }
      if (head_.size() == 16 || (head_.size() >= 8 && head_.size() == plen_)) {
        if (head_[0] == nt::pdu::kCapsuleCmd && head_.size() >= 13 &&
            head_[8] == nf::kOpcodeFabrics && head_[12] == nf::fctype::kDisconnect)
          may_close_ = true;
        skip_ = plen_ - static_cast<uint32_t>(head_.size());
        head_.clear();
      }
    }
  }
  bool may_close_silently() const { return may_close_; }

 private:
  std::vector<uint8_t> head_;
  uint32_t plen_ = 0;
  uint64_t skip_ = 0;
  bool lost_ = false, may_close_ = false;
};

// One raw connection's traffic: sends without blocking while draining what comes back, checks
// every PDU received, and answers R2Ts.
class Wire {
 public:
  Wire(Raw& r, Totals& t, std::string where) : r_(r), t_(t), where_(std::move(where)) {}
  void digests(bool hd, bool dd) { hd_ = hd, dd_ = dd; }

  // false once the connection is over (terminated or closed).
  bool send(const std::vector<uint8_t>& v) {
    framer_.feed(v.data(), v.size());
    std::size_t off = 0;
    while (off < v.size() && !over_) {
      const ssize_t n =
          ::send(r_.fd(), v.data() + off, v.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        // The target closed: what it said before must explain it.
        drain(true);
        return false;
      }
      if (!wait(POLLIN | POLLOUT)) return false;
      drain(false);
    }
    drain(false);
    return !over_;
  }
  // Reads what is there; with `to_end`, until EOF (the target closed, or must close).
  void drain(bool to_end) {
    uint8_t tmp[65536];
    while (!over_) {
      const ssize_t n = ::recv(r_.fd(), tmp, sizeof tmp, to_end ? 0 : MSG_DONTWAIT);
      if (n > 0) {
        in_.insert(in_.end(), tmp, tmp + n);
        parse();
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!to_end) return;
        ADD_FAILURE() << where_ << ": the target did not close within 5 s";
        over_ = true;
        return;
      }
      closed(n == 0 ? 0 : errno);  // EOF, or a reset
      return;
    }
  }
  // The host is done: half-close, then read until the target closes. Whatever it had taken
  // in, it has now judged (answers or a C2HTermReq), since TCP keeps the order.
  void finish() {
    if (over_) return;
    ::shutdown(r_.fd(), SHUT_WR);
    fin_sent_ = true;
    drain(true);
  }
  bool over() const { return over_; }
  bool terminated() const { return terminated_; }
  // R2Ts received and not yet answered.
  std::deque<nt::R2t>& r2ts() { return r2ts_; }

 private:
  bool wait(short events) {
    pollfd pf{r_.fd(), events, 0};
    if (::poll(&pf, 1, kStallMs) > 0) return true;
    ADD_FAILURE() << where_ << ": the target stalled (neither read nor wrote for 5 s)";
    over_ = true;
    return false;
  }
  void closed(int err) {
    over_ = true;
    if (!terminated_ && !fin_sent_ && !framer_.may_close_silently())
      ADD_FAILURE() << where_ << ": the target closed the connection without a C2HTermReq ("
                    << (err == 0 ? "EOF" : std::strerror(err)) << ")";
    if (!terminated_ && !fin_sent_) ++t_.closed_by_host_pdu;
  }
  void parse() {
    std::size_t at = 0;
    while (!over_ && in_.size() - at >= 8) {
      nt::CommonHeader ch;
      std::memcpy(&ch, in_.data() + at, sizeof ch);
      if (!well_formed(ch)) {
        over_ = true;
        return;
      }
      if (in_.size() - at < ch.plen) break;
      handle(ch, in_.data() + at);
      at += ch.plen;
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(at));
  }
  bool well_formed(const nt::CommonHeader& ch) {
    const bool known = ch.type == nt::pdu::kIcResp || ch.type == nt::pdu::kC2hTermReq ||
                       ch.type == nt::pdu::kCapsuleResp || ch.type == nt::pdu::kC2hData ||
                       ch.type == nt::pdu::kR2t;
    if (!known) {
      ADD_FAILURE() << where_ << ": the target sent PDU type " << int{ch.type};
      return false;
    }
    if (ch.hlen != nt::hlen_of(ch.type) || ch.plen < ch.hlen || ch.plen > (1u << 20) + 256) {
      ADD_FAILURE() << where_ << ": the target sent type " << int{ch.type} << " HLEN "
                    << int{ch.hlen} << " PLEN " << ch.plen;
      return false;
    }
    return true;
  }
  void handle(const nt::CommonHeader& ch, const uint8_t* p) {
    const bool digestable = ch.type != nt::pdu::kIcResp && ch.type != nt::pdu::kC2hTermReq;
    if (digestable && hd_) {
      uint32_t d;
      std::memcpy(&d, p + ch.hlen, 4);
      EXPECT_TRUE(ch.flags & nt::flags::kHdgst) << where_ << ": no HDGSTF";
      EXPECT_EQ(d, crc32c(p, ch.hlen)) << where_ << ": the target's header digest is wrong";
    }
    if (ch.type == nt::pdu::kC2hData) {
      ++t_.c2h_data;
      EXPECT_GE(ch.pdo, ch.hlen + (hd_ ? 4u : 0u)) << where_;
      EXPECT_LT(ch.pdo, ch.plen) << where_;
      if (dd_ && ch.pdo < ch.plen && ch.plen - ch.pdo > 4) {
        uint32_t d;
        std::memcpy(&d, p + ch.plen - 4, 4);
        EXPECT_EQ(d, crc32c(p + ch.pdo, ch.plen - ch.pdo - 4))
            << where_ << ": the target's data digest is wrong";
      }
    } else if (ch.type == nt::pdu::kCapsuleResp) {
      ++t_.responses;
    } else if (ch.type == nt::pdu::kR2t) {
      ++t_.r2ts;
      nt::R2t r;
      std::memcpy(&r, p, sizeof r);
      EXPECT_GT(r.r2tl, 0u) << where_ << ": an R2T for no data";
      r2ts_.push_back(r);
    } else if (ch.type == nt::pdu::kC2hTermReq) {
      nt::TermReq t;
      std::memcpy(&t, p, sizeof t);
      const uint16_t fes = t.fes;
      EXPECT_TRUE(fes >= nt::fes::kInvalidHeaderField && fes <= nt::fes::kUnsupportedParameter)
          << where_ << ": C2HTermReq FES " << fes;
      EXPECT_LE(ch.plen, nt::kTermReqMaxPlen) << where_;
      EXPECT_GE(ch.plen, nt::kTermReqHlen + 8u) << where_ << ": no header in error";
      if (fes == nt::fes::kInvalidHeaderField) {
        const uint32_t fei = t.fei;
        EXPECT_LT(fei, uint32_t{nt::kMaxHlen} + 4) << where_ << ": FEI beyond any header";
      }
      terminated_ = true;
      ++t_.terminated;
    } else if (ch.type == nt::pdu::kIcResp) {
      EXPECT_FALSE(ic_seen_) << where_ << ": a second ICResp";
      ic_seen_ = true;
    }
  }

  Raw& r_;
  Totals& t_;
  std::string where_;
  bool hd_ = false, dd_ = false, over_ = false, terminated_ = false, ic_seen_ = false,
       fin_sent_ = false;
  std::vector<uint8_t> in_;
  std::deque<nt::R2t> r2ts_;
  SentFramer framer_;
};

// What a correct host sends, then what a hostile one makes of it.
class Generator {
 public:
  Generator(Rng& rng, Totals& t) : rng_(rng), t_(t) {}
  void digests(bool hd, bool dd) { hd_ = hd, dd_ = dd; }

  std::vector<uint8_t> admin() {
    sn::SubmissionEntry e = sqe(0, cid());
    std::vector<uint8_t> data;
    switch (rng_.below(8)) {
      case 0:
        e.opcode = sn::admin::kKeepAlive;
        break;
      case 1:
        read_into(e, sn::admin::kIdentify, 4096), e.cdw10 = 1;
        break;
      case 2:
        read_into(e, sn::admin::kIdentify, 4096), e.nsid = 1, e.cdw10 = 0;
        break;
      case 3:  // SMART / health, 512 bytes
        read_into(e, sn::admin::kGetLogPage, 512), e.nsid = 0xffffffff;
        e.cdw10 = 0x02 | (127u << 16);
        break;
      case 4:
        e.opcode = sn::admin::kGetFeatures, e.cdw10 = 0x07;
        break;
      case 5:
        e.opcode = sn::admin::kSetFeatures, e.cdw10 = 0x0b, e.cdw11 = 0;
        break;
      case 6: {
        nf::PropertyGetCommand pg{};
        pg.opcode = nf::kOpcodeFabrics;
        pg.fctype = nf::fctype::kPropertyGet;
        pg.cid = e.cid;
        pg.ofst = sn::reg::kCsts;
        pg.attrib = 0;  // 4 bytes
        std::memcpy(&e, &pg, sizeof e);
        e.set_psdt(sn::kPsdtSglMptrContiguous);
        break;
      }
      default:  // Host Behavior Support, its 512 bytes in the capsule
        e.opcode = sn::admin::kSetFeatures, e.cdw10 = 0x16;
        data.assign(512, 0);
        e.dptr.sgl1 = nf::sgl::in_capsule(512);
        break;
    }
    return capsule(e, data.data(), static_cast<uint32_t>(data.size()), hd_, dd_);
  }

  std::vector<uint8_t> io() {
    sn::SubmissionEntry e = sqe(0, cid(), 1);
    std::vector<uint8_t> data;
    const uint32_t nlb = 1 + static_cast<uint32_t>(rng_.below(64));
    const uint64_t slba = rng_.below(kFuzzBlocks - 64);
    auto rw = [&](uint8_t op) {
      e.opcode = op;
      e.cdw10 = static_cast<uint32_t>(slba);
      e.cdw11 = static_cast<uint32_t>(slba >> 32);
      e.cdw12 = nlb - 1;
    };
    switch (rng_.below(6)) {
      case 0:
      case 1:
        rw(sn::nvm::kRead), e.dptr.sgl1 = nf::sgl::transport(nlb * kBlock);
        break;
      case 2:
        if (nlb * kBlock <= 4096) {  // in the capsule
          rw(sn::nvm::kWrite);
          data.resize(nlb * kBlock);
          for (auto& b : data) b = rng_.byte();
          e.dptr.sgl1 = nf::sgl::in_capsule(nlb * kBlock);
          break;
        }
        [[fallthrough]];
      case 3:
        rw(sn::nvm::kWrite), e.dptr.sgl1 = nf::sgl::transport(nlb * kBlock);
        break;  // by R2T
      case 4:
        e.opcode = sn::nvm::kFlush;
        break;
      default:
        rw(sn::nvm::kWriteZeroes);
        break;
    }
    return capsule(e, data.data(), static_cast<uint32_t>(data.size()), hd_, dd_);
  }

  // H2CData answering an R2T, in one or two PDUs.
  std::vector<std::vector<uint8_t>> answer(const nt::R2t& r) {
    std::vector<uint8_t> payload(r.r2tl);
    for (auto& b : payload) b = rng_.byte();
    if (r.r2tl < 2 * kBlock || rng_.chance(0.5))
      return {h2c(r.cccid, r.ttag, r.r2to, payload.data(), r.r2tl, true, hd_, dd_)};
    const uint32_t half = r.r2tl / 2;
    return {
        h2c(r.cccid, r.ttag, r.r2to, payload.data(), half, false, hd_, dd_),
        h2c(r.cccid, r.ttag, r.r2to + half, payload.data() + half, r.r2tl - half, true, hd_, dd_)};
  }

  // An H2CData no R2T asked for.
  std::vector<uint8_t> unsolicited() {
    uint8_t d[512] = {};
    return h2c(static_cast<uint16_t>(rng_.g()), static_cast<uint16_t>(rng_.g()),
               static_cast<uint32_t>(rng_.below(8192)), d, sizeof d, rng_.chance(0.5), hd_, dd_);
  }

  // An ICReq, usually sound.
  std::vector<uint8_t> icreq() {
    nt::IcReq q{};
    q.ch.type = nt::pdu::kIcReq;
    q.ch.hlen = q.ch.plen = nt::kIcReqHlen;
    q.dgst = static_cast<uint8_t>(rng_.below(4));
    q.hpda = static_cast<uint8_t>(rng_.below(4));
    q.maxr2t = static_cast<uint32_t>(rng_.below(4));
    std::vector<uint8_t> v(sizeof q);
    std::memcpy(v.data(), &q, sizeof q);
    return v;
  }

  void mutate(std::vector<uint8_t>& v) {
    ++t_.mutated;
    const std::size_t n = v.size();
    const uint8_t hlen = v.size() >= 3 ? v[2] : 0;
    auto at = [&](std::size_t i) -> uint8_t& { return v[i % n]; };
    switch (rng_.below(13)) {
      case 0:
        for (uint64_t k = 1 + rng_.below(4); k > 0; --k) at(rng_.below(n)) ^= 1u << rng_.below(8);
        break;
      case 1: {
        static constexpr uint8_t kEdge[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
        at(rng_.below(n)) = rng_.chance(0.5) ? kEdge[rng_.below(6)] : rng_.byte();
        break;
      }
      case 2:
        at(0) = rng_.chance(0.5) ? static_cast<uint8_t>(rng_.below(12)) : rng_.byte();
        break;
      case 3:
        at(1) = rng_.byte();
        break;
      case 4:
        at(2) = rng_.byte();
        break;
      case 5:
        at(3) = rng_.byte();
        break;
      case 6: {  // PLEN
        uint32_t plen;
        std::memcpy(&plen, v.data() + 4, 4);
        static constexpr uint32_t kEdge[] = {0, 7, 8, 24, 72, 0x7fffffff, 0xffffffff};
        const uint64_t pick = rng_.below(3);
        plen = pick == 0   ? kEdge[rng_.below(7)]
               : pick == 1 ? plen + static_cast<uint32_t>(rng_.below(129)) - 64
                           : static_cast<uint32_t>(rng_.g());
        std::memcpy(v.data() + 4, &plen, 4);
        break;
      }
      case 7:  // bytes of the PDU-specific header (the SQE of a capsule)
        for (uint64_t k = 1 + rng_.below(8); k > 0; --k)
          at(8 + rng_.below(std::max<std::size_t>(1, std::min<std::size_t>(hlen, n) - 8))) =
              rng_.byte();
        break;
      case 8: {  // an SQE field: opcode, NSID, the SGL's type or length, CDW10-15
        if (n < 72) break;
        static constexpr std::size_t kField[] = {
            8, 12, 13, 14, 15, 8 + 24 + 8, 8 + 24 + 9, 8 + 24 + 15, 8 + 40, 8 + 44, 8 + 48, 8 + 52};
        const std::size_t f = kField[rng_.below(12)];
        for (int k = 0; k < 4 && f + k < 72; ++k) v[f + k] = rng_.byte();
        break;
      }
      case 9:
        v.resize(rng_.below(n));
        break;  // truncated: the next PDU's bytes continue it
      case 10:
        for (uint64_t k = 1 + rng_.below(64); k > 0; --k) v.push_back(rng_.byte());
        break;
      case 11:
        at(n - 1 - rng_.below(4)) ^= 0x10;
        break;  // the data digest (or data)
      default:
        if (n > hlen + 4u) at(hlen + rng_.below(4)) ^= 0x01;  // the header digest
        break;
    }
    // Most mutations get a fresh header digest, so they reach the checks behind it.
    if (hd_ && v.size() >= 8 && v[2] >= 8 && v.size() >= v[2] + 4u && rng_.chance(0.7)) {
      const uint32_t d = crc32c(v.data(), v[2]);
      std::memcpy(v.data() + v[2], &d, 4);
    }
  }

 private:
  uint16_t cid() { return ++cid_; }
  void read_into(sn::SubmissionEntry& e, uint8_t opcode, uint32_t len) {
    e.opcode = opcode;
    e.dptr.sgl1 = nf::sgl::transport(len);
  }
  Rng& rng_;
  Totals& t_;
  bool hd_ = false, dd_ = false;
  uint16_t cid_ = 0;
};

class TcpTargetFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    LiveTargetOptions o;
    o.mask = "0x1";  // one reactor: the fuzzing thread and the target share the two cores
    target_ = std::make_unique<LiveTarget>(o);
    target_->on_target([this](target::Target& t) {
      auto b = bdev::create_malloc_bdev(target_->bdevs(),
                                        {"Hostile0", kFuzzBlocks, kBlock, nullptr, nullptr});
      ASSERT_TRUE(b.ok());
      target::SubsystemOptions so;
      so.nqn = kFuzzNqn;
      so.allow_any_host = true;
      ASSERT_TRUE(t.create_subsystem(so).ok());
      target::NamespaceOptions no;
      no.bdev_name = "Hostile0";
      ASSERT_TRUE(t.add_namespace(kFuzzNqn, no).ok());
      ASSERT_TRUE(t.add_listener(kFuzzNqn, target_->listen_address()).ok());
    });
    host_ = std::make_unique<Host>(target_->trid());
    ASSERT_TRUE(host_->ok());
  }

  // The other host's data survives whatever the hostile connections did.
  void host_check(uint64_t round) {
    ++totals_.host_checks;
    host_->ctrl->process_admin_completions();
    const uint64_t lba = (round * 16) % 60000;
    fill(host_->buf(0), 8192, static_cast<uint32_t>(round));
    ASSERT_EQ(host_->io(true, host_->buf(0), lba, 16), 0) << "round " << round;
    std::memset(host_->buf(65536), 0xa5, 8192);
    ASSERT_EQ(host_->io(false, host_->buf(65536), lba, 16), 0) << "round " << round;
    ASSERT_EQ(std::memcmp(host_->buf(0), host_->buf(65536), 8192), 0) << "round " << round;
  }

  uint64_t open_connections() {
    uint64_t open = 0;
    for (const auto& g : target_->target().groups()) {
      const TcpTargetGroup* tg = target_->transport().group_of(*g);
      open += uint64_t{tg->stats().accepted} - uint64_t{tg->stats().closed};
    }
    return open;
  }

  void session(uint64_t index, uint64_t seed, uint64_t budget);

  std::unique_ptr<LiveTarget> target_;
  std::unique_ptr<Host> host_;
  Totals totals_;
};

// A session's PDUs come from its own seed, so they do not depend on how the target's R2Ts
// interleave with them (that follows the target's timing); each R2T's answer is drawn from the
// session's seed and the R2T.
void TcpTargetFuzz::session(uint64_t index, uint64_t seed, uint64_t budget) {
  ++totals_.sessions;
  Rng rng{std::mt19937_64(seed)};
  Generator gen(rng, totals_);
  const std::string name = "session " + std::to_string(index) +
                           " (POLLUX_FUZZ_REPLAY=" + std::to_string(seed) + "," +
                           std::to_string(budget);
  const uint64_t depth = rng.below(10) < 1 ? 0 : rng.below(10) < 4 ? 1 : 2;
  // Admin queue (depth 1: fuzzed; depth 2: holds the controller of the fuzzed I/O queue).
  Raw admin(target_->port());
  if (depth == 0) {
    Wire w(admin, totals_, name + ", before ICReq)");
    std::vector<uint8_t> v = rng.chance(0.7) ? gen.icreq() : gen.admin();
    gen.mutate(v);
    ++totals_.pdus;
    if (!w.send(v)) return;
    // Unless the ICReq survived its mutation, the target must end the connection now.
    for (uint64_t i = 0; i < 3 && !w.over(); ++i) {
      std::vector<uint8_t> next = gen.admin();
      gen.mutate(next);
      ++totals_.pdus;
      w.send(next);
    }
    w.finish();
    return;
  }
  admin.handshake(static_cast<uint8_t>(rng.below(4)));
  const uint16_t cntlid = connect_admin(admin, kFuzzNqn);
  totals_.pdus += 3;
  Raw io_raw(target_->port());
  Raw& fuzzed = depth == 1 ? admin : io_raw;
  bool hd = admin.hd(), dd = admin.dd();
  if (depth == 2) {
    io_raw.handshake(static_cast<uint8_t>(rng.below(4)));
    hd = io_raw.hd(), dd = io_raw.dd();
    EXPECT_EQ(connect_io(io_raw, kFuzzNqn, cntlid), 0);
    totals_.pdus += 2;
  }
  gen.digests(hd, dd);
  Wire w(fuzzed, totals_, name + (depth == 1 ? ", admin queue)" : ", I/O queue)"));
  w.digests(hd, dd);
  const double mutation_rate = 0.03 + 0.12 * static_cast<double>(rng.below(100)) / 100.0;
  for (uint64_t fresh = 0; fresh < budget && !w.over();) {
    std::vector<uint8_t> v;
    if (!w.r2ts().empty()) {
      const nt::R2t r = w.r2ts().front();
      w.r2ts().pop_front();
      Rng arng{
          std::mt19937_64(seed ^ (uint64_t{r.cccid} << 48) ^ (uint64_t{r.ttag} << 32) ^ r.r2to)};
      Generator answers(arng, totals_);
      answers.digests(hd, dd);
      for (auto& d : answers.answer(r)) {
        if (arng.chance(mutation_rate)) answers.mutate(d);
        ++totals_.pdus;
        if (!w.send(d)) break;
      }
      continue;
    }
    if (rng.chance(0.002)) {
      v = gen.unsolicited();
      ++totals_.mutated;
    } else {
      v = depth == 1 ? gen.admin() : gen.io();
      if (rng.chance(mutation_rate)) gen.mutate(v);
    }
    ++totals_.pdus;
    ++fresh;
    w.send(v);
  }
  w.finish();
  if (std::getenv("POLLUX_FUZZ_VERBOSE") != nullptr)
    std::printf("%s: depth %llu, %llu fresh PDUs, %s; totals: %llu responses, %llu R2Ts\n",
                name.c_str(), static_cast<unsigned long long>(depth),
                static_cast<unsigned long long>(budget),
                w.terminated() ? "terminated"
                : w.over()     ? "closed"
                               : "open",
                static_cast<unsigned long long>(totals_.responses),
                static_cast<unsigned long long>(totals_.r2ts));
}

TEST_F(TcpTargetFuzz, HostileStreamsEndOnlyTheirConnection) {
  const uint64_t seed = env_u64("POLLUX_FUZZ_SEED", 20261125);
  const uint64_t want = env_u64("POLLUX_FUZZ_PDUS", 100000);
  std::printf("target fuzz: seed %llu, %llu PDUs (POLLUX_FUZZ_SEED / POLLUX_FUZZ_PDUS)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(want));
  Rng rng{std::mt19937_64(seed)};
  uint64_t round = 0;
  if (const char* r = std::getenv("POLLUX_FUZZ_REPLAY"); r != nullptr && *r != '\0') {
    // One session again ("seed,budget" as a failure names it), on a fresh target.
    char* end = nullptr;
    const uint64_t s = std::strtoull(r, &end, 0);
    const uint64_t budget = end != nullptr && *end == ',' ? std::strtoull(end + 1, nullptr, 0) : 80;
    session(0, s, budget);
    host_check(++round);
    return;
  }
  while (totals_.pdus < want && !HasFatalFailure() && totals_.sessions < want) {
    const uint64_t s = rng.g();
    session(totals_.sessions, s, 1 + rng.below(80));
    host_->ctrl->process_admin_completions();  // its Keep Alive
    if (totals_.sessions % 100 == 0) host_check(++round);
  }
  host_check(++round);
  // Every hostile connection is closed on the target's side too; only the host's two remain.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (open_connections() != 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(open_connections(), 2u) << "connections the hosts closed stay open on the target";
  // Every data buffer is back: in the pool or a group's cache (the host's I/O is done).
  target_->on_target([this](target::Target& t) {
    std::size_t free = target_->transport().pool().available_approx();
    for (const auto& g : t.groups()) free += target_->transport().group_of(*g)->cached_buffers();
    EXPECT_EQ(free, target_->transport().pool().capacity()) << "data buffers leaked";
  });
  host_check(++round);
  std::printf(
      "target fuzz: %llu PDUs (%llu mutated) in %llu sessions; %llu connections ended by a "
      "C2HTermReq, %llu closed after the host's TermReq/Disconnect; the target sent %llu "
      "responses, %llu C2HData, %llu R2Ts; %llu verified rounds of the other host\n",
      static_cast<unsigned long long>(totals_.pdus),
      static_cast<unsigned long long>(totals_.mutated),
      static_cast<unsigned long long>(totals_.sessions),
      static_cast<unsigned long long>(totals_.terminated),
      static_cast<unsigned long long>(totals_.closed_by_host_pdu),
      static_cast<unsigned long long>(totals_.responses),
      static_cast<unsigned long long>(totals_.c2h_data),
      static_cast<unsigned long long>(totals_.r2ts),
      static_cast<unsigned long long>(totals_.host_checks));
  EXPECT_GE(totals_.pdus, want);
  EXPECT_GT(totals_.terminated, totals_.sessions / 10) << "the mutations hardly reached the checks";
  EXPECT_GT(totals_.r2ts, 100u);
}

}  // namespace
}  // namespace pollux::fabric::tcp::testing
