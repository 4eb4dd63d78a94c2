// A poll group: the target's presence on one reactor (one lightweight thread per reactor).
// Every queue pair, and every controller, belongs to exactly one group and is only touched on
// its thread. The group keeps its own view of every subsystem (PgSubsystem): a namespace table
// with this thread's bdev channels, updated by messages from the target thread, so the I/O path
// reads only thread-local state and takes no lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/env/owner_counter.h"
#include "driver/event/framework.h"
#include "fabric/target/qpair.h"
#include "fabric/target/types.h"

namespace pollux::fabric::target {

class Controller;
class Target;

struct PgNamespace {
  enum class State : uint8_t { kAbsent, kActive, kRemoving };
  State state = State::kAbsent;
  uint32_t nsid = 0;
  bdev::Desc* desc = nullptr;  // opened by the target thread, shared by every group
  bdev::Bdev* bdev = nullptr;
  event::IoChannel* ch = nullptr;  // this thread's channel (none yet: see next_channel_try)
  uint64_t next_channel_try = 0;   // clock ticks: when I/O may try to get one again
  uint32_t block_size = 512;
  uint32_t block_shift = 9;
  uint64_t num_blocks = 0;
  bool write_cache = false;
  bool can_flush = false, can_unmap = false, can_write_zeroes = false, can_compare = false;
  NamespaceIds ids;
  uint64_t outstanding = 0;       // I/O in the bdev layer
  std::function<void()> drained;  // a removal waiting for `outstanding` to reach 0
};

struct PgSubsystem {
  bool discovery = false;
  std::vector<PgNamespace> ns;     // index nsid - 1; size = the subsystem's max namespaces
  std::vector<Controller*> ctrls;  // controllers whose admin queue is in this group
  PgNamespace* active(uint32_t nsid) {
    if (nsid == 0 || nsid > ns.size()) return nullptr;
    PgNamespace& n = ns[nsid - 1];
    return n.state == PgNamespace::State::kActive ? &n : nullptr;
  }
};

// Counters of one group, written by its thread only (a plain load and store), readable from
// any thread (a metrics scrape).
struct PollGroupStats {
  env::OwnerCounter admin_qpairs = 0;  // connected since start
  env::OwnerCounter io_qpairs = 0;
  env::OwnerCounter current_admin_qpairs = 0;
  env::OwnerCounter current_io_qpairs = 0;
  env::OwnerCounter pending_bdev_io = 0;  // in the bdev layer now
  env::OwnerCounter completed_nvme_io = 0;
  env::OwnerCounter io_errors = 0;
  env::OwnerCounter bdev_io_retries = 0;  // waits for a bdev_io (the layer's pool was empty)
  env::OwnerCounter authentications = 0;  // queues authenticated (DH-HMAC-CHAP)
  env::OwnerCounter authentication_failures = 0;
};

class PollGroup {
 public:
  PollGroup(Target& target, bdev::Manager& bdevs, event::Thread* thread, uint32_t index);
  ~PollGroup();
  PollGroup(const PollGroup&) = delete;
  PollGroup& operator=(const PollGroup&) = delete;

  Target& target() const { return target_; }
  bdev::Manager& bdevs() const { return bdevs_; }
  event::Thread* thread() const { return thread_; }
  uint32_t index() const { return index_; }
  PollGroupStats& stats() { return stats_; }

  // Everything below: this group's thread only.
  PgSubsystem* subsystem(uint32_t slot) {
    return slot < subsystems_.size() ? subsystems_[slot].get() : nullptr;
  }
  PgSubsystem& add_subsystem(uint32_t slot, bool discovery, uint32_t max_namespaces);
  void remove_subsystem(uint32_t slot);
  std::size_t subsystem_slots() const { return subsystems_.size(); }

  void add_qpair(Qpair* q) { qpairs_[q->id()] = q; }
  void remove_qpair(Qpair* q);
  Qpair* qpair(uint64_t id) const;
  std::vector<Qpair*> qpairs() const;
  void add_controller(Controller* c);
  void remove_controller(Controller* c);
  Controller* controller(uint64_t id) const;
  std::size_t controller_count() const { return ctrls_.size(); }

  // An I/O the bdev layer refused for lack of bdev_ios (-ENOMEM): run again from a poller.
  void retry_later(Request& r);
  // Runs fn once this group has neither queue pairs nor controllers (shutdown).
  void when_empty(std::function<void()> fn);

 private:
  static event::PollStatus retry_poll(void* arg);
  void check_empty();

  Target& target_;
  bdev::Manager& bdevs_;
  event::Thread* thread_;
  uint32_t index_;
  std::vector<std::unique_ptr<PgSubsystem>> subsystems_;
  std::unordered_map<uint64_t, Qpair*> qpairs_;
  std::unordered_map<uint64_t, Controller*> ctrls_;
  Request* retry_head_ = nullptr;
  Request* retry_tail_ = nullptr;
  event::Poller* retry_poller_ = nullptr;
  std::vector<std::function<void()>> empty_waiters_;
  PollGroupStats stats_;
};

// Ids of queue pairs and controllers: unique for the process, never reused, so a message that
// names one finds it, or finds it gone.
uint64_t next_object_id();

}  // namespace pollux::fabric::target
