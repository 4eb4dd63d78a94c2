#include "fabric/tcp/target_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spec/nvme_tcp.h"

namespace pollux::fabric::tcp {

namespace nt = spec::nvme_tcp;

namespace {
constexpr uint64_t kAcceptPeriodUs = 1000;
constexpr int kMaxEvents = 64;

}  // namespace

std::string validate(const TcpTargetOptions& o) {
  if (std::string e = target::validate_common(o, 16 * 1024 * 1024,
                                             "a power of two from 4096 to 16 MiB");
      !e.empty())
    return e;
  if (o.max_h2c_data_size < nt::kMinMaxH2cData || o.max_h2c_data_size % 4 != 0)
    return "max_h2c_data_size: a multiple of 4, at least 4096";
  if (o.sock_priority != 0) return "sock_priority: not supported (must be 0)";
  return "";
}

// ---------------------------------------------------------------------- transport ---

struct TcpTargetTransport::Listener {
  target::ListenAddress requested;  // as asked (trsvcid may be "0": any)
  target::ListenAddress address;    // as bound
  std::unique_ptr<net::Listener> socket;
  uint16_t port = 0;
  event::Poller* poller = nullptr;
  TcpTargetTransport* transport = nullptr;
};

TcpTargetTransport::TcpTargetTransport(target::Target& tgt, const TcpTargetOptions& o,
                                       net::Network& network, env::MemoryRegistry& registry)
    : tgt_(tgt), opts_(o), net_(network), registry_(registry) {
  limits_.max_queue_depth = o.max_queue_depth;
  limits_.max_aq_depth = o.max_aq_depth;
  limits_.max_io_qpairs_per_ctrlr = o.max_io_qpairs_per_ctrlr;
  limits_.in_capsule_data_size = o.in_capsule_data_size;
  limits_.max_io_size = o.max_io_size;
  limits_.discovery_trtype = spec::nvmf::trtype::kTcp;
}

Result<std::unique_ptr<TcpTargetTransport>> TcpTargetTransport::create(
    target::Target& tgt, const TcpTargetOptions& o, net::Network* network,
    env::MemoryRegistry* registry) {
  if (std::string e = validate(o); !e.empty()) return make_error(EINVAL, e);
  std::unique_ptr<TcpTargetTransport> t(
      new TcpTargetTransport(tgt, o, network != nullptr ? *network : net::posix_network(),
                             registry != nullptr ? *registry : env::MemoryRegistry::global()));
  auto pool = env::DmaBufferPool::create(t->registry_, o.max_io_size, o.num_shared_buffers);
  if (!pool) return make_error(pool.error().code, "TCP transport buffers: " + pool.error().message);
  t->pool_ = std::move(pool).value();
  for (const auto& g : tgt.groups()) t->groups_.push_back(std::make_unique<TcpTargetGroup>(*t, *g));
  return t;
}

TcpTargetTransport::~TcpTargetTransport() {
  listeners_.clear();
  groups_.clear();  // their caches give buffers back before the pool goes
}

TcpTargetGroup* TcpTargetTransport::group_of(target::PollGroup& g) const {
  return g.index() < groups_.size() ? groups_[g.index()].get() : nullptr;
}

target::Status TcpTargetTransport::listen(const target::ListenAddress& a) {
  const std::string fam = [&] {
    std::string f = a.adrfam;
    for (char& c : f) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return f;
  }();
  if (fam != "ipv4" && fam != "ipv6")
    return make_error(EINVAL, "adrfam '" + a.adrfam + "': IPv4 or IPv6");
  if (a.traddr.empty()) return make_error(EINVAL, "traddr: missing");
  const std::string port = a.trsvcid.empty() ? std::to_string(nt::kIoPort) : a.trsvcid;
  auto sock = net_.listen(fam, a.traddr, port);
  if (!sock)
    return make_error(sock.error().code,
                      fmt::format("listen {}: {}", a.to_string(), sock.error().message));
  auto l = std::make_unique<Listener>();
  l->requested = a;
  l->socket = std::move(sock).value();
  l->port = l->socket->port();
  l->address = a;
  l->address.trsvcid = std::to_string(l->port);
  l->transport = this;
  l->poller =
      tgt_.thread()->register_poller(accept_poll, l.get(), kAcceptPeriodUs, "nvmf_tcp_accept");
  fmt::print(stderr, "nvmf/tcp: listening on {}:{}\n", a.traddr, l->port);
  listeners_.push_back(std::move(l));
  return target::ok_status();
}

void TcpTargetTransport::stop_listening(const target::ListenAddress& a) {
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
    if (!((*it)->address == a) && !((*it)->requested == a)) continue;
    tgt_.thread()->unregister_poller((*it)->poller);
    listeners_.erase(it);
    return;
  }
}

uint16_t TcpTargetTransport::bound_port(const target::ListenAddress& a) const {
  for (auto it = listeners_.rbegin(); it != listeners_.rend(); ++it)  // the latest "any"
    if ((*it)->address == a || (*it)->requested == a) return (*it)->port;
  return 0;
}

// The target thread: new connections go to the poll groups in turn, by message.
event::PollStatus TcpTargetTransport::accept_poll(void* arg) {
  auto& l = *static_cast<Listener*>(arg);
  TcpTargetTransport& t = *l.transport;
  bool any = false;
  for (int i = 0; i < 32; ++i) {
    std::unique_ptr<net::Socket> sock = l.socket->accept();
    if (!sock) break;
    any = true;
    target::PollGroup& pg = t.tgt_.next_group();
    TcpTargetGroup* tg = t.groups_[pg.index()].get();
    // A copyable message: the socket travels as a raw pointer, owned again on arrival.
    net::Socket* s = sock.release();
    if (!t.tgt_.run_on(pg.thread(),
                       [tg, s, a = l.address] { tg->adopt(std::unique_ptr<net::Socket>(s), a); }))
      delete s;
  }
  return any ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

void TcpTargetTransport::add_group(target::PollGroup& g) {
  if (TcpTargetGroup* tg = group_of(g)) tg->start();
}

void TcpTargetTransport::remove_group(target::PollGroup& g) {
  if (TcpTargetGroup* tg = group_of(g)) tg->stop();
}

nlohmann::json TcpTargetTransport::options_json() const {
  nlohmann::json j = target::common_options_json(opts_, "TCP");
  j["c2h_success"] = opts_.c2h_success;
  j["max_h2c_data_size"] = opts_.max_h2c_data_size;
  return j;
}

nlohmann::json TcpTargetTransport::group_stats(target::PollGroup& g) const {
  TcpTargetGroup* tg = group_of(g);
  if (tg == nullptr) return nlohmann::json::object();
  const auto& s = tg->stats();
  return {{"trtype", "TCP"},
          {"connections", tg->connections()},
          {"accepted", s.accepted.load()},
          {"closed", s.closed.load()},
          {"polls", s.polls.load()},
          {"busy_polls", s.busy_polls.load()},
          {"buffer_waits", s.buffer_waits.load()},
          {"corked_sends", s.corked_sends.load()},
          {"pushes", s.pushes.load()}};
}

// ---------------------------------------------------------------------- poll group ---

TcpTargetGroup::TcpTargetGroup(TcpTargetTransport& t, target::PollGroup& g)
    : t_(t), g_(g), cache_(t.pool(), std::max<std::size_t>(t.options().buf_cache_size, 1)) {}

TcpTargetGroup::~TcpTargetGroup() {
  for (TcpConnection* c : conns_) delete c;
}

void TcpTargetGroup::start() {
  ready_ = t_.network().readiness_group();
  poller_ = g_.thread()->register_poller(poll, this, 0, "nvmf_tcp_poll_group");
}

void TcpTargetGroup::stop() {
  if (poller_ != nullptr) g_.thread()->unregister_poller(poller_);
  poller_ = nullptr;
}

void TcpTargetGroup::adopt(std::unique_ptr<net::Socket> socket, target::ListenAddress listen) {
  if (poller_ == nullptr || g_.target().stopping()) return;  // the socket closes
  auto* c = new TcpConnection(*this, std::move(socket), std::move(listen));
  ready_->add(c->socket(), c);
  conns_.push_back(c);
  ++stats_.accepted;
}

void TcpTargetGroup::put_buffer(void* b) {
  cache_.put(b);
}

void TcpTargetGroup::wait_for_buffer(TcpRequest& r, TcpConnection& c) {
  ++stats_.buffer_waits;
  waits_.push_back(Wait{&r, &c});
}

void TcpTargetGroup::forget_waits(TcpConnection& c) {
  waits_.erase(
      std::remove_if(waits_.begin(), waits_.end(), [&](const Wait& w) { return w.c == &c; }),
      waits_.end());
}

void TcpTargetGroup::finalize(TcpConnection* c) {
  ready_->remove(c->socket());
  c->finalize();  // the core lets go of it (an admin queue ends its association)
  conns_.erase(std::find(conns_.begin(), conns_.end(), c));
  delete c;
  ++stats_.closed;
}

event::PollStatus TcpTargetGroup::poll(void* arg) {
  auto& g = *static_cast<TcpTargetGroup*>(arg);
  ++g.stats_.polls;
  bool busy = false;
  // Responses completed since the last poll (by the bdev layer's pollers) go first: they
  // should not wait behind the readiness poll.
  // A connection whose host does not read (its socket full) is no work: polling it again
  // and again must not look busy, or a virtual-time world could never move its clock on.
  auto flush_all = [&g, &busy] {
    for (TcpConnection* c : g.conns_) {
      if (c->wants_flush() && c->flush()) busy = true;
    }
  };
  flush_all();
  // Requests that waited for a data buffer, first come first served.
  while (!g.waits_.empty()) {
    void* b = g.cache_.get();
    if (b == nullptr) break;
    const Wait w = g.waits_.front();
    g.waits_.erase(g.waits_.begin());
    w.c->buffer_ready(*w.r, b);
    busy = true;
  }
  void* ready[kMaxEvents];
  const int n = g.ready_->poll(ready, kMaxEvents);
  for (int i = 0; i < n; ++i) static_cast<TcpConnection*>(ready[i])->on_readable();
  busy = busy || n > 0;
  for (TcpConnection* c : g.conns_) {
    if (!c->closing() && c->wants_resume()) {
      c->on_readable();
      busy = true;
    }
  }
  flush_all();  // what this poll's commands produced at once (R2Ts, errors, admin answers)
  for (TcpConnection* c : g.conns_) c->end_poll();
  for (std::size_t i = 0; i < g.conns_.size();) {
    TcpConnection* c = g.conns_[i];
    if (c->finished()) {
      g.finalize(c);
      busy = true;
    } else {
      ++i;
    }
  }
  if (busy) ++g.stats_.busy_polls;
  return busy ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

}  // namespace pollux::fabric::tcp
