#include "fabric/net/fault_network.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace pollux::fabric::net {
namespace {

constexpr uint64_t kNever = UINT64_MAX;
constexpr uint32_t kChunks = 1024;  // release instants per end; beyond: merged into the last

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a counter-based draw
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {  // FNV-1a: the same on every build
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

void sleep_ns(uint64_t ns) {
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000),
                    static_cast<long>(ns % 1'000'000'000)};
  ::nanosleep(&ts, nullptr);
}

}  // namespace

struct FaultNetwork::Link {
  std::string address;
  uint32_t index = 0;
  uint32_t ordinal[2] = {0, 0};  // sockets made so far per side (0: connects, 1: accepts); mu_
  std::atomic<uint64_t> partition_until{0}, latency_until{0}, extra_ns{0};
  std::atomic<uint64_t> corrupt_until{0}, corrupt_threshold{0};  // draw < threshold: corrupt

  bool partitioned(uint64_t now) const {
    return now < partition_until.load(std::memory_order_relaxed);
  }
  bool quiet(uint64_t now) const {
    return now >= partition_until.load(std::memory_order_relaxed) &&
           now >= latency_until.load(std::memory_order_relaxed) &&
           now >= corrupt_until.load(std::memory_order_relaxed);
  }
};

// ------------------------------------------------------------------------ sockets ---

class FaultNetwork::FaultSocket final : public Socket {
 public:
  FaultSocket(FaultNetwork& net, Link& l, std::unique_ptr<Socket> inner, uint64_t key,
              std::string port)
      : net_(net), link_(l), inner_(std::move(inner)), key_(key), port_(std::move(port)) {
    deferred_ = inner_ == nullptr;
  }
  ~FaultSocket() override;

  // ---- the I/O path: the inner socket's call while nothing needs attention
  ssize_t send(const iovec* iov, int iovcnt) override {
    if (attention_.load(std::memory_order_relaxed) == 0) {
      const ssize_t r = inner_->send(iov, iovcnt);
      if (r > 0) tx_ += static_cast<uint64_t>(r);
      return r;
    }
    return send_slow(iov, iovcnt);
  }
  ssize_t send_more(const iovec* iov, int iovcnt) override {
    if (attention_.load(std::memory_order_relaxed) == 0) {
      const ssize_t r = inner_->send_more(iov, iovcnt);
      if (r > 0) tx_ += static_cast<uint64_t>(r);
      return r;
    }
    return send_slow(iov, iovcnt);  // held or faulted: nothing to cork
  }
  void push() override {
    if (attention_.load(std::memory_order_relaxed) == 0) return inner_->push();
    uint32_t seen;
    const uint64_t now = enter(&seen);
    if (error_ == 0 && inner_) inner_->push();
    settle(seen, now);
  }
  ssize_t recv(const iovec* iov, int iovcnt) override {
    if (attention_.load(std::memory_order_relaxed) == 0) return inner_->recv(iov, iovcnt);
    uint32_t seen;
    const uint64_t now = enter(&seen);
    if (error_ != 0) return -error_;
    if (deferred_) return kAgain;
    const ssize_t r = inner_->recv(iov, iovcnt);
    settle(seen, now);
    return r;
  }

  // ---- set-up paths
  void shutdown_write() override {
    if (error_ != 0) return;
    if (deferred_ || count_ > 0) {
      shutdown_pending_ = true;  // after what is held
      return;
    }
    inner_->shutdown_write();
  }
  void reset_on_close() override {
    if (inner_) inner_->reset_on_close();
  }
  bool connected(int* error) override {
    if (attention_.load(std::memory_order_relaxed) == 0) return inner_->connected(error);
    uint32_t seen;
    const uint64_t now = enter(&seen);
    if (error_ != 0) {
      *error = error_;
      return false;
    }
    if (deferred_) return false;
    const bool up = inner_->connected(error);
    settle(seen, now);
    return up;
  }
  void wait(bool for_write, uint64_t deadline_ns) override {
    uint32_t seen;
    const uint64_t now = enter(&seen);
    settle(seen, now);
    if (net_.wait_hook_) return net_.wait_hook_();
    if (deadline_ns <= now) return;
    const uint64_t left = deadline_ns - now;
    if (error_ == 0 && inner_ && count_ == 0 && attention_.load(std::memory_order_relaxed) == 0) {
      inner_->wait(for_write, net_.inner_.now_ns() + left);  // the inner network's time base
      return;
    }
    sleep_ns(std::min<uint64_t>(left, 100'000));  // something held: look again soon
  }
  std::string peer() const override {
    return inner_ ? inner_->peer() : link_.address + ":" + port_;
  }

  // ---- the fault side (the owner thread)
  // Held bytes that are due leave, a due reset happens, a deferred connect starts.
  void service(uint64_t now);
  // service(), and back to the fast path if nothing is left to look after (a group's scan).
  void tend(uint64_t now) {
    const uint32_t seen = attention_.load(std::memory_order_acquire);
    service(now);
    settle(seen, now);
  }
  bool failed() const { return error_ != 0; }
  bool needs_attention() const { return attention_.load(std::memory_order_relaxed) != 0; }
  Link& link() { return link_; }
  Socket* inner() { return inner_.get(); }

  // ---- the injector's side (any thread, FaultNetwork::mu_ held)
  // Reset this end at `at` with `err` (the earliest of several wins). true: it was not due.
  bool schedule_reset(uint64_t at, int err) {
    if (reset_at_.load(std::memory_order_relaxed) <= at) return false;
    reset_err_.store(err, std::memory_order_relaxed);
    reset_at_.store(at, std::memory_order_release);
    return true;
  }
  void touch() { attention_.fetch_add(1, std::memory_order_release); }

  FaultGroup* group_ = nullptr;  // the readiness group it is in (owner thread)
  void* ctx_ = nullptr;          // its context there

 private:
  struct Chunk {
    uint64_t end;      // stream offset just past it
    uint64_t release;  // may leave from then on
  };
  uint64_t enter(uint32_t* seen) {
    *seen = attention_.load(std::memory_order_acquire);
    const uint64_t now = net_.now_ns();
    service(now);
    return now;
  }
  // Back to the fast path when nothing is held or pending and the link has no fault left
  // (unless a fault was injected since `seen`).
  void settle(uint32_t seen, uint64_t now) {
    if (seen == 0 || error_ != 0 || deferred_ || count_ > 0 ||
        reset_at_.load(std::memory_order_relaxed) != kNever || !link_.quiet(now)) {
      return;
    }
    attention_.compare_exchange_strong(seen, 0, std::memory_order_acq_rel);
  }
  ssize_t send_slow(const iovec* iov, int iovcnt);
  ssize_t enqueue(const iovec* iov, int iovcnt, uint64_t now);
  void corrupt_range(uint64_t from, uint64_t to);
  void flush(uint64_t now);
  void fail(int err);
  void start_connect();

  FaultNetwork& net_;
  Link& link_;
  std::unique_ptr<Socket> inner_;  // nullptr: a deferred connect, or reset
  const uint64_t key_;             // the connection's identity in the draws
  const std::string port_;         // a deferred connect's port
  // Nonzero: look before the I/O (a fault was injected on the link, or something is held).
  std::atomic<uint32_t> attention_{1};
  std::atomic<uint64_t> reset_at_{kNever};
  std::atomic<int> reset_err_{0};
  int error_ = 0;  // reset (or broken while flushing): every call returns -error_
  bool deferred_ = false;
  bool shutdown_pending_ = false;
  uint64_t tx_ = 0;  // stream offset: bytes taken from the caller
  // Held bytes [q_head_, tx_) in ring_ (allocated on first use), their release instants.
  std::vector<uint8_t> ring_;
  std::vector<Chunk> chunks_;
  uint32_t chead_ = 0, count_ = 0;
  uint64_t q_head_ = 0, last_release_ = 0;
};

class FaultNetwork::FaultGroup final : public ReadinessGroup {
 public:
  FaultGroup(FaultNetwork& net, std::unique_ptr<ReadinessGroup> inner)
      : net_(net), inner_(std::move(inner)) {}
  ~FaultGroup() override {
    for (FaultSocket* m : members_) m->group_ = nullptr;
  }
  void add(Socket& s, void* ctx) override {
    auto& f = static_cast<FaultSocket&>(s);
    f.group_ = this;
    f.ctx_ = ctx;
    if (inner_of(f) != nullptr) inner_->add(*inner_of(f), &f);
    members_.push_back(&f);
    unsettled_ = true;  // look at it at the next poll
  }
  void remove(Socket& s) override {
    auto& f = static_cast<FaultSocket&>(s);
    if (inner_of(f) != nullptr) inner_->remove(*inner_of(f));
    std::erase(members_, &f);
    f.group_ = nullptr;
  }
  int poll(void** ready, int max) override {
    const int n0 = inner_->poll(ready, max);
    for (int i = 0; i < n0; ++i) ready[i] = static_cast<FaultSocket*>(ready[i])->ctx_;
    const uint64_t gen = net_.gen_.load(std::memory_order_relaxed);
    if (gen == seen_gen_ && !unsettled_) return n0;
    // A fault was injected, or a member holds bytes or was reset: service every member that
    // needs it; a reset one reads as readable (its recv says so), as epoll reports an error.
    seen_gen_ = gen;
    unsettled_ = false;
    const uint64_t now = net_.now_ns();
    int n = n0;
    for (FaultSocket* m : members_) {
      if (m->needs_attention()) m->tend(now);
      if (m->failed()) {
        if (n < max && std::find(ready, ready + n0, m->ctx_) == ready + n0) ready[n++] = m->ctx_;
      }
      unsettled_ = unsettled_ || m->needs_attention();
    }
    return n;
  }
  void inner_remove(Socket& inner) { inner_->remove(inner); }
  void wake() { unsettled_ = true; }

 private:
  static Socket* inner_of(FaultSocket& f);
  FaultNetwork& net_;
  std::unique_ptr<ReadinessGroup> inner_;
  std::vector<FaultSocket*> members_;
  uint64_t seen_gen_ = 0;
  bool unsettled_ = false;
};

class FaultNetwork::FaultListener final : public Listener {
 public:
  FaultListener(FaultNetwork& net, Link& l, std::unique_ptr<Listener> inner)
      : net_(net), link_(l), inner_(std::move(inner)) {}
  // Nothing is accepted during a partition: a SYN that got through before it waits in the
  // kernel's backlog, as if its handshake had not finished.
  std::unique_ptr<Socket> accept() override {
    if (link_.partition_until.load(std::memory_order_relaxed) != 0 &&
        link_.partitioned(net_.now_ns()))
      return nullptr;
    auto s = inner_->accept();
    if (!s) return nullptr;
    return net_.wrap(std::move(s), link_, 1, "");
  }
  uint16_t port() const override { return inner_->port(); }

 private:
  FaultNetwork& net_;
  Link& link_;
  std::unique_ptr<Listener> inner_;
};

Socket* FaultNetwork::FaultGroup::inner_of(FaultSocket& f) {
  return f.inner();
}

FaultNetwork::FaultSocket::~FaultSocket() {
  if (group_ != nullptr) group_->remove(*this);
  net_.forget(this);
}

void FaultNetwork::FaultSocket::service(uint64_t now) {
  if (error_ != 0) return;
  if (reset_at_.load(std::memory_order_acquire) <= now) {
    fail(reset_err_.load(std::memory_order_relaxed));
    return;
  }
  if (deferred_) {
    if (link_.partitioned(now)) return;
    start_connect();
    if (error_ != 0 || deferred_) return;
  }
  if (count_ > 0) flush(now);
}

void FaultNetwork::FaultSocket::start_connect() {
  auto s = net_.inner_.connect(link_.address, port_);
  if (!s) {
    error_ = -s.error().code;
    if (group_ != nullptr) group_->wake();
    return;
  }
  inner_ = std::move(s).value();
  deferred_ = false;
  if (shutdown_pending_ && count_ == 0) {
    shutdown_pending_ = false;
    inner_->shutdown_write();
  }
}

// The end is reset: its close sends a RST (a peer outside sees ECONNRESET), what it held is
// gone, and every later call returns the error.
void FaultNetwork::FaultSocket::fail(int err) {
  error_ = err;
  if (inner_) {
    if (group_ != nullptr) group_->inner_remove(*inner_);
    inner_->reset_on_close();
    inner_.reset();
  }
  deferred_ = false;
  count_ = 0;
  if (group_ != nullptr) group_->wake();
}

ssize_t FaultNetwork::FaultSocket::send_slow(const iovec* iov, int iovcnt) {
  uint32_t seen;
  const uint64_t now = enter(&seen);
  if (error_ != 0) return -error_;
  if (deferred_) return kAgain;
  const bool hold = count_ > 0 || link_.partitioned(now) ||
                    now < link_.latency_until.load(std::memory_order_relaxed) ||
                    now < link_.corrupt_until.load(std::memory_order_relaxed);
  ssize_t r;
  if (hold) {
    r = enqueue(iov, iovcnt, now);
    flush(now);
    if (error_ == 0 && count_ > 0 && group_ != nullptr) group_->wake();
  } else {
    r = inner_->send(iov, iovcnt);
    if (r > 0) tx_ += static_cast<uint64_t>(r);
  }
  settle(seen, now);
  return r;
}

ssize_t FaultNetwork::FaultSocket::enqueue(const iovec* iov, int iovcnt, uint64_t now) {
  if (ring_.empty()) {  // the first held byte of this end: its hold buffer
    ring_.assign(net_.config_.hold_bytes, 0);
    chunks_.resize(kChunks);
  }
  if (count_ == 0) q_head_ = tx_;
  const uint64_t cap = ring_.size();
  uint64_t room = cap - (tx_ - q_head_);
  const uint64_t from = tx_;
  for (int i = 0; i < iovcnt && room > 0; ++i) {
    const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
    uint64_t n = std::min<uint64_t>(iov[i].iov_len, room);
    room -= n;
    while (n > 0) {
      const uint64_t at = tx_ % cap;
      const uint64_t run = std::min(n, cap - at);
      std::memcpy(&ring_[at], p, run);
      tx_ += run;
      p += run;
      n -= run;
    }
  }
  if (tx_ == from) return kAgain;  // the hold buffer is full: as a full window
  if (now < link_.corrupt_until.load(std::memory_order_relaxed)) corrupt_range(from, tx_);
  uint64_t release = now;
  if (now < link_.latency_until.load(std::memory_order_relaxed))
    release += link_.extra_ns.load(std::memory_order_relaxed);
  if (link_.partitioned(now))
    release = std::max(release, link_.partition_until.load(std::memory_order_relaxed));
  release = std::max(release, last_release_);  // in order
  last_release_ = release;
  const uint32_t last = (chead_ + count_ + kChunks - 1) % kChunks;
  if (count_ > 0 && (chunks_[last].release == release || count_ == kChunks)) {
    chunks_[last].end = tx_;
    chunks_[last].release = release;
  } else {
    chunks_[(chead_ + count_) % kChunks] = Chunk{tx_, release};
    ++count_;
  }
  net_.stats_.held_bytes.fetch_add(tx_ - from, std::memory_order_relaxed);
  return static_cast<ssize_t>(tx_ - from);
}

// Segment k of this end's stream is corrupted when its draw is below the threshold; the byte
// and the mask come from the same draw. Only bytes sent now (in the window) are touched.
void FaultNetwork::FaultSocket::corrupt_range(uint64_t from, uint64_t to) {
  const uint64_t threshold = link_.corrupt_threshold.load(std::memory_order_relaxed);
  const uint64_t seg = std::max<uint32_t>(net_.config_.segment_bytes, 1);
  const uint64_t cap = ring_.size();
  for (uint64_t k = from / seg; k <= (to - 1) / seg; ++k) {
    const uint64_t h = mix(net_.seed_ ^ mix(key_ ^ mix(k)));
    if (h >= threshold) continue;
    const uint64_t pos = k * seg + mix(h) % seg;
    if (pos < from || pos >= to) continue;
    const auto mask = static_cast<uint8_t>(1 + mix(h + 1) % 255);
    ring_[pos % cap] ^= mask;
    net_.stats_.corrupted.fetch_add(1, std::memory_order_relaxed);
    net_.corrupt_hash_.fetch_xor(mix(key_ ^ mix(pos ^ (uint64_t{mask} << 56))),
                                 std::memory_order_relaxed);
  }
}

void FaultNetwork::FaultSocket::flush(uint64_t now) {
  const uint64_t cap = ring_.size();
  while (count_ > 0 && error_ == 0) {
    const Chunk& c = chunks_[chead_];
    if (c.release > now || link_.partitioned(now)) return;
    const uint64_t len = c.end - q_head_;
    const uint64_t at = q_head_ % cap;
    const uint64_t first = std::min(len, cap - at);
    iovec v[2] = {{&ring_[at], first}, {ring_.data(), len - first}};
    const ssize_t r = inner_->send(v, len > first ? 2 : 1);
    if (r < 0) {  // the connection broke under what was held
      error_ = static_cast<int>(-r);
      if (group_ != nullptr) group_->wake();
      return;
    }
    if (r == kAgain) return;
    q_head_ += static_cast<uint64_t>(r);
    if (q_head_ == c.end) {
      chead_ = (chead_ + 1) % kChunks;
      --count_;
    }
    if (static_cast<uint64_t>(r) < len) return;  // the kernel's buffer is full
  }
  if (count_ == 0 && shutdown_pending_ && inner_) {
    shutdown_pending_ = false;
    inner_->shutdown_write();
  }
}

// ------------------------------------------------------------------------ network ---

FaultNetwork::FaultNetwork(Network& inner, uint64_t seed, const env::Clock* clock,
                           FaultConfig config)
    : inner_(inner), seed_(mix(seed)), clock_(clock), config_(config) {
  record(0x5eed, seed, 0, 0);
}

FaultNetwork::~FaultNetwork() = default;

uint64_t FaultNetwork::now_ns() const {
  return clock_ != nullptr ? clock_->now() : inner_.now_ns();
}

void FaultNetwork::record(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  for (uint64_t v : {a, b, c, d}) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
}

uint64_t FaultNetwork::fault_hash() const {
  std::lock_guard<std::mutex> g(mu_);
  return hash_ ^ mix(corrupt_hash_.load(std::memory_order_relaxed));
}

std::size_t FaultNetwork::live_sockets() const {
  std::lock_guard<std::mutex> g(mu_);
  return sockets_.size();
}

FaultNetwork::Link& FaultNetwork::link(const std::string& address) {
  auto& l = links_[address];
  if (!l) {
    l = std::make_unique<Link>();
    l->address = address;
    l->index = static_cast<uint32_t>(links_.size());
  }
  return *l;
}

std::unique_ptr<Socket> FaultNetwork::wrap(std::unique_ptr<Socket> inner, Link& l, int side,
                                           const std::string& port) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t ordinal = l.ordinal[side]++;
  // The connection's identity: the same link, side and ordinal in a run with the same seed
  // draws the same corruptions.
  const uint64_t key = mix(name_hash(l.address) ^ mix((ordinal << 1) | uint64_t(side)));
  auto s = std::make_unique<FaultSocket>(*this, l, std::move(inner), key, port);
  sockets_.push_back(s.get());
  stats_.connections.fetch_add(1, std::memory_order_relaxed);
  return s;
}

void FaultNetwork::forget(FaultSocket* s) {
  std::lock_guard<std::mutex> g(mu_);
  std::erase(sockets_, s);
}

template <class F>
void FaultNetwork::for_link(const std::string& address, F&& f) {
  if (!address.empty()) link(address);
  for (auto& [a, l] : links_)
    if (address.empty() || a == address) f(*l);
}

Result<std::unique_ptr<Socket>> FaultNetwork::connect(const std::string& address,
                                                      const std::string& port) {
  Link* l;
  {
    std::lock_guard<std::mutex> g(mu_);
    l = &link(address);
  }
  if (l->partitioned(now_ns())) {  // the SYN goes nowhere until the partition ends
    stats_.deferred_connects.fetch_add(1, std::memory_order_relaxed);
    return wrap(nullptr, *l, 0, port);
  }
  auto s = inner_.connect(address, port);
  if (!s) return s.error();
  return wrap(std::move(s).value(), *l, 0, port);
}

Result<std::unique_ptr<Listener>> FaultNetwork::listen(const std::string& adrfam,
                                                       const std::string& address,
                                                       const std::string& port) {
  auto l = inner_.listen(adrfam, address, port);
  if (!l) return l.error();
  Link* link_of;
  {
    std::lock_guard<std::mutex> g(mu_);
    link_of = &link(address);
  }
  return std::unique_ptr<Listener>(
      std::make_unique<FaultListener>(*this, *link_of, std::move(l).value()));
}

std::unique_ptr<ReadinessGroup> FaultNetwork::readiness_group() {
  return std::make_unique<FaultGroup>(*this, inner_.readiness_group());
}

// ------------------------------------------------------------------------- faults ---

uint32_t FaultNetwork::drop(const std::string& address) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t now = now_ns();
  uint32_t n = 0;
  for (FaultSocket* s : sockets_) {
    if (!address.empty() && s->link().address != address) continue;
    if (s->schedule_reset(now, ECONNRESET)) ++n;
    s->touch();
  }
  stats_.resets.fetch_add(n, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
  record(0xd709, name_hash(address), 0, n);
  return n;
}

void FaultNetwork::partition(const std::string& address, uint64_t duration_ns) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t now = now_ns();
  for_link(address, [&](Link& l) {
    if (now + duration_ns > l.partition_until.load(std::memory_order_relaxed))
      l.partition_until.store(now + duration_ns, std::memory_order_relaxed);
  });
  const bool times_out = duration_ns >= config_.user_timeout_ns;
  for (FaultSocket* s : sockets_) {
    if (!address.empty() && s->link().address != address) continue;
    if (times_out && s->schedule_reset(now + config_.user_timeout_ns, ETIMEDOUT))
      stats_.timeouts.fetch_add(1, std::memory_order_relaxed);
    s->touch();
  }
  stats_.partitions.fetch_add(1, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
  record(0x9a27, name_hash(address), duration_ns, 0);
}

void FaultNetwork::add_latency(const std::string& address, uint64_t extra_ns,
                               uint64_t duration_ns) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t now = now_ns();
  for_link(address, [&](Link& l) {
    l.extra_ns.store(extra_ns, std::memory_order_relaxed);
    l.latency_until.store(now + duration_ns, std::memory_order_relaxed);
  });
  for (FaultSocket* s : sockets_)
    if (address.empty() || s->link().address == address) s->touch();
  gen_.fetch_add(1, std::memory_order_release);
  record(0x1a7e, name_hash(address), duration_ns, extra_ns);
}

void FaultNetwork::corrupt(const std::string& address, double rate, uint64_t duration_ns) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t now = now_ns();
  const uint64_t threshold = rate >= 1.0 ? UINT64_MAX
                             : rate <= 0  ? 0
                                          : static_cast<uint64_t>(rate * 0x1.0p64);
  for_link(address, [&](Link& l) {
    l.corrupt_threshold.store(threshold, std::memory_order_relaxed);
    l.corrupt_until.store(now + duration_ns, std::memory_order_relaxed);
  });
  for (FaultSocket* s : sockets_)
    if (address.empty() || s->link().address == address) s->touch();
  gen_.fetch_add(1, std::memory_order_release);
  record(0xc022, name_hash(address), duration_ns, threshold);
}

}  // namespace pollux::fabric::net
