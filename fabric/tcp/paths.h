// The addresses a host controller may reach one subsystem at (multipath, failover): the
// queues connect on the active one; when it fails, the next one becomes active. Shared by a
// TcpTransport and its queues; set-up paths only (a lock, copies).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace pollux::fabric::tcp {

// Where a queue connects.
struct Endpoint {
  std::string traddr;
  std::string trsvcid;
  bool operator==(const Endpoint&) const = default;
};

class Paths {
 public:
  static constexpr std::size_t kMax = 8;
  explicit Paths(Endpoint first) { eps_.push_back(std::move(first)); }

  // "" or why not (already there, too many).
  std::string add(Endpoint e) {
    std::lock_guard lock(mu_);
    for (const Endpoint& x : eps_)
      if (x == e) return "path " + e.traddr + ":" + e.trsvcid + " is already there";
    if (eps_.size() == kMax) return "at most " + std::to_string(kMax) + " paths";
    eps_.push_back(std::move(e));
    return "";
  }
  Endpoint active() const {
    std::lock_guard lock(mu_);
    return eps_[active_];
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return eps_.size();
  }
  // The next path becomes active (no-op with one path).
  void fail_over() {
    std::lock_guard lock(mu_);
    if (eps_.size() < 2) return;
    active_ = (active_ + 1) % eps_.size();
    ++failovers_;
  }
  // `failed` (a queue could not connect there) is no longer active: the next path becomes
  // active unless another failure already moved it (queues failing together move it once).
  void fail_over_from(const Endpoint& failed) {
    std::lock_guard lock(mu_);
    if (eps_.size() < 2 || !(eps_[active_] == failed)) return;
    active_ = (active_ + 1) % eps_.size();
    ++failovers_;
  }
  struct Snapshot {
    std::vector<Endpoint> all;
    std::size_t active;
    uint64_t failovers;
  };
  Snapshot snapshot() const {
    std::lock_guard lock(mu_);
    return {eps_, active_, failovers_};
  }

 private:
  mutable std::mutex mu_;
  std::vector<Endpoint> eps_;
  std::size_t active_ = 0;
  uint64_t failovers_ = 0;
};

}  // namespace pollux::fabric::tcp
