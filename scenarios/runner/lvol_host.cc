#include "scenarios/runner/lvol_host.h"

#include <algorithm>
#include <cstring>

#include "driver/lvol/lvol.h"

namespace pollux::scenarios {
namespace {

constexpr uint64_t kLoadRetryNs = 1'000'000;  // a base that does not answer yet (a reset)
constexpr uint64_t kMinMdPages = 256;

struct Done {
  bool called = false;
  int rc = 0;
  lvol::LvolStore* lvs = nullptr;
  static void store(void* a, lvol::LvolStore* s, int rc) { *static_cast<Done*>(a) = {true, rc, s}; }
  static void volume(void* a, lvol::Lvol*, int rc) { *static_cast<Done*>(a) = {true, rc, nullptr}; }
};

std::string store_name(const WorkloadSpec& w) {
  return "lvs_" + w.bdev.substr(0, w.bdev.size() - 2);
}

}  // namespace

LvolHost::LvolHost(const Scenario& sc, bdev::Manager& mgr, const env::Clock& clock,
                   env::MemoryRegistry& registry)
    : mgr_(mgr), clock_(clock), registry_(registry), t0_(clock.now()) {
  for (const WorkloadSpec& w : sc.workloads) {
    if (!w.lvol) continue;
    Store* s = nullptr;
    for (auto& x : stores_)
      if (x->base == w.bdev) s = x.get();
    if (s == nullptr) {
      stores_.push_back(std::make_unique<Store>());
      s = stores_.back().get();
      s->host = this;
      s->name = store_name(w);
      s->base = w.bdev;
      for (uint32_t i = 0; i < sc.devices.size(); ++i)
        if (sc.devices[i].name + "n1" == w.bdev) s->device = i;
      s->cluster_bytes = w.lvol->cluster_bytes;
    }
    s->volumes.push_back(&w);
    s->md_pages = std::max(s->md_pages, w.lvol->md_pages);
  }
  for (auto& s : stores_) {
    for (const WorkloadSpec* w : s->volumes) {
      if (w->lvol->snapshot_every_ns == 0) continue;
      Volume v;
      v.store = s.get();
      v.w = w;
      s->snapshotting.push_back(v);
    }
    if (s->md_pages != 0) continue;
    uint64_t clusters = 0;
    for (const WorkloadSpec* w : s->volumes)
      clusters += (w->range_bytes + s->cluster_bytes - 1) / s->cluster_bytes;
    s->md_pages = std::max<uint64_t>(kMinMdPages, clusters);
  }
}

LvolHost::~LvolHost() {
  stop();
}

std::string LvolHost::lvol_bdev(const Scenario&, const WorkloadSpec& w) {
  return store_name(w) + "/" + w.name;
}

std::string LvolHost::at() const {
  return format_ns(clock_.now() - t0_);
}

bool LvolHost::wait(const std::function<bool()>& until, const std::function<void()>& step,
                    uint64_t wait_ns) {
  const uint64_t deadline = clock_.now() + wait_ns;
  while (!until() && clock_.now() < deadline) step();
  return until();
}

std::string LvolHost::create(event::Thread& thread, const std::function<void()>& step,
                             uint64_t wait_ns) {
  for (auto& sp : stores_) {
    Store& s = *sp;
    Done d;
    lvol::LvolStore::create(mgr_, s.base, s.name, static_cast<uint32_t>(s.cluster_bytes),
                            Done::store, &d, &registry_, s.md_pages);
    if (!wait([&] { return d.called; }, step, wait_ns))
      return "lvstore " + s.name + ": creation hung";
    if (d.rc != 0) {
      return "lvstore " + s.name + " on " + s.base + ": " + std::strerror(-d.rc);
    }
    s.lvs = d.lvs;
    s.state = State::kUp;
    for (const WorkloadSpec* w : s.volumes) {
      Done v;
      s.lvs->create_lvol(w->name, w->range_bytes, w->lvol->thin, Done::volume, &v);
      if (!wait([&] { return v.called; }, step, wait_ns))
        return "lvol " + w->name + ": creation hung";
      if (v.rc != 0) {
        return "lvol " + w->name + " (" + std::to_string(w->range_bytes >> 20) + " MiB" +
               (w->lvol->thin ? ", thin" : "") + ") on " + s.name + ": " + std::strerror(-v.rc);
      }
    }
  }
  thread_ = &thread;
  t0_ = clock_.now();  // the run starts now: the log's times count from here
  for (auto& sp : stores_)
    for (Volume& v : sp->snapshotting)
      v.next_at = t0_ + v.w->start_ns + v.w->lvol->snapshot_every_ns;
  poller_ = thread.register_poller(keep, this, 0, "lvol_keeper");
  return "";
}

void LvolHost::stop() {
  if (poller_ != nullptr) thread_->unregister_poller(poller_);
  poller_ = nullptr;
}

bool LvolHost::shut_down() {
  stop();
  bool gone = true;
  for (auto& s : stores_) {
    if (s->state == State::kUp) crash(*s);
    gone &= s->state == State::kDown && lvol::LvolStore::find(s->name) == nullptr;
  }
  return gone;
}

void LvolHost::crash(uint32_t device) {
  for (auto& s : stores_)
    if (s->device == device) crash(*s);
}

void LvolHost::crash(Store& s) {
  switch (s.state) {
    case State::kUp:
      s.state = State::kCrashing;
      log_.push_back(at() + ": " + s.name + " crashed with the host (nothing more written)");
      s.lvs->crash(crashed, &s);
      return;
    case State::kLoading:
      s.crash_after_load = true;
      return;
    case State::kCrashing:
    case State::kDown:
      return;
  }
}

void LvolHost::crashed(void* arg, int) {
  auto* s = static_cast<Store*>(arg);
  s->lvs = nullptr;
  s->state = State::kDown;
}

void LvolHost::load(Store& s) {
  s.state = State::kLoading;
  lvol::LvolStore::load(mgr_, s.base, loaded, &s, &registry_);
}

void LvolHost::loaded(void* arg, lvol::LvolStore* lvs, int rc) {
  auto* s = static_cast<Store*>(arg);
  LvolHost* h = s->host;
  if (rc != 0) {
    if (s->failed_loads++ == 0) {
      h->log_.push_back(h->at() + ": loading " + s->name + " failed (" + std::strerror(-rc) +
                        "); retried every " + format_ns(kLoadRetryNs));
    }
    s->state = State::kDown;
    s->retry_at = h->clock_.now() + kLoadRetryNs;
    return;
  }
  s->lvs = lvs;
  s->state = State::kUp;
  s->failed_loads = 0;
  s->op_busy = false;  // what ran on the crashed store ended with it
  for (Volume& v : s->snapshotting) v.recheck = true;
  const blob::LoadReport& r = lvs->blobstore().report();
  std::string line = h->at() + ": " + s->name + " loaded (" + (r.was_clean ? "clean" : "dirty") +
                     "): " + std::to_string(r.blobs) + " blobs, " +
                     std::to_string(r.clusters_reclaimed) + " clusters reclaimed, " +
                     std::to_string(r.pages_cleared) + " md pages cleared";
  if (r.blobs_skipped) line += ", " + std::to_string(r.blobs_skipped) + " blobs SKIPPED";
  for (const std::string& e : r.errors) line += "; " + e;
  h->log_.push_back(line);
  if (s->crash_after_load) {
    s->crash_after_load = false;
    h->crash(*s);
  }
}

event::PollStatus LvolHost::keep(void* arg) {
  auto* h = static_cast<LvolHost*>(arg);
  int work = 0;
  for (auto& sp : h->stores_) {
    Store& s = *sp;
    // The base's removal crashed the store by itself: it has left the registry.
    if (s.state == State::kUp && lvol::LvolStore::find(s.name) != s.lvs) {
      h->log_.push_back(h->at() + ": " + s.name + " went with its base " + s.base);
      s.lvs = nullptr;
      s.state = State::kDown;
    }
    if (s.state == State::kUp && !s.op_busy && h->snapshot_step(s)) ++work;
    if (s.state == State::kDown && h->clock_.now() >= s.retry_at &&
        h->mgr_.find(s.base) != nullptr && lvol::LvolStore::find(s.name) == nullptr) {
      h->load(s);
      ++work;
    }
  }
  return work ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

std::vector<std::string> LvolHost::Volume::snapshots() const {
  std::vector<std::pair<uint32_t, std::string>> found;
  const std::string prefix = w->name + ".s";
  for (const std::string& n : store->lvs->lvol_names())
    if (n.size() > prefix.size() && n.size() - prefix.size() <= 9 &&
        n.compare(0, prefix.size(), prefix) == 0 &&
        n.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      found.push_back({static_cast<uint32_t>(std::stoul(n.substr(prefix.size()))), n});
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [k, n] : found) out.push_back(n);
  return out;
}

// One metadata operation at a time per store: the oldest snapshot beyond keep_snapshots is
// deleted (merged into the next one), else a due snapshot is taken.
bool LvolHost::snapshot_step(Store& s) {
  const uint64_t now = clock_.now();
  for (Volume& v : s.snapshotting) {
    const uint64_t end = t0_ + v.w->start_ns + v.w->duration_ns;
    lvol::Lvol* l = s.lvs->lvol(v.w->name);
    if (l == nullptr || now >= end || (!v.recheck && now < v.next_at)) continue;
    v.recheck = false;  // the names are listed again after the next snapshot, merge or load
    const auto snaps = v.snapshots();
    if (snaps.size() > v.w->lvol->keep_snapshots) {  // before the next one: keep the count
      s.op_busy = true;
      s.lvs->destroy(s.lvs->lvol(snaps.front()), merged, &v);
      return true;
    }
    if (now >= v.next_at) {
      v.next_at = now + v.w->lvol->snapshot_every_ns;
      // A name not taken yet (a reload may bring back snapshots of before the crash).
      std::string name;
      do name = v.w->name + ".s" + std::to_string(++v.seq);
      while (std::find(snaps.begin(), snaps.end(), name) != snaps.end());
      s.op_busy = true;
      s.lvs->snapshot(l, name, snapshotted, &v);
      return true;
    }
  }
  return false;
}

void LvolHost::snapshotted(void* arg, lvol::Lvol*, int rc) {
  auto* v = static_cast<Volume*>(arg);
  v->store->op_busy = false;
  v->recheck = true;
  ++(rc == 0 ? v->taken : v->failed);
}

void LvolHost::merged(void* arg, int rc) {
  auto* v = static_cast<Volume*>(arg);
  v->store->op_busy = false;
  v->recheck = true;
  ++(rc == 0 ? v->merged : v->merge_failed);
}

std::vector<std::string> LvolHost::log() const {
  std::vector<std::string> out = log_;
  for (const auto& s : stores_)
    for (const Volume& v : s->snapshotting) {
      out.push_back(v.w->name + ": " + std::to_string(v.taken) + " snapshots taken (" +
                    std::to_string(v.failed) + " failed), " + std::to_string(v.merged) +
                    " merged away (" + std::to_string(v.merge_failed) + " failed)");
    }
  return out;
}

bool LvolHost::all_loaded() const {
  for (const auto& s : stores_)
    if (s->state != State::kUp) return false;
  return true;
}

std::string LvolHost::reload_all(const std::function<void()>& step, uint64_t wait_ns) {
  for (auto& sp : stores_) {
    Store& s = *sp;
    if (!wait([&] { return s.state == State::kUp || s.state == State::kDown; }, step, wait_ns)) {
      return s.name + ": still crashing or loading after " + format_ns(wait_ns);
    }
    if (s.state == State::kUp) crash(s);
    if (!wait([&] { return s.state == State::kUp; }, step, wait_ns)) {
      return s.name + " on " + s.base + " could not be loaded again at the end within " +
             format_ns(wait_ns);
    }
  }
  return "";
}

}  // namespace pollux::scenarios
