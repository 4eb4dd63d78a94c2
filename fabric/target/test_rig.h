// A target core without a network, for unit tests: a step-mode framework on a virtual clock,
// a bdev manager with malloc bdevs, the Target, a transport that listens nowhere, and queue
// pairs (FakeQpair) whose commands the test submits and whose completions it reads.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/event/test_util.h"
#include "fabric/target/controller.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target::testing {

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(TransportLimits l = {}) : limits_(l) {}
  const char* trtype() const override { return "TCP"; }
  const TransportLimits& limits() const override { return limits_; }
  Status listen(const ListenAddress&) override { return ok_status(); }
  void stop_listening(const ListenAddress&) override {}
  void add_group(PollGroup&) override {}
  void remove_group(PollGroup&) override {}
  nlohmann::json options_json() const override { return nlohmann::json::object(); }
  nlohmann::json group_stats(PollGroup&) const override { return nlohmann::json::object(); }

 private:
  TransportLimits limits_;
};

// Commands in, completions out; data of controller-to-host commands kept with each completion.
class FakeQpair final : public Qpair {
 public:
  struct Slot {
    Request req;
    std::vector<uint8_t> buf;
    bool busy = false;
    bool done = false;
    sn::CompletionEntry cqe{};
    std::vector<uint8_t> c2h;
  };

  FakeQpair(PollGroup& g, Transport& t, ListenAddress la)
      : Qpair(g, t), listen_(std::move(la)), slots_(256) {}

  void complete(Request& r) override {
    Slot& s = slots_[r.cmd.cid];
    s.busy = false;
    s.done = true;
    s.cqe = r.rsp;
    if (r.xfer == Xfer::kControllerToHost && r.data != nullptr)
      s.c2h.assign(static_cast<uint8_t*>(r.data), static_cast<uint8_t*>(r.data) + r.length);
    ++completions;
    maybe_close();
  }
  void disconnect() override {
    ++disconnects;
    if (closing) return;
    closing = true;
    state = State::kClosing;
    qpair_closing(*this);
    maybe_close();
  }
  bool prepare(uint16_t, uint32_t) override { return true; }
  const ListenAddress& listen_address() const override { return listen_; }
  std::string peer() const override { return "fake"; }

  // Submits on the calling thread (the group's: see Rig::on_group). Returns the slot.
  int submit(const sn::SubmissionEntry& cmd, const void* in = nullptr, uint32_t len = 0) {
    int i = 0;
    while (slots_[i].busy) ++i;
    Slot& s = slots_[i];
    s = Slot{};
    s.busy = true;
    s.buf.assign(len, 0);
    if (in != nullptr && len) std::memcpy(s.buf.data(), in, len);
    s.req.qpair = this;
    s.req.cmd = cmd;
    s.req.cmd.cid = static_cast<uint16_t>(i);
    s.req.data = len ? s.buf.data() : nullptr;
    s.req.length = len;
    s.req.xfer = xfer_of(cmd);
    execute(s.req);
    return i;
  }
  Slot& slot(int i) { return slots_[i]; }
  bool busy() const {
    for (const Slot& s : slots_)
      if (s.busy) return true;
    return false;
  }

  bool closing = false;
  bool closed = false;
  int disconnects = 0;
  int completions = 0;

 private:
  void maybe_close() {
    if (!closing || closed || busy()) return;
    closed = true;
    qpair_closed(*this);
    group().remove_qpair(this);
  }
  ListenAddress listen_;
  std::vector<Slot> slots_;
};

inline const char* kNqn = "nqn.2026-11.io.pollux:test";
inline const char* kHost = "nqn.2026-11.io.pollux:host1";
inline const ListenAddress kListen{"TCP", "IPv4", "127.0.0.1", "4420"};

inline uint32_t cc_enabled() {
  return sn::cc::make(true, 0, 0, 0, 0, 6, 4);
}

inline sn::SubmissionEntry connect_cmd(uint16_t qid, uint16_t sqsize, uint32_t kato = 0,
                                       uint8_t cattr = 0) {
  nf::ConnectCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kConnect;
  c.flags = static_cast<uint8_t>(sn::kPsdtSglMptrContiguous << 6);
  c.sgl1 = nf::sgl::in_capsule(sizeof(nf::ConnectData));
  c.qid = qid;
  c.sqsize = sqsize;
  c.kato = kato;
  c.cattr = cattr;
  sn::SubmissionEntry e;
  std::memcpy(&e, &c, sizeof e);
  return e;
}

inline nf::ConnectData connect_data(const std::string& subnqn, const std::string& hostnqn,
                                    uint16_t cntlid = nf::connect::kCntlidDynamic,
                                    uint8_t hostid_byte = 0x11) {
  nf::ConnectData d{};
  std::memset(d.hostid, hostid_byte, sizeof d.hostid);
  d.cntlid = cntlid;
  std::memcpy(d.subnqn, subnqn.data(), subnqn.size());
  std::memcpy(d.hostnqn, hostnqn.data(), hostnqn.size());
  return d;
}

inline sn::SubmissionEntry property_get(uint32_t ofst, bool eight = false) {
  nf::PropertyGetCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kPropertyGet;
  c.attrib = eight ? nf::property::kSize8 : nf::property::kSize4;
  c.ofst = ofst;
  sn::SubmissionEntry e;
  std::memcpy(&e, &c, sizeof e);
  return e;
}

inline sn::SubmissionEntry property_set(uint32_t ofst, uint32_t value) {
  nf::PropertySetCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kPropertySet;
  c.attrib = nf::property::kSize4;
  c.ofst = ofst;
  c.value = value;
  sn::SubmissionEntry e;
  std::memcpy(&e, &c, sizeof e);
  return e;
}

inline sn::SubmissionEntry admin(uint8_t opcode, uint32_t nsid = 0, uint32_t cdw10 = 0,
                                 uint32_t cdw11 = 0) {
  sn::SubmissionEntry e{};
  e.opcode = opcode;
  e.nsid = nsid;
  e.cdw10 = cdw10;
  e.cdw11 = cdw11;
  return e;
}

inline sn::SubmissionEntry rw(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nlb) {
  sn::SubmissionEntry e{};
  e.opcode = opcode;
  e.nsid = nsid;
  e.cdw10 = static_cast<uint32_t>(slba);
  e.cdw11 = static_cast<uint32_t>(slba >> 32);
  e.cdw12 = nlb - 1;
  return e;
}

inline sn::SubmissionEntry get_log(uint8_t lid, uint32_t bytes, uint64_t offset = 0,
                                   bool rae = false, uint32_t nsid = 0xffffffff) {
  const uint32_t numd = bytes / 4 - 1;
  sn::SubmissionEntry e = admin(sn::admin::kGetLogPage, nsid,
                                lid | (rae ? 1u << 15 : 0) | (numd & 0xffff) << 16, numd >> 16);
  e.cdw12 = static_cast<uint32_t>(offset);
  e.cdw13 = static_cast<uint32_t>(offset >> 32);
  return e;
}

inline uint8_t sct_of(const sn::CompletionEntry& c) {
  return sn::status::sct(c.status);
}
inline uint8_t sc_of(const sn::CompletionEntry& c) {
  return sn::status::sc(c.status);
}

// One reactor, a target with one subsystem (kNqn, host kHost allowed, two malloc bdevs of 8 MiB
// with 512-byte blocks, the first as namespace 1), listening on kListen.
struct Rig {
  // `tune` changes the subsystem's options before it is created.
  explicit Rig(const char* mask = "0x1", TransportLimits limits = {},
               const std::function<void(SubsystemOptions&)>& tune = {})
      : sf(mask) {
    fw = sf.fw.get();
    app = fw->create_thread("app", 0);
    event::CurrentThreadScope scope(app);
    auto m = bdev::Manager::create(*fw);
    EXPECT_TRUE(m.ok());
    mgr = std::move(m).value();
    for (const char* name : {"Malloc0", "Malloc1", "Malloc2"})
      EXPECT_TRUE(bdev::create_malloc_bdev(*mgr, {name, 16384, 512, nullptr, nullptr}).ok());
    auto t = Target::create(*fw, *mgr);
    EXPECT_TRUE(t.ok()) << t.error().message;
    tgt = std::move(t).value();
    auto tr = std::make_unique<FakeTransport>(limits);
    transport = tr.get();
    EXPECT_TRUE(tgt->add_transport(std::move(tr)).ok());
    SubsystemOptions so;
    so.nqn = kNqn;
    so.serial = "SN0001";
    so.model = "Pollux test";
    so.max_namespaces = 8;
    if (tune) tune(so);
    EXPECT_TRUE(tgt->create_subsystem(so).ok());
    EXPECT_TRUE(tgt->add_host(kNqn, kHost).ok());
    EXPECT_TRUE(tgt->add_listener(kNqn, kListen).ok());
    NamespaceOptions no;
    no.bdev_name = "Malloc0";
    no.nsid = 1;
    EXPECT_TRUE(tgt->add_namespace(kNqn, no).ok());
    settle();
  }
  ~Rig();

  PollGroup& group(std::size_t i = 0) { return *tgt->groups()[i]; }
  template <typename F>
  auto on_group(F f, std::size_t i = 0) {
    event::CurrentThreadScope scope(group(i).thread());
    return f();
  }
  template <typename F>
  auto on_app(F f) {
    event::CurrentThreadScope scope(app);
    return f();
  }
  void settle() { sf.settle(); }
  // Advances virtual time in steps of `step_us`, stepping the framework.
  void advance_us(uint64_t us, uint64_t step_us = 10'000) {
    for (uint64_t t = 0; t < us; t += step_us) {
      sf.clock.advance(step_us * 1000);
      settle();
    }
  }

  FakeQpair& new_qpair(std::size_t g = 0, ListenAddress la = kListen) {
    qpairs.push_back(
        on_group([&] { return std::make_unique<FakeQpair>(group(g), *transport, la); }, g));
    return *qpairs.back();
  }
  // Submits on the queue's group thread and runs the framework until nothing moves.
  FakeQpair::Slot& run(FakeQpair& q, const sn::SubmissionEntry& cmd, const void* in = nullptr,
                       uint32_t len = 0) {
    const int i = on_group([&] { return q.submit(cmd, in, len); }, q.group().index());
    settle();
    return q.slot(i);
  }
  FakeQpair::Slot& connect(FakeQpair& q, uint16_t qid, const std::string& subnqn = kNqn,
                           const std::string& host = kHost, uint16_t cntlid = 0xffff,
                           uint16_t sqsize = 31, uint32_t kato = 0, uint8_t hostid = 0x11) {
    const nf::ConnectData d = connect_data(subnqn, host, cntlid, hostid);
    return run(q, connect_cmd(qid, sqsize, kato), &d, sizeof d);
  }
  // An admin queue connected and enabled; returns its CNTLID.
  uint16_t connect_enabled(FakeQpair& q, uint32_t kato = 0) {
    const sn::CompletionEntry c = connect(q, 0, kNqn, kHost, 0xffff, 31, kato).cqe;
    EXPECT_EQ(c.status, 0);
    EXPECT_EQ(run(q, property_set(sn::reg::kCc, cc_enabled())).cqe.status, 0);
    return static_cast<uint16_t>(c.dw0);
  }
  uint32_t csts(FakeQpair& q) { return run(q, property_get(sn::reg::kCsts)).cqe.dw0; }

  event::testing::StepFramework sf;
  event::Framework* fw;
  event::Thread* app;
  std::unique_ptr<bdev::Manager> mgr;
  std::unique_ptr<Target> tgt;
  FakeTransport* transport;
  std::vector<std::unique_ptr<FakeQpair>> qpairs;
};

inline Rig::~Rig() {
  bool stopped = false;
  on_app([&] { tgt->stop([&] { stopped = true; }); });
  for (int i = 0; i < 100000 && !stopped; ++i) fw->step();
  EXPECT_TRUE(stopped);
  qpairs.clear();
  on_app([&] { tgt.reset(); });
  settle();
  fw->stop(0);
  for (int i = 0; i < 1000 && !fw->finished(); ++i) fw->step();
  on_app([&] { mgr.reset(); });
}

}  // namespace pollux::fabric::target::testing
