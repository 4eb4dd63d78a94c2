#include "fabric/net/sim_network.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>

namespace pollux::fabric::net {

namespace {
uint64_t name_hash(const std::string& s) {  // FNV-1a: the same on every build, unlike std::hash
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}
constexpr uint32_t kHeaderBytes = 40;  // IPv4 + TCP headers per segment
constexpr uint64_t kNever = UINT64_MAX;
constexpr int kMaxLosses = 8;  // of one segment: then the connection would time out anyway
}  // namespace

struct SimNetwork::Link {
  std::string address;
  LinkConfig cfg;
  uint64_t busy_until[2] = {0, 0};  // serialisation, per direction
  uint64_t partition_until = 0;
  uint64_t extra_latency_ns = 0, extra_until = 0;
  double corrupt_rate = 0;
  uint64_t corrupt_until = 0;
};

namespace {
struct Segment {
  uint64_t end;  // stream offset just past it
  uint64_t arrival;
};
// One direction of a connection: a ring of window_bytes holds what was sent and not yet read;
// [read, delivered) is readable, [delivered, sent) in flight. Its bytes are read only once
// written, so it is not zeroed: a connection that carries little (a CM exchange) touches
// little of its 2 x 256 KiB.
struct Direction {
  std::unique_ptr<uint8_t[]> ring;
  uint64_t ring_size = 0;
  uint64_t sent = 0, delivered = 0, read = 0;
  std::deque<Segment> segments;  // in flight, arrival non-decreasing
  uint64_t last_arrival = 0;
  bool fin = false;  // the sender closed: EOF once everything arrived and fin_at passed
  uint64_t fin_at = 0;
};
}  // namespace

struct SimNetwork::Conn {
  uint64_t id = 0;
  Link* link = nullptr;
  std::string names[2];      // side 0: the client's name, 1: the server's
  Direction dir[2];          // dir[s]: what side s sends
  uint64_t syn_arrival = 0;  // the server's kernel has it (accept may take it)
  uint64_t established_at = 0;
  int refused = 0;  // the client's connect fails with this at established_at
  uint64_t reset_at = kNever;
  int reset_error = 0;
  bool open[2] = {true, true};  // side's socket exists (the server's until accept: pending)
  SimListener* listener = nullptr;
  bool reset_due(uint64_t now) const { return now >= reset_at; }
};

// --------------------------------------------------------------------- sockets ---

class SimNetwork::SimSocket final : public Socket {
 public:
  SimSocket(SimNetwork& net, std::shared_ptr<Conn> c, int side)
      : net_(net), c_(std::move(c)), side_(side) {}
  ~SimSocket() override {
    Conn& c = *c_;
    c.open[side_] = false;
    shutdown_write();
    if (!c.open[0] && !c.open[1]) net_.forget(&c);
  }

  void shutdown_write() override {
    Conn& c = *c_;
    Direction& d = c.dir[side_];
    if (d.fin) return;
    d.fin = true;  // a FIN behind the data
    const Link& l = *c.link;
    const uint64_t now = net_.now_ns();
    d.fin_at =
        std::max({now + l.cfg.latency_ns, l.partition_until + l.cfg.latency_ns, d.last_arrival});
  }

  ssize_t send(const iovec* iov, int iovcnt) override {
    Conn& c = *c_;
    const uint64_t now = net_.now_ns();
    if (c.reset_due(now)) return -c.reset_error;
    if (side_ == 0 && (now < c.established_at || c.refused)) return c.refused ? -c.refused : kAgain;
    const Direction& back = c.dir[1 - side_];
    if (back.fin && now >= back.fin_at && !c.open[1 - side_]) return -EPIPE;
    Direction& d = c.dir[side_];
    if (d.fin) return -EPIPE;  // this side shut its writing down
    const uint64_t size = d.ring_size;
    uint64_t room = size - (d.sent - d.read);
    const uint64_t from = d.sent;
    for (int i = 0; i < iovcnt && room > 0; ++i) {
      const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      uint64_t n = std::min<uint64_t>(iov[i].iov_len, room);
      room -= n;
      while (n > 0) {
        const uint64_t at = d.sent % size;
        const uint64_t run = std::min(n, size - at);
        std::memcpy(&d.ring[at], p, run);
        d.sent += run;
        p += run;
        n -= run;
      }
    }
    if (d.sent == from) return kAgain;
    net_.transmit(c, side_, from, d.sent - from);
    return static_cast<ssize_t>(d.sent - from);
  }

  ssize_t recv(const iovec* iov, int iovcnt) override {
    Conn& c = *c_;
    const uint64_t now = net_.now_ns();
    if (c.reset_due(now)) return -c.reset_error;
    net_.settle(c);
    Direction& d = c.dir[1 - side_];
    if (d.delivered == d.read) {
      if (d.fin && d.delivered == d.sent && now >= d.fin_at) return kEof;
      return kAgain;
    }
    const uint64_t size = d.ring_size;
    const uint64_t start = d.read;
    for (int i = 0; i < iovcnt && d.read < d.delivered; ++i) {
      auto* p = static_cast<uint8_t*>(iov[i].iov_base);
      uint64_t n = std::min<uint64_t>(iov[i].iov_len, d.delivered - d.read);
      while (n > 0) {
        const uint64_t at = d.read % size;
        const uint64_t run = std::min(n, size - at);
        std::memcpy(p, &d.ring[at], run);
        d.read += run;
        p += run;
        n -= run;
      }
    }
    return static_cast<ssize_t>(d.read - start);
  }

  bool connected(int* error) override {
    if (side_ == 1) return true;
    const Conn& c = *c_;
    const uint64_t now = net_.now_ns();
    if (now < c.established_at) return false;
    if (c.refused != 0 || c.reset_due(now)) {
      *error = c.refused != 0 ? c.refused : c.reset_error;
      return false;
    }
    return true;
  }

  void wait(bool, uint64_t) override {
    if (net_.wait_hook_) net_.wait_hook_();
  }
  std::string peer() const override { return c_->names[1 - side_]; }

  // Something to read, an end of stream or a reset (what makes epoll report EPOLLIN).
  bool readable() {
    Conn& c = *c_;
    const uint64_t now = net_.now_ns();
    if (c.reset_due(now)) return true;
    net_.settle(c);
    const Direction& d = c.dir[1 - side_];
    return d.delivered > d.read || (d.fin && d.delivered == d.sent && now >= d.fin_at);
  }

 private:
  SimNetwork& net_;
  std::shared_ptr<Conn> c_;
  int side_;
};

class SimNetwork::SimListener final : public Listener {
 public:
  SimListener(SimNetwork& net, std::string key, uint16_t port)
      : net_(net), key_(std::move(key)), port_(port) {}
  ~SimListener() override {
    net_.listeners_.erase(key_);
    for (auto& c : pending_) {  // the kernel's backlog goes with the listener: reset
      c->reset_at = std::min(c->reset_at, net_.now_ns());
      c->reset_error = ECONNRESET;
      c->open[1] = false;
      c->listener = nullptr;
      if (!c->open[0]) net_.forget(c.get());
    }
  }
  std::unique_ptr<Socket> accept() override {
    if (pending_.empty() || pending_.front()->syn_arrival > net_.now_ns()) return nullptr;
    std::shared_ptr<Conn> c = std::move(pending_.front());
    pending_.pop_front();
    c->listener = nullptr;
    return std::make_unique<SimSocket>(net_, std::move(c), 1);
  }
  uint16_t port() const override { return port_; }
  void add(std::shared_ptr<Conn> c) { pending_.push_back(std::move(c)); }

 private:
  SimNetwork& net_;
  std::string key_;
  uint16_t port_;
  std::deque<std::shared_ptr<Conn>> pending_;
};

class SimNetwork::SimGroup final : public ReadinessGroup {
 public:
  void add(Socket& s, void* ctx) override {
    members_.push_back({static_cast<SimSocket*>(&s), ctx});
  }
  void remove(Socket& s) override {
    std::erase_if(members_, [&](const Member& m) { return m.s == &s; });
  }
  int poll(void** ready, int max) override {
    int n = 0;
    for (const Member& m : members_) {
      if (n == max) break;
      if (m.s->readable()) ready[n++] = m.ctx;
    }
    return n;
  }

 private:
  struct Member {
    SimSocket* s;
    void* ctx;
  };
  std::vector<Member> members_;
};

// --------------------------------------------------------------------- network ---

SimNetwork::SimNetwork(const env::Clock& clock, uint64_t seed) : clock_(clock), rng_(seed) {
  record(0x5eed, seed, 0, 0);
}

SimNetwork::~SimNetwork() = default;

double SimNetwork::draw() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void SimNetwork::record(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  for (uint64_t v : {a, b, c, d}) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
  ++records_;
}

SimNetwork::Link& SimNetwork::link(const std::string& address) {
  auto& l = links_[address];
  if (!l) {
    l = std::make_unique<Link>();
    l->address = address;
    l->cfg = default_;
  }
  return *l;
}

void SimNetwork::set_link(const std::string& address, const LinkConfig& c) {
  if (address.empty()) {
    default_ = c;
    for (auto& [a, l] : links_) l->cfg = c;
    return;
  }
  link(address).cfg = c;
}

const LinkConfig& SimNetwork::link_config(const std::string& address) {
  return link(address).cfg;
}

void SimNetwork::forget(Conn* c) {
  std::erase_if(conns_, [c](const std::shared_ptr<Conn>& p) { return p.get() == c; });
}

void SimNetwork::transmit(Conn& c, int dir, uint64_t from, uint64_t len) {
  Link& l = *c.link;
  const LinkConfig& cfg = l.cfg;
  Direction& d = c.dir[dir];
  const uint64_t now = clock_.now();
  const uint64_t mss = std::max<uint32_t>(cfg.mtu, kHeaderBytes + 1) - kHeaderBytes;
  const uint64_t latency = cfg.latency_ns + (now < l.extra_until ? l.extra_latency_ns : 0);
  const double corrupt_rate = std::max(cfg.corrupt, now < l.corrupt_until ? l.corrupt_rate : 0.0);
  for (uint64_t off = from; off < from + len;) {
    const uint64_t n = std::min(mss, from + len - off);
    const uint64_t start = std::max(now, l.busy_until[dir]);
    const uint64_t wire =
        cfg.bandwidth_bps == 0
            ? 0
            : static_cast<uint64_t>(
                  (static_cast<unsigned __int128>(n + kHeaderBytes) * 8 * 1'000'000'000 +
                   cfg.bandwidth_bps - 1) /
                  cfg.bandwidth_bps);
    l.busy_until[dir] = start + wire;
    uint64_t arrival = start + wire + latency;
    if (cfg.jitter_ns > 0) arrival += static_cast<uint64_t>(draw() * double(cfg.jitter_ns));
    if (cfg.loss > 0) {
      int losses = 0;
      while (losses < kMaxLosses && draw() < cfg.loss) ++losses;
      if (losses > 0) {
        arrival += cfg.rto_ns * ((uint64_t{1} << losses) - 1);  // RTO, doubling
        stats_.lost += static_cast<uint64_t>(losses);
      }
    }
    if (now < l.partition_until) {
      // Retransmitted after the partition heals, at a point of the backed-off RTO.
      arrival = std::max(arrival, l.partition_until + latency +
                                      static_cast<uint64_t>(draw() * double(cfg.rto_ns)));
    }
    uint64_t flipped = 0;
    if (corrupt_rate > 0 && draw() < corrupt_rate) {
      const uint64_t pos =
          off + std::min<uint64_t>(n - 1, static_cast<uint64_t>(draw() * double(n)));
      const auto mask = static_cast<uint8_t>(1 + std::min<uint64_t>(254, uint64_t(draw() * 255)));
      d.ring[pos % d.ring_size] ^= mask;
      flipped = (pos << 8) | mask;
      ++stats_.corrupted;
    }
    arrival = std::max(arrival, d.last_arrival);  // TCP delivers in order
    d.last_arrival = arrival;
    d.segments.push_back(Segment{off + n, arrival});
    ++stats_.segments;
    stats_.bytes += n;
    record(c.id * 2 + static_cast<uint64_t>(dir), off, n, arrival);
    if (flipped) record(0xc0bb, c.id, flipped, arrival);
    off += n;
  }
}

void SimNetwork::settle(Conn& c) {
  const uint64_t now = clock_.now();
  for (Direction& d : c.dir) {
    while (!d.segments.empty() && d.segments.front().arrival <= now) {
      d.delivered = d.segments.front().end;
      d.segments.pop_front();
    }
  }
}

uint64_t SimNetwork::next_event_ns() {
  const uint64_t now = clock_.now();
  uint64_t next = kNever;
  auto after = [&](uint64_t t) {
    if (t > now) next = std::min(next, t);
  };
  for (const auto& cp : conns_) {
    Conn& c = *cp;
    settle(c);
    for (const Direction& d : c.dir) {
      if (!d.segments.empty()) after(d.segments.front().arrival);
      if (d.fin) after(d.fin_at);
    }
    if (c.reset_at != kNever) after(c.reset_at);
    after(c.syn_arrival);
    after(c.established_at);
  }
  return next;
}

Result<std::unique_ptr<Socket>> SimNetwork::connect(const std::string& address,
                                                    const std::string& port) {
  Link& l = link(address);
  const uint64_t now = clock_.now();
  auto c = std::make_shared<Conn>();
  c->id = next_conn_id_++;
  c->link = &l;
  c->names[0] = "sim-host:" + std::to_string(next_port_++);
  c->names[1] = address + ":" + port;
  for (Direction& d : c->dir) {
    d.ring.reset(new uint8_t[l.cfg.window_bytes]);
    d.ring_size = l.cfg.window_bytes;
  }
  const uint64_t latency = l.cfg.latency_ns + (now < l.extra_until ? l.extra_latency_ns : 0);
  c->syn_arrival = std::max(now, l.partition_until) + latency;
  c->established_at = c->syn_arrival + latency;
  auto it = listeners_.find(address + ":" + port);
  if (it == listeners_.end()) {
    c->refused = ECONNREFUSED;  // a RST answers the SYN
    c->open[1] = false;
    ++stats_.refused;
  } else {
    c->listener = it->second;
    it->second->add(c);
  }
  ++stats_.connections;
  record(0xc044, c->id, c->syn_arrival, c->refused);
  conns_.push_back(c);
  return std::unique_ptr<Socket>(std::make_unique<SimSocket>(*this, std::move(c), 0));
}

Result<std::unique_ptr<Listener>> SimNetwork::listen(const std::string&, const std::string& address,
                                                     const std::string& port) {
  std::string p = port.empty() ? "4420" : port;
  if (p == "0") p = std::to_string(next_port_++);
  const std::string key = address + ":" + p;
  if (listeners_.count(key)) return make_error(EADDRINUSE, key + ": address in use");
  auto l = std::make_unique<SimListener>(*this, key, static_cast<uint16_t>(std::stoul(p)));
  listeners_[key] = l.get();
  link(address);
  return std::unique_ptr<Listener>(std::move(l));
}

std::unique_ptr<ReadinessGroup> SimNetwork::readiness_group() {
  return std::make_unique<SimGroup>();
}

// ----------------------------------------------------------------------- faults ---

uint32_t SimNetwork::drop(const std::string& address) {
  const uint64_t now = clock_.now();
  uint32_t n = 0;
  for (const auto& cp : conns_) {
    Conn& c = *cp;
    if (!address.empty() && c.link->address != address) continue;
    if (c.reset_at <= now || c.refused) continue;
    c.reset_at = now;
    c.reset_error = ECONNRESET;
    for (Direction& d : c.dir) d.segments.clear();
    ++n;
  }
  stats_.resets += n;
  record(0xd709, name_hash(address), now, n);
  return n;
}

void SimNetwork::partition(const std::string& address, uint64_t duration_ns) {
  const uint64_t now = clock_.now();
  if (!address.empty()) link(address);
  const uint64_t until = now + duration_ns;
  for (auto& [a, l] : links_) {
    if (!address.empty() && a != address) continue;
    l->partition_until = std::max(l->partition_until, until);
  }
  for (const auto& cp : conns_) {
    Conn& c = *cp;
    Link& l = *c.link;
    if (!address.empty() && l.address != address) continue;
    const uint64_t heal = l.partition_until + l.cfg.latency_ns;
    for (Direction& d : c.dir) {
      // What is in flight waits for the partition's end; order is kept.
      for (Segment& s : d.segments) s.arrival = std::max(s.arrival, heal);
      if (!d.segments.empty()) d.last_arrival = std::max(d.last_arrival, heal);
      if (d.fin && d.fin_at > now) d.fin_at = std::max(d.fin_at, heal);
    }
    if (c.syn_arrival > now) {
      c.syn_arrival = std::max(c.syn_arrival, heal);
      c.established_at = c.syn_arrival + l.cfg.latency_ns;
    }
    if (duration_ns >= l.cfg.user_timeout_ns && c.reset_at > now && !c.refused) {
      c.reset_at = std::min(c.reset_at, now + l.cfg.user_timeout_ns);
      c.reset_error = ETIMEDOUT;
      ++stats_.resets;
    }
  }
  ++stats_.partitions;
  record(0x9a27, name_hash(address), now, duration_ns);
}

void SimNetwork::add_latency(const std::string& address, uint64_t extra_ns, uint64_t duration_ns) {
  const uint64_t now = clock_.now();
  if (!address.empty()) link(address);
  for (auto& [a, l] : links_) {
    if (!address.empty() && a != address) continue;
    l->extra_latency_ns = extra_ns;
    l->extra_until = now + duration_ns;
  }
  record(0x1a7e, name_hash(address), extra_ns, duration_ns);
}

void SimNetwork::corrupt(const std::string& address, double rate, uint64_t duration_ns) {
  const uint64_t now = clock_.now();
  if (!address.empty()) link(address);
  for (auto& [a, l] : links_) {
    if (!address.empty() && a != address) continue;
    l->corrupt_rate = rate;
    l->corrupt_until = now + duration_ns;
  }
  record(0xc022, name_hash(address), static_cast<uint64_t>(rate * 1e9), duration_ns);
}

}  // namespace pollux::fabric::net
