#include "fabric/target/poll_group.h"

#include <algorithm>
#include <atomic>

#include "fabric/target/controller.h"
#include "fabric/target/internal.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target {

uint64_t next_object_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Qpair::Qpair(PollGroup& group, Transport& transport)
    : group_(group), transport_(transport), id_(next_object_id()) {
  group_.add_qpair(this);
}

Qpair::~Qpair() {
  auth_release(*this);
  group_.remove_qpair(this);
}

PollGroup::PollGroup(Target& target, bdev::Manager& bdevs, event::Thread* thread, uint32_t index)
    : target_(target), bdevs_(bdevs), thread_(thread), index_(index) {}

PollGroup::~PollGroup() = default;

PgSubsystem& PollGroup::add_subsystem(uint32_t slot, bool discovery, uint32_t max_namespaces) {
  if (subsystems_.size() <= slot) subsystems_.resize(slot + 1);
  auto s = std::make_unique<PgSubsystem>();
  s->discovery = discovery;
  s->ns.resize(max_namespaces);
  subsystems_[slot] = std::move(s);
  return *subsystems_[slot];
}

void PollGroup::remove_subsystem(uint32_t slot) {
  if (slot < subsystems_.size()) subsystems_[slot].reset();
}

void PollGroup::remove_qpair(Qpair* q) {
  qpairs_.erase(q->id());
  check_empty();
}

Qpair* PollGroup::qpair(uint64_t id) const {
  auto it = qpairs_.find(id);
  return it == qpairs_.end() ? nullptr : it->second;
}

std::vector<Qpair*> PollGroup::qpairs() const {
  std::vector<Qpair*> out;
  out.reserve(qpairs_.size());
  for (const auto& [id, q] : qpairs_) out.push_back(q);
  return out;
}

void PollGroup::add_controller(Controller* c) {
  ctrls_[c->id()] = c;
  if (PgSubsystem* s = subsystem(c->config().slot)) s->ctrls.push_back(c);
}

void PollGroup::remove_controller(Controller* c) {
  ctrls_.erase(c->id());
  if (PgSubsystem* s = subsystem(c->config().slot))
    s->ctrls.erase(std::remove(s->ctrls.begin(), s->ctrls.end(), c), s->ctrls.end());
  check_empty();
}

Controller* PollGroup::controller(uint64_t id) const {
  auto it = ctrls_.find(id);
  return it == ctrls_.end() ? nullptr : it->second;
}

void PollGroup::retry_later(Request& r) {
  ++stats_.bdev_io_retries;
  r.next = nullptr;
  if (retry_tail_) {
    retry_tail_->next = &r;
  } else {
    retry_head_ = &r;
  }
  retry_tail_ = &r;
  if (retry_poller_ == nullptr)
    retry_poller_ = thread_->register_poller(retry_poll, this, 0, "nvmf_io_retry");
}

// Retries in FIFO order; one that is refused again goes back to the front and waits.
event::PollStatus PollGroup::retry_poll(void* arg) {
  auto& g = *static_cast<PollGroup*>(arg);
  Request* list = g.retry_head_;
  g.retry_head_ = g.retry_tail_ = nullptr;
  bool progress = false;
  while (list != nullptr) {
    Request* r = list;
    list = list->next;
    r->next = nullptr;
    if (g.retry_head_ != nullptr) {  // refused again: keep the order
      g.retry_tail_->next = r;
      g.retry_tail_ = r;
      continue;
    }
    resubmit_io(*r);  // may call retry_later() again
    progress = progress || g.retry_head_ == nullptr;
  }
  if (g.retry_head_ == nullptr) {
    g.thread_->unregister_poller(g.retry_poller_);
    g.retry_poller_ = nullptr;
  }
  return progress ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

void PollGroup::when_empty(std::function<void()> fn) {
  empty_waiters_.push_back(std::move(fn));
  check_empty();
}

void PollGroup::check_empty() {
  if (empty_waiters_.empty() || !qpairs_.empty() || !ctrls_.empty()) return;
  auto waiters = std::move(empty_waiters_);
  empty_waiters_.clear();
  for (auto& fn : waiters) fn();
}

}  // namespace pollux::fabric::target
