// Where a command goes (execute), how it ends (finish), and the fabrics commands of a queue
// pair: Connect — from the queue's thread to the target thread (the subsystem, the host, the
// listener; a new controller, or the controller an I/O queue joins), to the controller's thread
// (an I/O queue joins), and back — and Disconnect.
#include <fmt/format.h>

#include <cstring>

#include "fabric/target/auth.h"
#include "fabric/target/controller.h"
#include "fabric/target/internal.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target {

Xfer xfer_of(const sn::SubmissionEntry& cmd) {
  uint8_t bits = cmd.opcode & 3;
  if (cmd.opcode == nf::kOpcodeFabrics) {
    uint8_t fctype;
    std::memcpy(&fctype, reinterpret_cast<const uint8_t*>(&cmd) + 4, 1);
    bits = fctype & 3;
  }
  return static_cast<Xfer>(bits);
}

void finish(Request& r, uint16_t st) {
  Qpair& q = *r.qpair;
  r.rsp.cid = r.cmd.cid;
  r.rsp.sqid = q.qid;
  q.sq_head = static_cast<uint16_t>(q.entries ? (q.sq_head + 1) % q.entries : q.sq_head + 1);
  r.rsp.sqhd = q.sq_flow_control ? q.sq_head : nf::connect::kSqhdFlowControlDisabled;
  r.rsp.status = st & 0xfffe;
  if (st != kSuccess) r.length = 0;  // a failed command moves no data to the host
  q.complete(r);
}

void execute(Request& r) {
  Qpair& q = *r.qpair;
  r.rsp = sn::CompletionEntry{};
  r.ns = nullptr;
  r.pending = 0;
  r.first_error = 0;
  if (r.cmd.fuse() != 0) return finish(r, generic(sn::sc::kInvalidField));  // no fused commands
  if (r.cmd.opcode == nf::kOpcodeFabrics) {
    nf::FabricsCommand f;
    std::memcpy(&f, &r.cmd, sizeof f);
    if ((f.fctype == nf::fctype::kAuthenticationSend ||
         f.fctype == nf::fctype::kAuthenticationReceive) &&
        (q.state == Qpair::State::kAuthenticating || q.state == Qpair::State::kActive))
      return execute_auth(r);
    if (f.fctype == nf::fctype::kConnect || (q.state == Qpair::State::kActive && !q.is_admin()))
      return execute_fabrics(r);
  }
  if (q.state != Qpair::State::kActive) {
    return finish(r, q.state == Qpair::State::kAuthenticating
                         ? specific(nf::sc::kAuthenticationRequired)
                         : generic(sn::sc::kCommandSequenceError));
  }
  if (q.is_admin()) return q.ctrlr->execute(r);
  execute_io(r);
}

// ---------------------------------------------------------------------- Connect ---

struct Target::ConnectOp {
  Request* req = nullptr;
  Qpair* qpair = nullptr;
  PollGroup* group = nullptr;  // the queue's
  uint64_t qpair_id = 0;
  uint16_t qid = 0;
  uint32_t entries = 0;
  uint8_t cattr = 0;
  uint32_t kato = 0;
  nf::ConnectData data{};
  ListenAddress listen;
  // Results.
  uint16_t status = 0;
  uint32_t dw0 = 0;
  ControllerConfig cfg;  // admin: the controller to create
  std::shared_ptr<const AuthConfig> auth;  // the host must authenticate (DH-HMAC-CHAP)
  PollGroup* ctrl_group = nullptr;
  uint64_t ctrl_id = 0;
};

namespace {

uint32_t invalid_param(std::size_t offset, bool in_data) {
  return nf::connect::make_invalid_parameter_dw0(static_cast<uint16_t>(offset), in_data);
}
constexpr uint16_t kInvalidParameters =
    status(sn::sct::kCommandSpecific, nf::sc::kConnectInvalidParameters);

void fail_connect(Request& r, uint16_t st, uint32_t dw0) {
  r.rsp.dw0 = dw0;
  finish(r, st);
}

// Back on the queue's thread: the Connect's verdict.
void finish_connect(Target::ConnectOp* op_raw) {
  std::unique_ptr<Target::ConnectOp> op(op_raw);
  Qpair& q = *op->qpair;
  Request& r = *op->req;
  PollGroup& g = *op->group;
  const bool closing = q.state == Qpair::State::kClosing;
  Target& t = g.target();
  if (op->status != kSuccess) {
    if (!closing) q.state = Qpair::State::kAwaitingConnect;
    return fail_connect(r, op->status, op->dw0);
  }
  PgSubsystem* sub = g.subsystem(op->cfg.slot);
  if (op->qid == 0) {
    if (sub == nullptr) {  // the subsystem went meanwhile
      t.run_on(t.thread(), [&t, slot = op->cfg.slot, cntlid = op->cfg.cntlid, id = op->cfg.id] {
        t.controller_gone(slot, cntlid, id);
      });
      if (!closing) q.state = Qpair::State::kAwaitingConnect;
      return fail_connect(r, kInvalidParameters,
                          invalid_param(offsetof(nf::ConnectData, subnqn), true));
    }
    auto* c = new Controller(g, op->cfg);  // deletes itself when its association ends
    g.add_controller(c);
    q.ctrlr = c;
    q.cntlid = op->cfg.cntlid;
    ++g.stats().admin_qpairs;
    ++g.stats().current_admin_qpairs;
  } else {
    q.ctrlr_group = op->ctrl_group;
    q.ctrlr_id = op->ctrl_id;
    q.cntlid = op->data.cntlid;
    ++g.stats().io_qpairs;
    ++g.stats().current_io_qpairs;
    if (sub == nullptr) {
      // Joined, but the subsystem is going: leave again (qpair_closed tells the controller).
      q.subsystem_slot = op->cfg.slot;
      q.state = Qpair::State::kActive;
      q.disconnect();
      return fail_connect(r, kInvalidParameters,
                          invalid_param(offsetof(nf::ConnectData, subnqn), true));
    }
  }
  q.qid = op->qid;
  q.entries = op->entries;
  q.sq_flow_control = !(op->cattr & nf::connect::kCattrDisableSqFlowControl);
  q.subsystem_slot = op->cfg.slot;
  q.subsystem = sub;
  if (!closing) q.state = Qpair::State::kActive;
  if (q.qid == 0) q.ctrlr->attach_admin(q);
  uint16_t authreq = 0;
  if (op->auth && !closing) {
    auth_begin(q, op->auth);  // kAuthenticating until the host has proved itself
    authreq = nf::connect::kAuthreqAtr;
  }
  r.rsp.dw0 = nf::connect::make_success_dw0(q.cntlid, authreq);
  finish(r, kSuccess);
}

void back_to_queue(Target& t, Target::ConnectOp* op) {
  PollGroup* g = op->group;
  if (!t.run_on(g->thread(), [op] { finish_connect(op); })) delete op;
}

}  // namespace

// The target thread: which subsystem, whether this host may use it here, and then either a new
// controller (admin queue) or the controller the I/O queue joins.
void Target::route_connect(ConnectOp* op) {
  auto fail = [&](uint16_t st, uint32_t dw0) {
    op->status = st;
    op->dw0 = dw0;
    back_to_queue(*this, op);
  };
  const std::string subnqn(op->data.subnqn, strnlen(op->data.subnqn, sizeof op->data.subnqn));
  const std::string hostnqn(op->data.hostnqn, strnlen(op->data.hostnqn, sizeof op->data.hostnqn));
  if (stopping_) return fail(specific(nf::sc::kConnectControllerBusy), 0);
  Subsystem* s = find(subnqn);
  if (s == nullptr || s->deleting_)
    return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectData, subnqn), true));
  bool listener_ok = s->discovery();
  for (const ListenAddress& a : s->listeners_) listener_ok = listener_ok || a == op->listen;
  if (!s->host_allowed(hostnqn) || !listener_ok) {
    fmt::print(stderr, "nvmf: host {} may not connect to {}{}\n", hostnqn, subnqn,
               listener_ok ? "" : " at " + op->listen.to_string());
    return fail(specific(nf::sc::kConnectInvalidHost), 0);
  }
  std::array<uint8_t, 16> hostid;
  std::memcpy(hostid.data(), op->data.hostid, 16);
  op->cfg.slot = s->slot_;
  if (const HostKeys* k = s->host_keys(hostnqn); k != nullptr && k->key) {
    auto a = std::make_shared<AuthConfig>();
    a->host_key = *k->key;
    a->ctrlr_key = k->ctrlr_key;
    a->options = auth_options_;
    a->hostnqn = hostnqn;
    a->subnqn = subnqn;
    op->auth = std::move(a);
  }
  if (op->qid == 0) {
    if (op->data.cntlid != nf::connect::kCntlidDynamic)
      return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectData, cntlid), true));
    // The next free CNTLID in [min, max], round robin: a reconnecting host gets a new one.
    const uint16_t lo = s->opts_.min_cntlid, hi = s->opts_.max_cntlid;
    uint16_t cntlid = 0;
    for (uint32_t i = 0; i <= uint32_t{hi} - lo; ++i) {
      uint16_t c = s->next_cntlid_;
      s->next_cntlid_ = c >= hi ? lo : static_cast<uint16_t>(c + 1);
      if (c < lo || c > hi || s->ctrls_.count(c)) continue;
      cntlid = c;
      break;
    }
    if (cntlid == 0) return fail(specific(nf::sc::kConnectControllerBusy), 0);
    ControllerConfig& cfg = op->cfg;
    cfg.id = next_object_id();
    cfg.cntlid = cntlid;
    cfg.subnqn = subnqn;
    cfg.discovery = s->discovery();
    cfg.serial = s->opts_.serial;
    cfg.model = s->opts_.model;
    cfg.firmware = "pollux";
    cfg.max_namespaces = s->opts_.max_namespaces;
    cfg.hostnqn = hostnqn;
    cfg.hostid = hostid;
    cfg.kato_ms = op->kato;
    cfg.kas = s->opts_.kas;
    cfg.cqt_ms = s->opts_.cqt_ms;
    cfg.limits = op->qpair->transport().limits();
    s->ctrls_[cntlid] = ControllerInfo{op->group, cfg.id, hostnqn, hostid};
    return back_to_queue(*this, op);
  }
  if (s->discovery())
    return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectCommand, qid), false));
  auto it = s->ctrls_.find(op->data.cntlid);
  if (it == s->ctrls_.end())
    return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectData, cntlid), true));
  const ControllerInfo& ci = it->second;
  if (ci.hostnqn != hostnqn)
    return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectData, hostnqn), true));
  if (ci.hostid != hostid)
    return fail(kInvalidParameters, invalid_param(offsetof(nf::ConnectData, hostid), true));
  op->ctrl_group = ci.group;
  op->ctrl_id = ci.id;
  const bool sent = run_on(ci.group->thread(), [this, op] {
    Controller* c = op->ctrl_group->controller(op->ctrl_id);
    if (c == nullptr) {
      op->status = kInvalidParameters;
      op->dw0 = invalid_param(offsetof(nf::ConnectData, cntlid), true);
    } else {
      op->status = c->join_io(op->qid, op->group, op->qpair_id, op->entries);
      if (op->status == kInvalidParameters)
        op->dw0 = invalid_param(offsetof(nf::ConnectCommand, qid), false);
    }
    back_to_queue(*this, op);
  });
  if (!sent) fail(specific(nf::sc::kConnectControllerBusy), 0);
}

// The queue's thread: the command itself, then off to the target thread.
void execute_fabrics(Request& r) {
  Qpair& q = *r.qpair;
  nf::FabricsCommand f;
  std::memcpy(&f, &r.cmd, sizeof f);
  if (f.fctype == nf::fctype::kDisconnect) {
    // An I/O queue: done once the response has gone (the transport sends it, then closes).
    finish(r, kSuccess);
    q.disconnect();
    return;
  }
  if (f.fctype != nf::fctype::kConnect) return finish(r, generic(sn::sc::kInvalidOpcode));
  if (q.state != Qpair::State::kAwaitingConnect)
    return finish(r, generic(sn::sc::kCommandSequenceError));
  nf::ConnectCommand c;
  std::memcpy(&c, &r.cmd, sizeof c);
  if (r.data == nullptr || r.length < sizeof(nf::ConnectData))
    return finish(r, generic(sn::sc::kInvalidField));
  if (c.recfmt != nf::connect::kRecfmt)
    return finish(r, specific(nf::sc::kConnectIncompatibleFormat));
  const TransportLimits& l = q.transport().limits();
  const uint32_t max = c.qid == 0 ? l.max_aq_depth : l.max_queue_depth;
  if (c.sqsize == 0 || uint32_t{c.sqsize} + 1 > max)
    return fail_connect(r, kInvalidParameters,
                        invalid_param(offsetof(nf::ConnectCommand, sqsize), false));
  auto op = std::make_unique<Target::ConnectOp>();
  std::memcpy(&op->data, r.data, sizeof op->data);
  auto terminated = [](const char* s, std::size_t n) { return std::memchr(s, 0, n) != nullptr; };
  if (!terminated(op->data.subnqn, sizeof op->data.subnqn))
    return fail_connect(r, kInvalidParameters,
                        invalid_param(offsetof(nf::ConnectData, subnqn), true));
  if (!terminated(op->data.hostnqn, sizeof op->data.hostnqn))
    return fail_connect(r, kInvalidParameters,
                        invalid_param(offsetof(nf::ConnectData, hostnqn), true));
  if (!q.prepare(c.qid, uint32_t{c.sqsize} + 1))
    return finish(r, status(sn::sct::kGeneric, sn::sc::kInternalError, false));
  op->req = &r;
  op->qpair = &q;
  op->group = &q.group();
  op->qpair_id = q.id();
  op->qid = c.qid;
  op->entries = uint32_t{c.sqsize} + 1;
  op->cattr = c.cattr;
  op->kato = c.kato;
  op->listen = q.listen_address();
  q.state = Qpair::State::kConnecting;
  Target& t = q.group().target();
  Target::ConnectOp* raw = op.release();
  if (!t.run_on(t.thread(), [&t, raw] { t.route_connect(raw); })) {
    q.state = Qpair::State::kAwaitingConnect;
    std::unique_ptr<Target::ConnectOp> drop(raw);
    finish(r, specific(nf::sc::kConnectControllerBusy));
  }
}

// ---------------------------------------------------------------------- queue end ---

void qpair_closing(Qpair& q) {
  if (q.is_admin() && q.ctrlr != nullptr) q.ctrlr->release_held(q);
  abort_io(q);
}

void qpair_closed(Qpair& q) {
  PollGroup& g = q.group();
  if (q.is_admin() && q.ctrlr != nullptr) {
    --g.stats().current_admin_qpairs;
    Controller* c = q.ctrlr;
    q.ctrlr = nullptr;
    c->admin_gone();  // may delete c
    return;
  }
  if (q.ctrlr_group != nullptr) {
    --g.stats().current_io_qpairs;
    Target& t = g.target();
    t.run_on(q.ctrlr_group->thread(),
             [cg = q.ctrlr_group, id = q.ctrlr_id, qid = q.qid, qp = q.id()] {
               if (Controller* c = cg->controller(id)) c->io_gone(qid, qp);
             });
    q.ctrlr_group = nullptr;
  }
}

}  // namespace pollux::fabric::target
