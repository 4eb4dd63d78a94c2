// What the NVMe/TCP host transport's tests share (host_test.cc, host_recovery_test.cc): the real
// nvme::Controller and nvme::Qpair against a scripted target on a loopback socket
// (testing/scripted_target.h), and helpers to drive and inspect them.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "driver/nvme/connect.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/status.h"
#include "fabric/tcp/host.h"
#include "fabric/tcp/queue.h"
#include "fabric/tcp/testing/scripted_target.h"

namespace pollux::fabric::tcp::host_testing {

namespace st = pollux::fabric::tcp::testing;
namespace sn = spec::nvme;
namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;
using st::Clock;
using std::chrono::milliseconds;

inline constexpr auto kWait = std::chrono::seconds(10);
inline constexpr const char* kHostNqn = "nqn.2026-01.io.pollux:host-test";
inline constexpr uint32_t kBlock = 512;

inline std::vector<uint8_t> pattern(std::size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + (i >> 9) + seed * 101);
  return v;
}

struct Done {
  bool done = false;
  sn::CompletionEntry cpl{};
};

inline void on_done(void* ctx, const sn::CompletionEntry& cpl) {
  auto* d = static_cast<Done*>(ctx);
  d->cpl = cpl;
  d->done = true;
}

inline bool is_status(const sn::CompletionEntry& cpl, uint8_t sct, uint8_t sc) {
  return sn::status::sct(cpl.status) == sct && sn::status::sc(cpl.status) == sc;
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& e : v) s += "\n  " + e;
  return s;
}

// Received PDUs of `type` on `conn` for command `cid` (CapsuleCmd: by its SQE's CID).
inline std::vector<st::Pdu> pdus_for(const std::vector<st::Pdu>& pdus, uint8_t type, int conn,
                                     uint16_t cid) {
  std::vector<st::Pdu> out;
  for (const st::Pdu& p : pdus) {
    if (p.ch.type != type || p.conn != conn) continue;
    uint16_t c;
    if (type == nt::pdu::kCapsuleCmd) {
      c = p.sqe().cid;
    } else if (type == nt::pdu::kCapsuleResp) {
      c = p.as<nt::CapsuleResp>().cqe.cid;
    } else {
      std::memcpy(&c, p.header.data() + 8, 2);  // CCCID of data PDUs and R2T
    }
    if (c == cid) out.push_back(p);
  }
  return out;
}

class TcpHostTest : public ::testing::Test {
 protected:
  void start_target(st::TargetOptions o = {}) {
    target_ = std::make_unique<st::ScriptedTarget>(std::move(o));
  }

  nvme::TransportId trid(uint16_t port = 0) const {
    nvme::TransportId t;
    t.trtype = nvme::TransportType::kTcp;
    t.traddr = "127.0.0.1";
    t.trsvcid = std::to_string(port ? port : target_->port());
    t.subnqn = target_ ? target_->subnqn() : "nqn.2026-01.io.pollux:nobody";
    return t;
  }

  Result<std::unique_ptr<nvme::Controller>> try_attach(TcpOptions topt = {},
                                                       nvme::ControllerOptions copt = {},
                                                       uint16_t port = 0) {
    if (copt.hostnqn.empty()) copt.hostnqn = kHostNqn;
    auto t = TcpTransport::create(trid(port), topt);
    if (!t) return t.error();
    return nvme::Controller::attach(std::move(t).value(), copt);
  }

  // The controller and one I/O queue pair (qid 1).
  void attach(TcpOptions topt = {}, nvme::ControllerOptions copt = {},
              nvme::QpairOptions qopt = {.queue_size = 32}) {
    auto c = try_attach(topt, copt);
    ASSERT_TRUE(c) << c.error().message;
    ctrl_ = std::move(c).value();
    auto q = ctrl_->alloc_io_qpair(qopt);
    ASSERT_TRUE(q) << q.error().message;
    qp_ = std::move(q).value();
    ns_ = ctrl_->ns(1);
    ASSERT_NE(ns_, nullptr);
  }

  void TearDown() override {
    if (qp_) ctrl_->free_io_qpair(std::move(qp_));
    ctrl_.reset();
    if (target_) {
      const auto v = target_->violations();
      EXPECT_TRUE(v.empty()) << "the target saw the host break the rules:" << join(v);
      target_.reset();
    }
  }

  static TcpQueue& tcp(nvme::Qpair& qp) { return dynamic_cast<TcpQueue&>(qp.transport()); }
  TcpQueue& io_queue() { return tcp(*qp_); }
  int conn_of(int qid) const {
    return target_->inspect([&](const st::Log& l) { return l.conn_of_qid(qid); });
  }

  // Polls the I/O queue pair until pred() holds (bounded).
  bool poll_until(const std::function<bool()>& pred, milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      if (qp_) qp_->process_completions();
      std::this_thread::yield();
    }
    return true;
  }

  // Callback contexts live as long as the fixture: requests a test leaves outstanding end in
  // TearDown, and their callbacks still write here.
  Done& done() { return dones_.emplace_back(); }

  Done& submit_rw(nvme::Qpair& qp, bool write, uint64_t lba, void* buf, uint32_t bytes) {
    Done& d = done();
    const int rc = write ? qp.write(*ns_, buf, lba, bytes / kBlock, on_done, &d)
                         : qp.read(*ns_, buf, lba, bytes / kBlock, on_done, &d);
    EXPECT_EQ(rc, 0);
    return d;
  }

  sn::CompletionEntry rw(bool write, uint64_t lba, void* buf, uint32_t bytes) {
    Done& d = submit_rw(*qp_, write, lba, buf, bytes);
    EXPECT_TRUE(poll_until([&] { return d.done; }))
        << (write ? "write" : "read") << " at LBA " << lba << " did not complete";
    return d.cpl;
  }
  void write_ok(uint64_t lba, std::vector<uint8_t>& data) {
    const auto cpl = rw(true, lba, data.data(), static_cast<uint32_t>(data.size()));
    EXPECT_FALSE(nvme::cpl_is_error(cpl)) << nvme::describe(nvme::Status::from_cqe(cpl.status));
    EXPECT_EQ(target_->ram(lba * kBlock, data.size()), data) << "write at LBA " << lba;
  }

  // The I/O connection ended with an H2CTermReq: its FES and FEI, and what followed.
  void expect_fatal(nvme::Qpair& qp, uint16_t fes, uint32_t fei, uint8_t offending_type) {
    const int conn = target_->inspect([&](const st::Log& l) { return l.conn_of_qid(qp.id()); });
    auto terminated = [&] {
      return target_->inspect([&](const st::Log& l) {
        return !l.of_type(nt::pdu::kH2cTermReq, conn).empty() && l.conns[conn].closed;
      });
    };
    ASSERT_TRUE(poll_until([&] { return tcp(qp).broken() && terminated(); }))
        << "no H2CTermReq and close; broken " << tcp(qp).broken();
    target_->inspect([&](const st::Log& l) {
      const auto terms = l.of_type(nt::pdu::kH2cTermReq, conn);
      ASSERT_EQ(terms.size(), 1u);
      const auto t = terms[0]->as<nt::TermReq>();
      const uint16_t got_fes = t.fes;  // TermReq is packed: no references to its fields
      const uint32_t got_fei = t.fei, plen = t.ch.plen;
      EXPECT_EQ(got_fes, fes);
      EXPECT_EQ(got_fei, fei);
      EXPECT_EQ(plen, nt::kTermReqHlen + terms[0]->data.size());
      // Its data is the header in error.
      ASSERT_GE(terms[0]->data.size(), 1u);
      EXPECT_EQ(terms[0]->data[0], offending_type);
    });
    EXPECT_FALSE(ctrl_->healthy());
  }

  std::unique_ptr<st::ScriptedTarget> target_;
  std::unique_ptr<nvme::Controller> ctrl_;
  std::unique_ptr<nvme::Qpair> qp_;
  const nvme::Namespace* ns_ = nullptr;
  std::deque<Done> dones_;
};

// A hook that takes over one kind of I/O command (any I/O queue).
inline st::ScriptedTarget::Hook on_io(uint8_t opcode,
                                      std::function<void(st::Conn&, const st::Command&)> f) {
  return [opcode, f = std::move(f)](st::Conn& c, const st::Command& cmd) {
    if (cmd.qid < 1 || cmd.fabrics() || cmd.sqe.opcode != opcode) return false;
    f(c, cmd);
    return true;
  };
}

}  // namespace pollux::fabric::tcp::host_testing
