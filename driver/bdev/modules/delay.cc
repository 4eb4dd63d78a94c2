#include "driver/bdev/modules/delay.h"

#include <algorithm>
#include <cmath>

namespace pollux::bdev {

namespace {
constexpr double kZ99 = 2.326347874;  // Φ⁻¹(0.99)
constexpr double kTwoPointHigh = 0.02;
}  // namespace

Result<LatencyModel> LatencyModel::make(double avg, double p99) {
  LatencyModel m;
  m.avg_ = avg;
  m.p99_ = p99;
  if (!(avg >= 0) || !(p99 >= 0) || !std::isfinite(avg) || !std::isfinite(p99))
    return make_error(EINVAL, "latency must be a finite number >= 0");
  if (avg == 0) {
    if (p99 != 0) return make_error(EINVAL, "p99 latency given without an average");
    return m;
  }
  if (p99 == 0 || p99 == avg) {
    m.kind_ = Kind::kConstant;
    m.p99_ = avg;
    return m;
  }
  if (p99 < avg) return make_error(EINVAL, "p99 latency below the average");
  const double r = std::log(p99 / avg);
  if (r <= kZ99 * kZ99 / 2) {
    m.kind_ = Kind::kLognormal;
    m.sigma_ = kZ99 - std::sqrt(kZ99 * kZ99 - 2 * r);
    m.mu_ = std::log(avg) - m.sigma_ * m.sigma_ / 2;
    return m;
  }
  if (p99 > avg / kTwoPointHigh)
    return make_error(EINVAL, "p99 latency more than 50 times the average");
  m.kind_ = Kind::kTwoPoint;
  m.high_ = p99;
  m.low_ = (avg - kTwoPointHigh * p99) / (1 - kTwoPointHigh);
  return m;
}

double LatencyModel::draw_us(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kNone: return 0;
    case Kind::kConstant: return avg_;
    case Kind::kLognormal: return std::lognormal_distribution<double>(mu_, sigma_)(rng);
    case Kind::kTwoPoint:
      return std::uniform_real_distribution<double>(0, 1)(rng) < kTwoPointHigh ? high_ : low_;
  }
  return 0;
}

namespace {

struct DelayChannel;

struct DelayIo {  // in the BdevIo's module context
  uint64_t deadline;
  DelayChannel* dch;
  IoStatus status;
  uint16_t nvme_status;
  uint32_t nvme_cdw0;
};
DelayIo& ctx_of(BdevIo& io) { return *static_cast<DelayIo*>(io.module_ctx()); }

struct DelayChannel {
  class DelayBdev* owner = nullptr;
  std::mt19937_64 rng;
  std::vector<BdevIo*> heap;  // min-heap on deadline
  event::Poller* poller = nullptr;
};

bool later(BdevIo* a, BdevIo* b) { return ctx_of(*a).deadline > ctx_of(*b).deadline; }

void release(BdevIo& io) {
  const DelayIo& c = ctx_of(io);
  VirtualBdev::complete_with(io, c.status, c.nvme_status, c.nvme_cdw0);
}

class DelayBdev final : public VirtualBdev {
 public:
  DelayBdev(VbdevModule& m, std::string name, LatencyModel rd, LatencyModel wr, uint64_t seed)
      : VirtualBdev(m, std::move(name)), read_(rd), write_(wr), seed_(seed) {}

  DelayStats stats() const {
    return {delayed_.load(std::memory_order_relaxed), held_.load(std::memory_order_relaxed)};
  }

 protected:
  std::size_t io_ctx_size() const override { return sizeof(DelayIo); }

  int channel_create(VbdevChannel& ch) override {
    auto* d = new DelayChannel;
    d->owner = this;
    d->rng.seed(seed_ + next_channel_.fetch_add(1, std::memory_order_relaxed));
    d->heap.reserve(1024);
    d->poller = event::Thread::current()->register_poller(&poll, d, 0, "delay_" + name());
    ch.priv = d;
    return 0;
  }
  void channel_destroy(VbdevChannel& ch) override {
    auto* d = static_cast<DelayChannel*>(ch.priv);
    event::Thread::current()->unregister_poller(d->poller);
    delete d;
  }
  void channel_quiesce(VbdevChannel& ch) override {
    auto* d = static_cast<DelayChannel*>(ch.priv);
    std::vector<BdevIo*> all;
    all.swap(d->heap);  // completions may add more: they are released at once (removing())
    std::sort(all.begin(), all.end(), [](BdevIo* a, BdevIo* b) { return later(b, a); });
    held_.fetch_sub(all.size(), std::memory_order_relaxed);
    for (BdevIo* io : all) release(*io);
  }

  void submit(BdevIo& io, VbdevChannel& ch) override {
    auto* d = static_cast<DelayChannel*>(ch.priv);
    const LatencyModel* m = nullptr;
    switch (io.type()) {
      case IoType::kRead:
      case IoType::kCompare: m = &read_; break;
      case IoType::kWrite:
      case IoType::kWriteZeroes:
      case IoType::kUnmap:
      case IoType::kCompareAndWrite: m = &write_; break;
      default: break;
    }
    if (m == nullptr || m->kind() == LatencyModel::Kind::kNone) {
      forward(io, ch, 0, &complete_from_base, &io);
      return;
    }
    const env::Clock& clock = mgr().framework().clock();
    const double ticks = m->draw_us(d->rng) * static_cast<double>(clock.ticks_per_second()) / 1e6;
    DelayIo& c = ctx_of(io);
    c.deadline = clock.now() + static_cast<uint64_t>(ticks);
    c.dch = d;
    forward(io, ch, 0, &base_done, &io);
  }

 private:
  static void base_done(BdevIo& base_io, bool, void* arg) {
    BdevIo& io = *static_cast<BdevIo*>(arg);
    DelayIo& c = ctx_of(io);
    DelayBdev* self = c.dch->owner;
    c.status = base_io.status();
    c.nvme_status = base_io.nvme_status();
    c.nvme_cdw0 = base_io.nvme_cdw0();
    if (self->removing() || self->mgr().framework().clock().now() >= c.deadline) {
      complete_like(io, base_io);
      return;
    }
    self->delayed_.fetch_add(1, std::memory_order_relaxed);
    self->held_.fetch_add(1, std::memory_order_relaxed);
    auto& h = c.dch->heap;
    h.push_back(&io);  // grows past the reserve only under a deep queue (set-up-like cost)
    std::push_heap(h.begin(), h.end(), later);
  }

  static event::PollStatus poll(void* arg) {
    auto* d = static_cast<DelayChannel*>(arg);
    if (d->heap.empty()) return event::PollStatus::kIdle;
    const uint64_t now = d->owner->mgr().framework().clock().now();
    int n = 0;
    while (!d->heap.empty() && ctx_of(*d->heap.front()).deadline <= now) {
      std::pop_heap(d->heap.begin(), d->heap.end(), later);
      BdevIo* io = d->heap.back();
      d->heap.pop_back();
      d->owner->held_.fetch_sub(1, std::memory_order_relaxed);
      ++n;
      release(*io);
    }
    return n ? event::PollStatus::kBusy : event::PollStatus::kIdle;
  }

  LatencyModel read_, write_;
  uint64_t seed_;
  std::atomic<uint64_t> next_channel_{0};
  std::atomic<uint64_t> delayed_{0}, held_{0};
};

}  // namespace

Result<bool> DelayModule::create(const DelayOptions& o) {
  if (o.name.empty() || o.base_name.empty())
    return make_error(EINVAL, "delay: name and base bdev name are required");
  auto rd = LatencyModel::make(o.avg_read_us, o.p99_read_us);
  if (!rd) return make_error(EINVAL, "delay " + o.name + ": read latency: " + rd.error().message);
  auto wr = LatencyModel::make(o.avg_write_us, o.p99_write_us);
  if (!wr) return make_error(EINVAL, "delay " + o.name + ": write latency: " + wr.error().message);
  const std::string name = o.name;
  const LatencyModel r = rd.value(), w = wr.value();
  const uint64_t seed = o.seed;
  return add_config(name, o.base_name, [this, name, r, w, seed](VbdevBase& base) -> Result<int> {
    auto res = register_vbdev(std::make_unique<DelayBdev>(*this, name, r, w, seed), base,
                              inherit_properties(base.bdev(), name, "delay"));
    if (!res) return res.error();
    return 1;
  });
}

int DelayModule::remove(const std::string& name, event::MsgFn done, void* ctx) {
  return remove_config(name, done, ctx);
}

Result<DelayStats> DelayModule::stats(const std::string& name) {
  auto* v = static_cast<DelayBdev*>(find_vbdev(name));
  if (v == nullptr) return make_error(ENODEV, "delay: no bdev named '" + name + "'");
  return v->stats();
}

}  // namespace pollux::bdev
