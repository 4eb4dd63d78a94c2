#include "driver/bdev/modules/error.h"

#include <algorithm>

namespace pollux::bdev {
namespace {

// Held I/Os are chained through their module context.
struct HeldLink {
  BdevIo* next;
};
BdevIo*& next_of(BdevIo& io) { return static_cast<HeldLink*>(io.module_ctx())->next; }

struct ErrorChannel {
  BdevIo* head = nullptr;
  BdevIo* tail = nullptr;
  void push(BdevIo& io) {
    next_of(io) = nullptr;
    if (tail) next_of(*tail) = &io; else head = &io;
    tail = &io;
  }
};

constexpr uint64_t kNoEnd = std::numeric_limits<uint64_t>::max();

class ErrorBdev final : public VirtualBdev {
 public:
  ErrorBdev(VbdevModule& m, std::string name) : VirtualBdev(m, std::move(name)) {}

  void add(const ErrorInjection& inj) {
    std::lock_guard lock(mu_);
    inj_.push_back(inj);
    armed_.store(static_cast<int>(inj_.size()), std::memory_order_release);
  }
  void drop(std::optional<IoType> type) {
    std::lock_guard lock(mu_);
    std::erase_if(inj_, [&](const ErrorInjection& i) { return !type || i.type == type; });
    armed_.store(static_cast<int>(inj_.size()), std::memory_order_release);
  }
  ErrorStats stats() {
    ErrorStats s;
    s.failed = failed_.load(std::memory_order_relaxed);
    s.held = held_.load(std::memory_order_relaxed);
    s.aborted = aborted_.load(std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    s.injections = inj_.size();
    return s;
  }

  // Aborts the held I/Os (of `type`, or all) on every channel; done(ctx) on the caller after.
  void abort_everywhere(std::optional<IoType> type, event::MsgFn done, void* ctx) {
    struct Walk {
      std::optional<IoType> type;
      event::MsgFn done;
      void* ctx;
    };
    mgr().framework().for_each_channel(
        this,
        [](event::ChannelIter& it) {
          auto* ch = static_cast<VbdevChannel*>(it.channel()->ctx());
          static_cast<ErrorBdev*>(ch->vbdev)->abort_held(*ch, static_cast<Walk*>(it.ctx())->type);
          it.next(0);
        },
        new Walk{type, done, ctx},
        [](void* arg, int) {
          auto* w = static_cast<Walk*>(arg);
          if (w->done) w->done(w->ctx);
          delete w;
        });
  }

 protected:
  std::size_t io_ctx_size() const override { return sizeof(HeldLink); }
  int channel_create(VbdevChannel& ch) override {
    ch.priv = new ErrorChannel;
    return 0;
  }
  void channel_destroy(VbdevChannel& ch) override { delete static_cast<ErrorChannel*>(ch.priv); }
  void channel_quiesce(VbdevChannel& ch) override { abort_held(ch, std::nullopt); }

  void submit(BdevIo& io, VbdevChannel& ch) override {
    ErrorInjection hit;
    if (armed_.load(std::memory_order_acquire) > 0 && match(io, &hit)) {
      if (hit.mode == ErrorMode::kFail) {
        failed_.fetch_add(1, std::memory_order_relaxed);
        if (hit.status == IoStatus::kNvmeError) io.complete_nvme(hit.nvme_status);
        else io.complete(hit.status);
        return;
      }
      if (removing()) {  // nothing may be held past the teardown's quiesce
        aborted_.fetch_add(1, std::memory_order_relaxed);
        io.complete(IoStatus::kAborted);
        return;
      }
      held_.fetch_add(1, std::memory_order_relaxed);
      static_cast<ErrorChannel*>(ch.priv)->push(io);
      return;
    }
    if (io.type() == IoType::kReset) {  // a reset aborts what is held, then reaches the base
      struct Reset {
        ErrorBdev* self;
        BdevIo* io;
        VbdevChannel* ch;
      };
      auto* r = new Reset{this, &io, &ch};
      abort_everywhere(std::nullopt, [](void* arg) {
        auto* rr = static_cast<Reset*>(arg);
        rr->self->forward(*rr->io, *rr->ch, 0, &complete_from_base, rr->io);
        delete rr;
      }, r);
      return;
    }
    forward(io, ch, 0, &complete_from_base, &io);
  }

 private:
  bool match(const BdevIo& io, ErrorInjection* out) {
    const uint64_t start = io.offset_blocks(), end = start + io.num_blocks();
    std::lock_guard lock(mu_);
    for (auto it = inj_.begin(); it != inj_.end(); ++it) {
      if (it->type && *it->type != io.type()) continue;
      const bool unrestricted = it->lba_start == 0 && it->lba_end == kNoEnd;
      if (io.num_blocks() == 0 ? !unrestricted : (end <= it->lba_start || start >= it->lba_end))
        continue;
      *out = *it;
      if (it->count != 0 && --it->count == 0) {
        inj_.erase(it);
        armed_.store(static_cast<int>(inj_.size()), std::memory_order_release);
      }
      return true;
    }
    return false;
  }

  void abort_held(VbdevChannel& ch, std::optional<IoType> type) {
    auto* ec = static_cast<ErrorChannel*>(ch.priv);
    BdevIo* io = ec->head;  // detach: completions may hold new I/O meanwhile
    ec->head = ec->tail = nullptr;
    while (io != nullptr) {
      BdevIo* next = next_of(*io);
      if (!type || io->type() == *type) {
        held_.fetch_sub(1, std::memory_order_relaxed);
        aborted_.fetch_add(1, std::memory_order_relaxed);
        io->complete(IoStatus::kAborted);
      } else {
        ec->push(*io);
      }
      io = next;
    }
  }

  std::mutex mu_;  // inj_ (taken on the I/O path only while an injection is armed)
  std::vector<ErrorInjection> inj_;
  std::atomic<int> armed_{0};
  std::atomic<uint64_t> failed_{0}, held_{0}, aborted_{0};
};

ErrorBdev* find_error(VbdevModule& m, const std::string& name) {
  return static_cast<ErrorBdev*>(m.find_vbdev(name));
}

}  // namespace

Result<bool> ErrorModule::create(const ErrorOptions& o) {
  if (o.base_name.empty()) return make_error(EINVAL, "error bdev: base bdev name is required");
  const std::string name = o.name.empty() ? o.base_name + "_err" : o.name;
  return add_config(name, o.base_name, [this, name](VbdevBase& base) -> Result<int> {
    auto r = register_vbdev(std::make_unique<ErrorBdev>(*this, name), base,
                            inherit_properties(base.bdev(), name, "error"));
    if (!r) return r.error();
    return 1;
  });
}

int ErrorModule::remove(const std::string& name, event::MsgFn done, void* ctx) {
  return remove_config(name, done, ctx);
}

int ErrorModule::inject(const std::string& name, const ErrorInjection& inj) {
  if (inj.lba_start >= inj.lba_end) return -EINVAL;
  if (inj.mode == ErrorMode::kFail &&
      (inj.status == IoStatus::kSuccess || inj.status == IoStatus::kPending ||
       (inj.status == IoStatus::kNvmeError && (inj.nvme_status & 0xfffe) == 0)))
    return -EINVAL;
  ErrorBdev* v = find_error(*this, name);
  if (v == nullptr) return -ENODEV;
  v->add(inj);
  return 0;
}

int ErrorModule::clear(const std::string& name, std::optional<IoType> type, event::MsgFn done,
                       void* ctx) {
  ErrorBdev* v = find_error(*this, name);
  if (v == nullptr) return -ENODEV;
  v->drop(type);
  v->abort_everywhere(type, done, ctx);
  return 0;
}

Result<ErrorStats> ErrorModule::stats(const std::string& name) {
  ErrorBdev* v = find_error(*this, name);
  if (v == nullptr) return make_error(ENODEV, "error: no bdev named '" + name + "'");
  return v->stats();
}

}  // namespace pollux::bdev
