#include "fabric/rdma/target_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "fabric/rdma/device.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma {

namespace nr = spec::nvme_rdma;

namespace {
constexpr uint64_t kAcceptPeriodUs = 100;
constexpr uint64_t kCmPeriodUs = 100;  // disconnects need no faster notice
constexpr int kBatch = 32;
}  // namespace

std::string validate(const RdmaTargetOptions& o) {
  if (std::string e = target::validate_common(
          o, 16 * 1024 * 1024 - 4096,
          "a power of two from 4096 below 16 MiB (a keyed SGL's 24-bit length)");
      !e.empty())
    return e;
  if (o.num_cqe < 64) return "num_cqe: at least 64";
  if (o.max_srq_depth < 16 || o.max_srq_depth > 65536) return "max_srq_depth: 16 to 65536";
  return "";
}

// ---------------------------------------------------------------------- transport ---

struct RdmaTargetTransport::Listener {
  target::ListenAddress requested, address;
  std::unique_ptr<CmListener> cm;
  event::Poller* poller = nullptr;
  RdmaTargetTransport* transport = nullptr;
  std::vector<std::unique_ptr<CmId>> pending;  // connected, REQ not read yet
};

RdmaTargetTransport::RdmaTargetTransport(target::Target& tgt, const RdmaTargetOptions& o,
                                         verbs::Context& ctx, env::MemoryRegistry& registry)
    : tgt_(tgt), opts_(o), ctx_(ctx), registry_(registry) {
  limits_.max_queue_depth = o.max_queue_depth;
  limits_.max_aq_depth = o.max_aq_depth;
  limits_.max_io_qpairs_per_ctrlr = o.max_io_qpairs_per_ctrlr;
  limits_.in_capsule_data_size = o.in_capsule_data_size;
  limits_.max_io_size = o.max_io_size;
  limits_.discovery_trtype = spec::nvmf::trtype::kRdma;
  limits_.keyed_sgl = true;
  limits_.msdbd = kMaxKeyedSgls;
}

Result<std::unique_ptr<RdmaTargetTransport>> RdmaTargetTransport::create(
    target::Target& tgt, const RdmaTargetOptions& o, verbs::Context& ctx, net::Network* cm_network,
    env::MemoryRegistry* registry) {
  if (std::string e = validate(o); !e.empty()) return make_error(EINVAL, e);
  std::unique_ptr<RdmaTargetTransport> t(new RdmaTargetTransport(
      tgt, o, ctx, registry != nullptr ? *registry : env::MemoryRegistry::global()));
  auto cm = connection_manager_for(ctx, cm_network, o.qp);
  if (!cm) return make_error(cm.error().code, "RDMA CM: " + cm.error().message);
  t->cm_ = std::move(cm).value();
  auto pd = ctx.alloc_pd();
  if (!pd) return make_error(pd.error().code, "RDMA transport PD: " + pd.error().message);
  t->pd_ = std::move(pd).value();
  auto pool = env::DmaBufferPool::create(t->registry_, o.max_io_size, o.num_shared_buffers);
  if (!pool)
    return make_error(pool.error().code, "RDMA transport buffers: " + pool.error().message);
  t->pool_ = std::move(pool).value();
  // READ responses land in the buffers; WRITEs send from them.
  auto mr = ctx.reg_mr(*t->pd_, t->pool_->region().data(), t->pool_->region().size(),
                       verbs::access::kLocalWrite);
  if (!mr) return make_error(mr.error().code, "RDMA transport buffers MR: " + mr.error().message);
  t->pool_mr_ = std::move(mr).value();
  for (const auto& g : tgt.groups())
    t->groups_.push_back(std::make_unique<RdmaTargetGroup>(*t, *g));
  return t;
}

Result<std::unique_ptr<RdmaTargetTransport>> RdmaTargetTransport::create_on_device(
    target::Target& tgt, RdmaTargetOptions o, const std::string& device) {
  auto ctx = open_rdma_device(device, env::MemoryRegistry::global());
  if (!ctx) return ctx.error();
  o.rdma_device = device;
  auto t = create(tgt, o, *ctx.value());
  if (!t) return t.error();
  t.value()->owned_ctx_ = std::move(ctx).value();
  return t;
}

RdmaTargetTransport::~RdmaTargetTransport() {
  listeners_.clear();
  groups_.clear();
  cm_.reset();  // connections (QPs) and caches go before the MR, the pool and the PD
  pool_mr_.reset();
  pool_.reset();
  pd_.reset();
  owned_ctx_.reset();
}

RdmaTargetGroup* RdmaTargetTransport::group_of(target::PollGroup& g) const {
  return g.index() < groups_.size() ? groups_[g.index()].get() : nullptr;
}

target::Status RdmaTargetTransport::listen(const target::ListenAddress& a) {
  std::string fam = a.adrfam;
  for (char& c : fam) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (fam != "ipv4" && fam != "ipv6")
    return make_error(EINVAL, "adrfam '" + a.adrfam + "': IPv4 or IPv6");
  if (a.traddr.empty()) return make_error(EINVAL, "traddr: missing");
  const std::string port = a.trsvcid.empty() ? std::to_string(nr::kIoPort) : a.trsvcid;
  auto cm = cm_->listen(fam, a.traddr, port);
  if (!cm)
    return make_error(cm.error().code,
                      fmt::format("listen {}: {}", a.to_string(), cm.error().message));
  auto l = std::make_unique<Listener>();
  l->requested = a;
  l->cm = std::move(cm).value();
  l->address = a;
  l->address.trsvcid = std::to_string(l->cm->port());
  l->transport = this;
  l->poller =
      tgt_.thread()->register_poller(accept_poll, l.get(), kAcceptPeriodUs, "nvmf_rdma_accept");
  fmt::print(stderr, "nvmf/rdma: listening on {}:{} ({})\n", a.traddr, l->cm->port(),
             std::string(cm_->kind()) == "stream" ? "stream CM" : cm_->kind());
  listeners_.push_back(std::move(l));
  return target::ok_status();
}

void RdmaTargetTransport::stop_listening(const target::ListenAddress& a) {
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
    if (!((*it)->address == a) && !((*it)->requested == a)) continue;
    tgt_.thread()->unregister_poller((*it)->poller);
    listeners_.erase(it);
    return;
  }
}

uint16_t RdmaTargetTransport::bound_port(const target::ListenAddress& a) const {
  for (auto it = listeners_.rbegin(); it != listeners_.rend(); ++it)
    if ((*it)->address == a || (*it)->requested == a) return (*it)->cm->port();
  return 0;
}

// The target thread: new CM connections wait here for their REQ, which then goes with the
// connection to the next poll group.
event::PollStatus RdmaTargetTransport::accept_poll(void* arg) {
  auto& l = *static_cast<Listener*>(arg);
  RdmaTargetTransport& t = *l.transport;
  bool any = false;
  while (auto id = l.cm->get_request()) {
    l.pending.push_back(std::move(id));
    any = true;
  }
  for (std::size_t i = 0; i < l.pending.size();) {
    const CmEvent e = l.pending[i]->poll();
    if (e.type == CmEventType::kNone && l.pending[i]->state() != CmId::State::kClosed) {
      ++i;
      continue;
    }
    any = true;
    std::unique_ptr<CmId> id = std::move(l.pending[i]);
    l.pending.erase(l.pending.begin() + static_cast<std::ptrdiff_t>(i));
    if (e.type != CmEventType::kConnectRequest) continue;  // it went away
    // The request's private data names the queue (checked in full on arrival).
    nr::CmRequest req{};
    const bool admin = e.private_data_len >= sizeof req &&
                       (std::memcpy(&req, e.private_data, sizeof req), req.qid == 0);
    target::PollGroup& pg = t.tgt_.next_group(admin);
    RdmaTargetGroup* tg = t.groups_[pg.index()].get();
    CmId* raw = id.release();  // a copyable message: owned again on arrival
    if (!t.tgt_.run_on(pg.thread(), [tg, raw, e, a = l.address] {
          tg->adopt(std::unique_ptr<CmId>(raw), e, a);
        }))
      delete raw;
  }
  return any ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

void RdmaTargetTransport::add_group(target::PollGroup& g) {
  if (RdmaTargetGroup* tg = group_of(g)) tg->start();
}

void RdmaTargetTransport::remove_group(target::PollGroup& g) {
  if (RdmaTargetGroup* tg = group_of(g)) tg->stop();
}

nlohmann::json RdmaTargetTransport::options_json() const {
  nlohmann::json j = target::common_options_json(opts_, "RDMA");
  j["num_cqe"] = opts_.num_cqe;
  j["max_srq_depth"] = opts_.max_srq_depth;
  j["no_srq"] = opts_.no_srq;
  j["rdma_device"] = opts_.rdma_device;
  return j;
}

nlohmann::json RdmaTargetTransport::group_stats(target::PollGroup& g) const {
  RdmaTargetGroup* tg = group_of(g);
  if (tg == nullptr) return nlohmann::json::object();
  const auto& s = tg->stats();
  return {{"trtype", "RDMA"},
          {"connections", tg->connections()},
          {"accepted", s.accepted.load()},
          {"rejected", s.rejected.load()},
          {"closed", s.closed.load()},
          {"polls", s.polls.load()},
          {"busy_polls", s.busy_polls.load()},
          {"completions", s.completions.load()},
          {"buffer_waits", s.buffer_waits.load()},
          {"rdma_reads", s.rdma_reads.load()},
          {"rdma_writes", s.rdma_writes.load()},
          {"in_capsule", s.in_capsule.load()},
          {"bad_sgls", s.bad_sgls.load()},
          {"error_completions", s.error_completions.load()},
          {"srq", tg->srq() != nullptr},
          {"srq_posted", s.srq_posted.load()}};
}

// ---------------------------------------------------------------------- poll group ---

RdmaTargetGroup::RdmaTargetGroup(RdmaTargetTransport& t, target::PollGroup& g)
    : t_(t), g_(g), cache_(t.pool(), std::max<std::size_t>(t.options().buf_cache_size, 1)) {}

RdmaTargetGroup::~RdmaTargetGroup() {
  for (RdmaConnection* c : conns_) delete c;  // QPs before the SRQ and the CQ
  conns_.clear();
  srq_.reset();
  srq_mr_.reset();
  cq_.reset();
}

// SPDK's default: one SRQ per poll group when the device has them. Its buffers are the
// capsule's size; the CQ keeps room for a completion of each (a QP in error flushes what it
// took). false: no SRQ (the connections post their own receives).
bool RdmaTargetGroup::start_srq() {
  const RdmaTargetOptions& o = t_.options();
  if (o.no_srq || t_.context().attr().max_srq == 0) return false;
  // Half the CQ at most (the rest is for the connections' sends), and what the device allows.
  const uint32_t depth =
      std::min({o.max_srq_depth, o.num_cqe / 2, std::max(t_.context().attr().max_qp_wr, 16u)});
  if (depth < o.max_srq_depth) {
    fmt::print(stderr, "nvmf/rdma: poll group {}: SRQ of {} buffers (max_srq_depth {}: num_cqe {} "
               "and the device allow no more)\n", g_.index(), depth, o.max_srq_depth, o.num_cqe);
  }
  if (!reserve_cq(depth)) return false;
  const std::size_t stride = capsule_stride(o.in_capsule_data_size);
  auto srq = t_.context().create_srq(t_.pd(), depth, 1);
  auto region = srq ? env::DmaRegion::create(t_.registry(), stride * depth, env::DmaOptions{false})
                    : Result<std::unique_ptr<env::DmaRegion>>(srq.error());
  auto mr = region ? t_.context().reg_mr(t_.pd(), region.value()->data(), stride * depth,
                                         verbs::access::kLocalWrite)
                   : Result<std::unique_ptr<verbs::Mr>>(region.error());
  if (!mr) {
    fmt::print(stderr, "nvmf/rdma: poll group {}: no SRQ ({}); receives per connection\n",
               g_.index(), mr.error().message);
    release_cq(depth);
    return false;
  }
  srq_ = std::move(srq).value();
  srq_region_ = std::move(region).value();
  srq_mr_ = std::move(mr).value();
  auto* base = static_cast<uint8_t*>(srq_region_->data());
  srq_slots_.assign(depth, RecvSlot{});
  for (uint32_t i = 0; i < depth; ++i) {
    srq_slots_[i].buf = base + stride * i;
    srq_slots_[i].shared = true;
  }
  by_qpn_.reserve(1024);
  for (RecvSlot& s : srq_slots_) repost(s);
  return srq_ != nullptr;
}

void RdmaTargetGroup::repost(RecvSlot& s) {
  if (!srq_) return;
  s.conn = nullptr;
  s.next = nullptr;
  const uint32_t size = kCapsuleHeader + t_.options().in_capsule_data_size;
  const verbs::Sge sge{reinterpret_cast<uintptr_t>(s.buf), size, srq_mr_->lkey()};
  verbs::RecvWr wr;
  wr.wr_id = make_wr_id(&s, WrKind::kRecv);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const verbs::RecvWr* bad = nullptr;
  if (srq_->post_recv(wr, &bad) != 0) {
    fmt::print(stderr, "nvmf/rdma: poll group {}: an SRQ receive could not be posted\n",
               g_.index());
    return;
  }
  ++stats_.srq_posted;
}

void RdmaTargetGroup::start() {
  auto cq = t_.context().create_cq(t_.options().num_cqe);
  if (!cq) {
    fmt::print(stderr, "nvmf/rdma: poll group {}: CQ: {}\n", g_.index(), cq.error().message);
    return;  // connections for this group are rejected (no resources)
  }
  cq_ = std::move(cq).value();
  start_srq();
  poller_ = g_.thread()->register_poller(poll, this, 0, "nvmf_rdma_poll_group");
  cm_poller_ = g_.thread()->register_poller(cm_poll, this, kCmPeriodUs, "nvmf_rdma_cm");
}

void RdmaTargetGroup::stop() {
  if (poller_ != nullptr) g_.thread()->unregister_poller(poller_);
  if (cm_poller_ != nullptr) g_.thread()->unregister_poller(cm_poller_);
  poller_ = cm_poller_ = nullptr;
}

bool RdmaTargetGroup::reserve_cq(uint32_t n) {
  if (!cq_ || cq_used_ + n > cq_->capacity()) return false;
  cq_used_ += n;
  return true;
}

void RdmaTargetGroup::adopt(std::unique_ptr<CmId> cm, CmEvent request,
                            target::ListenAddress listen) {
  if (g_.target().stopping()) return;  // the CM stream closes: the host sees it unreachable
  auto* c = new RdmaConnection(*this, std::move(cm), std::move(listen));
  if (!c->open(request)) {  // without a CQ (start() failed) it is rejected: no resources
    ++stats_.rejected;
    if (c->closing()) {
      conns_.push_back(c);  // work requests were posted: it goes once they have drained
    } else {
      delete c;
    }
    return;
  }
  ++stats_.accepted;
  conns_.push_back(c);
}

void RdmaTargetGroup::wait_for_buffer(RdmaRequest& r) {
  ++stats_.buffer_waits;
  waits_.push_back(&r);
}

void RdmaTargetGroup::forget_waits(RdmaConnection& c) {
  waits_.erase(std::remove_if(waits_.begin(), waits_.end(),
                              [&](const RdmaRequest* r) { return r->conn == &c; }),
               waits_.end());
}

void RdmaTargetGroup::finalize(RdmaConnection* c) {
  c->finalize();
  conns_.erase(std::find(conns_.begin(), conns_.end(), c));
  delete c;
  ++stats_.closed;
}

event::PollStatus RdmaTargetGroup::poll(void* arg) {
  auto& g = *static_cast<RdmaTargetGroup*>(arg);
  ++g.stats_.polls;
  bool busy = false;
  verbs::WorkCompletion wc[kBatch];
  for (int round = 0; round < 4; ++round) {
    const int n = g.cq_->poll(wc, kBatch);
    if (n <= 0) break;
    busy = true;
    g.stats_.completions += static_cast<uint64_t>(n);
    for (int i = 0; i < n; ++i) {
      const WrKind k = wr_kind(wc[i].wr_id);
      if (k == WrKind::kRecv) {
        RecvSlot& s = *wr_owner<RecvSlot>(wc[i].wr_id);
        if (s.shared) {  // the SRQ's: the completion names the QP that took it
          --g.stats_.srq_posted;
          const auto it = g.by_qpn_.find(wc[i].qp_num);
          if (it == g.by_qpn_.end()) {
            g.repost(s);  // a QP already gone flushed it
            continue;
          }
          s.conn = it->second;
        }
        s.conn->on_completion(wc[i]);
        continue;
      }
      RdmaConnection* c = k == WrKind::kDrainSend ? wr_owner<RdmaConnection>(wc[i].wr_id)
                                                  : wr_owner<RdmaRequest>(wc[i].wr_id)->conn;
      c->on_completion(wc[i]);
    }
    if (n < kBatch) break;
  }
  while (!g.waits_.empty()) {
    void* b = g.cache_.get();
    if (b == nullptr) break;
    RdmaRequest* r = g.waits_.front();
    g.waits_.erase(g.waits_.begin());
    r->conn->buffer_ready(*r, b);
    busy = true;
  }
  for (std::size_t i = 0; i < g.conns_.size();) {
    RdmaConnection* c = g.conns_[i];
    if (c->finished()) {
      g.finalize(c);  // after the batch: no completion polled above names it any more
      busy = true;
    } else {
      ++i;
    }
  }
  if (busy) ++g.stats_.busy_polls;
  return busy ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

event::PollStatus RdmaTargetGroup::cm_poll(void* arg) {
  auto& g = *static_cast<RdmaTargetGroup*>(arg);
  for (RdmaConnection* c : g.conns_) c->poll_cm();
  return event::PollStatus::kIdle;
}

}  // namespace pollux::fabric::rdma
