#include "driver/blob/crash/workload.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace pollux::blob::crash {
namespace {

struct Outcome {
  bool done = false;
  int rc = 1;
  BlobId id = kInvalidBlobId;
  Blob* blob = nullptr;
  Blobstore* bs = nullptr;
  static void op(void* a, int rc) { auto* o = static_cast<Outcome*>(a); o->done = true, o->rc = rc; }
  static void with_id(void* a, BlobId id, int rc) {
    auto* o = static_cast<Outcome*>(a);
    o->done = true, o->rc = rc, o->id = id;
  }
  static void with_blob(void* a, Blob* b, int rc) {
    auto* o = static_cast<Outcome*>(a);
    o->done = true, o->rc = rc, o->blob = b;
  }
  static void with_store(void* a, Blobstore* bs, int rc) {
    auto* o = static_cast<Outcome*>(a);
    o->done = true, o->rc = rc, o->bs = bs;
  }
};

uint64_t word(uint64_t seed, uint64_t unit, uint32_t i) {
  return (seed * 0x9E3779B97F4A7C15ull) ^ (unit << 16) ^ i;
}

// Data now at [offset, offset+len): what it overlaps of older regions is cut away, the rest
// of them stays (the pattern names absolute units, so a piece keeps its seed).
void add_region(BlobState& b, uint64_t offset, uint64_t len, uint64_t seed) {
  std::vector<Region> kept;
  const uint64_t end = offset + len;
  for (const Region& r : b.regions) {
    const uint64_t rend = r.offset + r.len;
    if (rend <= offset || end <= r.offset) {
      kept.push_back(r);
      continue;
    }
    if (r.offset < offset) kept.push_back({r.offset, offset - r.offset, r.seed});
    if (end < rend) kept.push_back({end, rend - end, r.seed});
  }
  kept.push_back({offset, len, seed});
  b.regions = std::move(kept);
}

}  // namespace

// One script step: what it does through the store, and what the model says after it.
struct Workload::Call {
  Workload* w;
  Blobstore* bs;
  std::string* error;

  template <typename Issue>
  Outcome md(const char* what, Issue issue) {
    Outcome o;
    {
      event::CurrentThreadScope scope(w->h_.md_thread);
      issue(&o);
    }
    if (!w->wait(&o.done)) *error = std::string(what) + ": no completion (hang)";
    else if (o.rc != 0) *error = std::string(what) + ": rc " + std::to_string(o.rc);
    return o;
  }
  bool ok() const { return error->empty(); }
  BlobId id(const std::string& name) { return w->ids_[name]; }
  Blob* open(const std::string& name) {
    return md("open", [&](Outcome* o) { bs->open_blob(id(name), Outcome::with_blob, o); }).blob;
  }
  void close(Blob* b) {
    if (b) md("close", [&](Outcome* o) { bs->close_blob(b, Outcome::op, o); });
  }
  void sync(Blob* b) {
    if (ok()) md("sync", [&](Outcome* o) { bs->sync_md(b, Outcome::op, o); });
  }
  void create(const std::string& name, uint64_t clusters, bool thin, std::vector<Xattr> xattrs) {
    BlobOptions opts;
    opts.num_clusters = clusters;
    opts.thin = thin;
    opts.xattrs = std::move(xattrs);
    Outcome o = md("create", [&](Outcome* out) { bs->create_blob(opts, Outcome::with_id, out); });
    if (ok()) remember(name, o.id);
  }
  void remember(const std::string& name, BlobId got) {
    if (!w->ids_fixed_) w->ids_[name] = got;
    else if (w->ids_[name] != got) *error = name + ": id differs from the reference run";
  }
  void write(Blob* b, uint64_t offset, uint64_t len, uint64_t seed) {
    if (!ok()) return;
    // The pattern names absolute units, so data in the wrong place cannot pass.
    for (uint64_t u = 0; u < len; ++u)
      for (uint32_t i = 0; i < 512; i += 8) {
        const uint64_t v = word(seed, offset + u, i);
        std::memcpy(w->h_.buffer + u * 512 + i, &v, 8);
      }
    Outcome o;
    event::IoChannel* ch = nullptr;
    {
      event::CurrentThreadScope scope(w->h_.io_thread);
      ch = bs->alloc_io_channel();
      const int rc = ch ? bs->write(b, ch, w->h_.buffer, offset, len, Outcome::op, &o) : -ENOMEM;
      if (rc != 0) o = {true, rc};
    }
    if (!w->wait(&o.done)) *error = "write: no completion (hang)";
    else if (o.rc != 0) *error = "write: rc " + std::to_string(o.rc);
    event::CurrentThreadScope scope(w->h_.io_thread);
    if (ch) bs->free_io_channel(ch);
  }
};

Workload::Workload(Harness h) : h_(std::move(h)) {
  const uint64_t upc = h_.cluster_size / 512;
  State s;
  states_.push_back(s);
  auto step = [&](const std::function<void(State&)>& f) {
    f(s);
    states_.push_back(s);
  };
  step([](State& s) { s["A"] = {true, 4, 0, {{"name", "A"}}, {}}; });
  step([&](State& s) { add_region(s["A"], 0, 32, 1), add_region(s["A"], 3 * upc - 8, 16, 2); });
  step([](State& s) { s["T"] = {true, 8, kFlagThin, {}, {}}; });
  step([&](State& s) { add_region(s["T"], 2 * upc, 8, 3), add_region(s["T"], 5 * upc + 1, 4, 4); });
  step([](State& s) { s["A"].xattrs["color"] = "blue", s["A"].clusters = 6; });
  step([](State& s) {
    s["S"] = {true, 6, kFlagReadOnly | kFlagSnapshot, {{"snap", "1"}}, s["A"].regions};
    s["A"].flags = kFlagThin | kFlagClone;
  });
  step([](State& s) { add_region(s["A"], 16, 32, 5); });
  step([](State& s) { s["C"] = {true, 6, kFlagThin | kFlagClone, {}, s["S"].regions}; });
  step([&](State& s) { add_region(s["C"], 0, 8, 6), add_region(s["C"], 4 * upc, 8, 7); });
  step([](State& s) { s["C"].flags = 0; });  // inflate
  step([](State& s) { s["T"].xattrs["gen"] = "2"; });  // a sync right before the delete
  step([](State& s) { s["T"] = {}; });                   // delete
  step([&](State& s) {
    s["A"].clusters = 2;
    std::erase_if(s["A"].regions, [&](const Region& r) { return r.offset + r.len > 2 * upc; });
  });
  step([](State& s) { s["B"] = {true, 2, 0, {}, {}}; });
  step([&](State& s) { add_region(s["B"], 0, 2 * upc, 8); });
  step([](State& s) { s["A"].flags = kFlagThin; });  // decouple: S had no parent
  step([](State& s) { s["B"].xattrs["k"] = "v"; });
  step([](State& s) { s["C"] = {}; });
  step([&](State& s) { add_region(s["A"], 0, upc, 9); });
  step([](State& s) { s["B"].flags |= kFlagReadOnly; });
  step([](State& s) { s["S"] = {}; });
  // A snapshot with one clone, deleted: merged into the clone.
  step([](State& s) {
    s["S2"] = {true, s["A"].clusters, kFlagReadOnly | kFlagSnapshot | kFlagThin, {}, s["A"].regions};
    s["A"].flags = kFlagThin | kFlagClone;
  });
  step([&](State& s) { add_region(s["A"], upc + 3, 8, 10); });
  step([](State& s) {
    s["S2"] = {};
    s["A"].flags = kFlagThin;  // S2 had no parent: A is no clone any more
  });
}

int Workload::steps() const { return static_cast<int>(states_.size()) - 1; }

bool Workload::wait(bool* flag) {
  for (uint64_t i = 0; i < h_.max_pumps && !*flag; ++i) h_.pump();
  return *flag;
}

int Workload::format() {
  Outcome o;
  StoreOptions opts;
  opts.cluster_size = h_.cluster_size;
  opts.registry = h_.registry;
  opts.md_pages = 64;
  {
    event::CurrentThreadScope scope(h_.md_thread);
    Blobstore::init(*h_.mgr, h_.bdev_name, opts, Outcome::with_store, &o);
  }
  if (!wait(&o.done)) return -ETIMEDOUT;
  if (o.rc == 0) abandon(o.bs);  // formatted and durable: the script loads it
  return o.rc;
}

int Workload::load(Blobstore** bs) {
  Outcome o;
  StoreOptions opts;
  opts.registry = h_.registry;
  {
    event::CurrentThreadScope scope(h_.md_thread);
    Blobstore::load(*h_.mgr, h_.bdev_name, opts, Outcome::with_store, &o);
  }
  if (!wait(&o.done)) return -ETIMEDOUT;
  *bs = o.bs;
  return o.rc;
}

void Workload::abandon(Blobstore* bs) {
  {
    event::CurrentThreadScope scope(h_.md_thread);
    bs->abandon();
  }
  for (int i = 0; i < 1000; ++i) h_.pump();  // deferred channel releases
}

bool Workload::matches(uint64_t offset, uint64_t len, uint64_t seed, std::string* why) {
  for (uint64_t u = 0; u < len; ++u)
    for (uint32_t i = 0; i < 512; i += 8) {
      uint64_t v;
      std::memcpy(&v, h_.buffer + u * 512 + i, 8);
      if (v != word(seed, offset + u, i)) {
        *why = "unit " + std::to_string(offset + u) + " does not hold seed " + std::to_string(seed);
        return false;
      }
    }
  return true;
}

int Workload::run(std::string* error) {
  Blobstore* bs = nullptr;
  error->clear();
  if (int rc = load(&bs); rc != 0) {
    *error = "load before the script: rc " + std::to_string(rc);
    return 0;
  }
  Call c{this, bs, error};
  const uint64_t upc = h_.cluster_size / 512;
  int done = 0;
  auto with = [&](const std::string& name, const std::function<void(Blob*)>& f) {
    Blob* b = c.open(name);
    if (c.ok()) f(b);
    const bool ok_before_close = c.ok();
    if (b) c.close(b);
    (void)ok_before_close;
  };
  auto snapshot = [&](const std::string& of, const std::string& name, std::vector<Xattr> x) {
    Outcome o = c.md("snapshot", [&](Outcome* out) { bs->snapshot(c.id(of), x, Outcome::with_id, out); });
    if (c.ok()) c.remember(name, o.id);
  };
  auto clone = [&](const std::string& of, const std::string& name) {
    Outcome o = c.md("clone", [&](Outcome* out) { bs->clone(c.id(of), {}, Outcome::with_id, out); });
    if (c.ok()) c.remember(name, o.id);
  };
  auto simple = [&](const char* what, const std::function<void(Outcome*)>& f) { c.md(what, f); };
  const std::vector<std::function<void()>> script = {
      [&] { c.create("A", 4, false, {{"name", {'A'}}}); },
      [&] { with("A", [&](Blob* b) { c.write(b, 0, 32, 1), c.write(b, 3 * upc - 8, 16, 2), c.sync(b); }); },
      [&] { c.create("T", 8, true, {}); },
      [&] { with("T", [&](Blob* b) { c.write(b, 2 * upc, 8, 3), c.write(b, 5 * upc + 1, 4, 4), c.sync(b); }); },
      [&] {
        with("A", [&](Blob* b) {
          b->set_xattr("color", "blue", 4);
          c.md("resize", [&](Outcome* o) { bs->resize(b, 6, Outcome::op, o); });
          c.sync(b);
        });
      },
      [&] { snapshot("A", "S", {{"snap", {'1'}}}); },
      [&] { with("A", [&](Blob* b) { c.write(b, 16, 32, 5), c.sync(b); }); },
      [&] { clone("S", "C"); },
      [&] { with("C", [&](Blob* b) { c.write(b, 0, 8, 6), c.write(b, 4 * upc, 8, 7), c.sync(b); }); },
      [&] { simple("inflate", [&](Outcome* o) { bs->inflate(c.id("C"), Outcome::op, o); }); },
      [&] { with("T", [&](Blob* b) { b->set_xattr("gen", "2", 1), c.sync(b); }); },
      [&] { simple("delete T", [&](Outcome* o) { bs->delete_blob(c.id("T"), Outcome::op, o); }); },
      [&] {
        with("A", [&](Blob* b) {
          c.md("resize", [&](Outcome* o) { bs->resize(b, 2, Outcome::op, o); });
          c.sync(b);
        });
      },
      [&] { c.create("B", 2, false, {}); },
      [&] { with("B", [&](Blob* b) { c.write(b, 0, 2 * upc, 8), c.sync(b); }); },
      [&] { simple("decouple", [&](Outcome* o) { bs->decouple_parent(c.id("A"), Outcome::op, o); }); },
      [&] { with("B", [&](Blob* b) { b->set_xattr("k", "v", 1), c.sync(b); }); },
      [&] { simple("delete C", [&](Outcome* o) { bs->delete_blob(c.id("C"), Outcome::op, o); }); },
      [&] { with("A", [&](Blob* b) { c.write(b, 0, upc, 9), c.sync(b); }); },
      [&] { with("B", [&](Blob* b) { b->set_read_only(), c.sync(b); }); },
      [&] { simple("delete S", [&](Outcome* o) { bs->delete_blob(c.id("S"), Outcome::op, o); }); },
      [&] { snapshot("A", "S2", {}); },
      [&] { with("A", [&](Blob* b) { c.write(b, upc + 3, 8, 10), c.sync(b); }); },
      [&] { simple("delete S2 (merge)", [&](Outcome* o) { bs->delete_blob(c.id("S2"), Outcome::op, o); }); },
  };
  for (const auto& s : script) {
    s();
    if (!c.ok()) break;
    ++done;
  }
  if (done == steps()) ids_fixed_ = true;
  abandon(bs);
  return done;
}

std::string Workload::check(int completed, CheckStats* stats) {
  Blobstore* bs = nullptr;
  if (int rc = load(&bs); rc != 0) return "load failed after the cut: rc " + std::to_string(rc);
  const LoadReport& rep = bs->report();
  if (!rep.was_clean) ++stats->dirty_loads;
  stats->repairs += rep.repairs.size();
  std::string why;
  auto fail = [&](const std::string& w) {
    if (why.empty()) why = w;
  };
  // Errors are expected for what the cut step was creating or deleting (a torn first page, a
  // half-zeroed chain); a blob that must exist and is missing fails below.
  stats->load_errors += rep.errors.size();
  const State& before = states_[std::min(completed, steps())];
  const State& after = states_[std::min(completed + 1, steps())];
  std::set<BlobId> known;
  // Every named blob: present or absent as one of the two states allows, with its attributes.
  std::set<std::string> names;
  for (const auto& [n, st] : before) names.insert(n);
  for (const auto& [n, st] : after) names.insert(n);
  for (const std::string& name : names) {
    const BlobState none;
    const BlobState& b0 = before.count(name) ? before.at(name) : none;
    const BlobState& b1 = after.count(name) ? after.at(name) : none;
    auto idit = ids_.find(name);
    if (idit == ids_.end()) continue;
    const BlobId id = idit->second;
    known.insert(id);
    Blob* b = bs->find(id);
    if (b == nullptr) {
      if (b0.exists && b1.exists) fail(name + " is gone");
      continue;
    }
    auto same = [&](const BlobState& st) {
      if (!st.exists || st.clusters != b->num_clusters() || st.flags != b->flags()) return false;
      std::map<std::string, std::string> x;
      for (const std::string& k : b->xattr_names()) {
        const void* v;
        std::size_t n;
        (void)b->get_xattr(k, &v, &n);
        x[k] = std::string(static_cast<const char*>(v), n);
      }
      return x == st.xattrs;
    };
    if (!same(b0) && !same(b1)) {
      fail(name + ": size/flags/xattrs match neither the state before nor after the step");
      continue;
    }
    ++stats->blobs_checked;
    // Units both states agree on (a step in flight may have left either).
    std::vector<Region> regions;
    if (b0.exists && b1.exists) {
      for (const Region& r0 : b0.regions)
        for (const Region& r1 : b1.regions) {
          const uint64_t from = std::max(r0.offset, r1.offset);
          const uint64_t to = std::min(r0.offset + r0.len, r1.offset + r1.len);
          if (r0.seed == r1.seed && from < to) regions.push_back({from, to - from, r0.seed});
        }
    } else {
      regions = b0.exists ? b0.regions : b1.regions;
    }
    Outcome o;
    {
      event::CurrentThreadScope scope(h_.md_thread);
      bs->open_blob(id, Outcome::with_blob, &o);
    }
    if (!wait(&o.done) || o.rc != 0) {
      fail(name + ": open failed");
      continue;
    }
    event::IoChannel* ch;
    {
      event::CurrentThreadScope scope(h_.io_thread);
      ch = bs->alloc_io_channel();
    }
    for (const Region& r : regions) {
      if (r.offset + r.len > b->num_io_units()) continue;  // a shrink in flight
      Outcome ro;
      {
        event::CurrentThreadScope scope(h_.io_thread);
        const int rc = bs->read(b, ch, h_.buffer, r.offset, r.len, Outcome::op, &ro);
        if (rc != 0) ro = {true, rc};
      }
      std::string w;
      if (!wait(&ro.done) || ro.rc != 0) fail(name + ": read failed");
      else if (!matches(r.offset, r.len, r.seed, &w)) fail(name + ": " + w);
      ++stats->regions_checked;
    }
    {
      event::CurrentThreadScope scope(h_.io_thread);
      bs->free_io_channel(ch);
    }
    Outcome co;
    {
      event::CurrentThreadScope scope(h_.md_thread);
      bs->close_blob(b, Outcome::op, &co);
    }
    wait(&co.done);
  }
  // No stranger, no cluster with two owners, none leaked.
  std::set<uint64_t> owned;
  for (BlobId id : bs->blob_ids()) {
    if (!known.count(id)) fail("unexpected blob " + std::to_string(id));
    for (uint64_t c : bs->find(id)->metadata().clusters)
      if (c != 0 && !owned.insert(c).second) fail("cluster " + std::to_string(c) + " has two owners");
  }
  const SuperBlock& sb = bs->super_block();
  if (bs->free_clusters() != sb.total_clusters - sb.first_data_cluster - owned.size())
    fail("leaked clusters: " + std::to_string(sb.total_clusters - sb.first_data_cluster - owned.size()) +
         " should be free, " + std::to_string(bs->free_clusters()) + " are");
  if (bs->used_md_pages() < bs->blob_ids().size()) fail("fewer md pages than blobs");
  for (int i = 0; i < 1000; ++i) h_.pump();
  abandon(bs);
  return why;
}

}  // namespace pollux::blob::crash
