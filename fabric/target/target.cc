#include "fabric/target/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

#include "fabric/target/controller.h"

namespace pollux::fabric::target {

namespace {

constexpr uint32_t kMaxNamespacesLimit = 1024;
constexpr const char* kClaimModule = "nvmf_tgt";

Error fail(const std::string& msg, int code = EINVAL) {
  return make_error(code, msg);
}

bool valid_nqn(const std::string& n, std::string* why) {
  if (n.empty()) return *why = "is empty", false;
  if (n.size() > nf::kNqnMaxLength)
    return *why = fmt::format("is longer than {} bytes", nf::kNqnMaxLength), false;
  if (n.rfind("nqn.", 0) != 0) return *why = "does not start with 'nqn.'", false;
  if (std::any_of(n.begin(), n.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
    return *why = "holds control characters", false;
  return true;
}

bool printable_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= 0x20 && c < 0x7f; });
}

// A namespace's UUID when neither the RPC nor its bdev gives one. One generator per process,
// seeded once: a std::random_device costs tens of microseconds here, and namespaces are made
// by the thousand in tests and fuzzing.
std::array<uint8_t, 16> random_uuid() {
  static std::mutex mu;
  static std::mt19937_64 gen = [] {
    std::random_device rd;
    return std::mt19937_64((uint64_t{rd()} << 32) ^ rd());
  }();
  std::array<uint8_t, 16> u;
  std::lock_guard lock(mu);
  for (auto& b : u) b = static_cast<uint8_t>(gen());
  u[6] = static_cast<uint8_t>((u[6] & 0x0f) | 0x40);  // version 4
  u[8] = static_cast<uint8_t>((u[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return u;
}

void space_pad(char* dst, std::size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool parse_hex_id(const std::string& text, uint8_t* out, std::size_t n) {
  std::string hex;
  for (char c : text) {
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    hex.push_back(c);
  }
  if (hex.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

std::string format_hex(const uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

std::string format_uuid(const std::array<uint8_t, 16>& u) {
  const std::string h = format_hex(u.data(), u.size());
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

std::vector<NamespaceInfo> Subsystem::namespaces() const {
  std::vector<NamespaceInfo> out;
  for (const auto& [nsid, ns] : ns_) out.push_back(ns.info);
  return out;
}

// ---------------------------------------------------------------------- creation ---

Target::Target(event::Framework& fw, bdev::Manager& bdevs, event::Thread* thread)
    : fw_(fw), bdevs_(bdevs), thread_(thread) {}

Target::~Target() = default;

Result<std::unique_ptr<Target>> Target::create(event::Framework& fw, bdev::Manager& bdevs) {
  event::Thread* self = event::Thread::current();
  if (self == nullptr) return make_error(EINVAL, "nvmf target: create it on a framework thread");
  std::unique_ptr<Target> t(new Target(fw, bdevs, self));
  t->transports_.reserve(kMaxTransports);
  for (std::size_t i = 0; i < fw.reactor_count(); ++i) {
    event::Thread* th = fw.create_thread(fmt::format("nvmf_pg{}", i), static_cast<int>(i),
                                         {fw.reactor(i).core()});  // one core, as SPDK's
    t->groups_.push_back(std::make_unique<PollGroup>(*t, bdevs, th, static_cast<uint32_t>(i)));
  }
  // Slot 0: the discovery subsystem, present on every listener.
  auto d = std::make_unique<Subsystem>();
  d->slot_ = 0;
  d->opts_.nqn = nf::kDiscoveryNqn;
  d->opts_.max_namespaces = 0;
  d->opts_.serial = "POLLUXDISCOVERY00001";
  d->opts_.model = "Pollux Discovery Controller";
  d->discovery_ = true;
  t->subsystems_.push_back(std::move(d));
  t->for_each_group(
      [](PollGroup& g, std::function<void()> next) {
        g.add_subsystem(0, true, 0);
        next();
      },
      nullptr);
  return t;
}

PollGroup& Target::next_group(bool admin) {
  uint32_t& next = admin ? next_admin_group_ : next_io_group_;
  PollGroup& g = *groups_[next];
  next = static_cast<uint32_t>((next + 1) % groups_.size());
  return g;
}

bool Target::run_on(event::Thread* t, std::function<void()> fn) const {
  auto* p = new std::function<void()>(std::move(fn));
  const bool sent = fw_.send_reliably(
      t,
      [](void* a) {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(a));
        (*f)();
      },
      p);
  if (!sent) delete p;
  return sent;
}

// ---------------------------------------------------------------------- group walks ---

struct Walk {
  Target::Step step;
  std::function<void()> done;
  std::size_t next = 0;
};

void Target::for_each_group(Step step, std::function<void()> done) {
  ++unsettled_;
  auto w = std::make_shared<Walk>();
  w->step = std::move(step);
  w->done = std::move(done);
  walk(std::move(w));
}

void Target::walk(std::shared_ptr<Walk> w) {
  if (w->next == groups_.size()) {
    run_on(thread_, [this, w] {
      if (w->done) w->done();
      settle_one();
    });
    return;
  }
  PollGroup* g = groups_[w->next].get();
  run_on(g->thread(), [this, w, g] {
    w->step(*g, [this, w] {
      ++w->next;
      walk(w);
    });
  });
}

void Target::settle_one() {
  if (--unsettled_ != 0) return;
  auto waiters = std::move(settled_waiters_);
  settled_waiters_.clear();
  for (auto& fn : waiters) fn();
}

void Target::when_settled(std::function<void()> fn) {
  if (unsettled_ == 0) return fn();
  settled_waiters_.push_back(std::move(fn));
}

// ---------------------------------------------------------------------- transports ---

Status Target::add_transport(std::unique_ptr<Transport> t) {
  if (transport(t->trtype()) != nullptr)
    return fail(fmt::format("transport {} already exists", t->trtype()), EEXIST);
  if (transports_.size() == kMaxTransports)
    return fail(fmt::format("at most {} transports", kMaxTransports), ENOSPC);
  Transport* raw = t.get();
  transports_.push_back(std::move(t));
  published_transports_.store(transports_.size(), std::memory_order_release);
  for_each_group(
      [raw](PollGroup& g, std::function<void()> next) {
        raw->add_group(g);
        next();
      },
      nullptr);
  return ok_status();
}

Transport* Target::transport(const std::string& trtype) const {
  const std::size_t n = published_transports_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i)
    if (lower(transports_[i]->trtype()) == lower(trtype)) return transports_[i].get();
  return nullptr;
}

std::vector<Transport*> Target::transports() const {
  const std::size_t n = published_transports_.load(std::memory_order_acquire);
  std::vector<Transport*> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(transports_[i].get());
  return out;
}

// ---------------------------------------------------------------------- subsystems ---

Subsystem* Target::find(const std::string& nqn) const {
  for (const auto& s : subsystems_)
    if (s && s->opts_.nqn == nqn) return s.get();
  return nullptr;
}

std::vector<Subsystem*> Target::subsystems() const {
  std::vector<Subsystem*> out;
  for (const auto& s : subsystems_)
    if (s) out.push_back(s.get());
  return out;
}

Result<Subsystem*> Target::create_subsystem(const SubsystemOptions& o) {
  if (stopping_) return fail("the target is stopping", ESHUTDOWN);
  std::string why;
  if (!valid_nqn(o.nqn, &why)) return fail("nqn '" + o.nqn + "' " + why);
  if (o.nqn == nf::kDiscoveryNqn)
    return fail("nqn: the discovery subsystem exists already", EEXIST);
  if (find(o.nqn) != nullptr) return fail("subsystem " + o.nqn + " exists already", EEXIST);
  if (o.serial.empty() || o.serial.size() > 20 || !printable_ascii(o.serial))
    return fail("serial_number: 1 to 20 printable ASCII characters");
  if (o.model.empty() || o.model.size() > 40 || !printable_ascii(o.model))
    return fail("model_number: 1 to 40 printable ASCII characters");
  if (o.max_namespaces == 0 || o.max_namespaces > kMaxNamespacesLimit)
    return fail(fmt::format("max_namespaces: 1 to {}", kMaxNamespacesLimit));
  if (o.min_cntlid == 0 || o.max_cntlid > nf::connect::kCntlidMax || o.min_cntlid > o.max_cntlid)
    return fail(
        fmt::format("min_cntlid/max_cntlid: 1 <= min <= max <= {}", nf::connect::kCntlidMax));
  auto s = std::make_unique<Subsystem>();
  s->slot_ = static_cast<uint32_t>(subsystems_.size());  // slots are never reused
  s->opts_ = o;
  s->next_cntlid_ = o.min_cntlid;
  Subsystem* raw = s.get();
  subsystems_.push_back(std::move(s));
  const uint32_t slot = raw->slot_, max_ns = o.max_namespaces;
  for_each_group(
      [slot, max_ns](PollGroup& g, std::function<void()> next) {
        g.add_subsystem(slot, false, max_ns);
        next();
      },
      nullptr);
  bump_genctr();
  return raw;
}

Status Target::delete_subsystem(const std::string& nqn) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  if (s->discovery_) return fail("the discovery subsystem cannot be deleted");
  s->deleting_ = true;
  ++unsettled_;  // until its controllers, namespaces and group state are gone
  for (const auto& [cntlid, ci] : s->ctrls_) {
    run_on(ci.group->thread(), [g = ci.group, id = ci.id] {
      if (Controller* c = g->controller(id)) c->disconnect_all("subsystem deleted");
    });
  }
  for (const ListenAddress& a : std::vector<ListenAddress>(s->listeners_))
    (void)remove_listener(nqn, a);
  bump_genctr();
  // The rest happens in controller_gone() once the last controller has ended.
  controller_gone(s->slot_, 0, 0);
  return ok_status();
}

// A controller ended (its group says so). For a subsystem being deleted, the last one lets
// the namespaces and the groups' state go.
void Target::controller_gone(uint32_t slot, uint16_t cntlid, uint64_t id) {
  if (slot >= subsystems_.size() || !subsystems_[slot]) return;
  Subsystem& s = *subsystems_[slot];
  auto it = s.ctrls_.find(cntlid);
  if (it != s.ctrls_.end() && it->second.id == id) s.ctrls_.erase(it);
  if (!s.deleting_ || !s.ctrls_.empty()) return;
  if (s.ns_.empty() == false) {
    // Namespaces one by one; this runs again when each is gone.
    const uint32_t nsid = s.ns_.begin()->first;
    if (s.ns_.begin()->second.info.removing) return;
    remove_namespace_entry(s, nsid, [this, slot] { controller_gone(slot, 0, 0); });
    return;
  }
  if (s.ctrls_.empty() && s.ns_.empty() && !s.dropping_) {
    s.dropping_ = true;
    for_each_group(
        [slot](PollGroup& g, std::function<void()> next) {
          g.remove_subsystem(slot);
          next();
        },
        [this, slot] {
          subsystems_[slot].reset();
          settle_one();  // the deletion's own count
        });
  }
}

// ---------------------------------------------------------------------- namespaces ---

struct NsEventCtx {
  Target* target;
  uint32_t slot;
  uint32_t nsid;
};

Result<uint32_t> Target::add_namespace(const std::string& nqn, const NamespaceOptions& o) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return make_error(ENODEV, "no subsystem " + nqn);
  if (s->discovery_) return make_error(EINVAL, "the discovery subsystem has no namespaces");
  uint32_t nsid = o.nsid;
  const uint32_t max = s->opts_.max_namespaces;
  if (nsid == 0) {
    for (uint32_t i = 1; i <= max && nsid == 0; ++i)
      if (!s->ns_.count(i)) nsid = i;
    if (nsid == 0)
      return make_error(ENOSPC, fmt::format("{}: all {} namespaces are in use", nqn, max));
  } else if (nsid > max) {
    return make_error(EINVAL, fmt::format("nsid {}: above max_namespaces ({})", nsid, max));
  } else if (s->ns_.count(nsid)) {
    return make_error(EEXIST, fmt::format("{}: namespace {} exists already", nqn, nsid));
  }
  auto* ctx = new NsEventCtx{this, s->slot_, nsid};
  auto d = bdevs_.open(o.bdev_name, true, on_bdev_event, ctx);
  if (!d) {
    delete ctx;
    return make_error(d.error().code, "bdev_name: " + d.error().message);
  }
  bdev::Desc* desc = *d;
  if (int rc = bdevs_.claim(desc, kClaimModule); rc != 0) {
    bdevs_.close(desc);
    delete ctx;
    return make_error(rc, "bdev '" + o.bdev_name + "' is in use by another module");
  }
  NamespaceIds ids;
  if (o.uuid) {
    ids.uuid = *o.uuid;
  } else if (const std::string& u = desc->bdev().props().uuid;
             !u.empty() && parse_hex_id(u, ids.uuid.data(), 16)) {
  } else {
    ids.uuid = random_uuid();
  }
  if (o.nguid) ids.nguid = *o.nguid;
  if (o.eui64) ids.eui64 = *o.eui64;
  Subsystem::Ns& ns = s->ns_[nsid];
  ns.info = NamespaceInfo{nsid, o.bdev_name, ids, false};
  ns.desc = desc;
  ns_ctx_.push_back(std::unique_ptr<NsEventCtx>(ctx));
  const uint32_t slot = s->slot_;
  bdev::Manager* mgr = &bdevs_;
  for_each_group(
      [slot, nsid, desc, ids, mgr](PollGroup& g, std::function<void()> next) {
        PgSubsystem* sub = g.subsystem(slot);
        if (sub != nullptr) {
          PgNamespace& n = sub->ns[nsid - 1];
          n = PgNamespace{};
          n.nsid = nsid;
          n.desc = desc;
          n.bdev = &desc->bdev();
          const bdev::BdevProperties& p = n.bdev->props();
          n.block_size = p.block_size;
          n.block_shift = static_cast<uint32_t>(__builtin_ctz(p.block_size));
          n.num_blocks = p.num_blocks;
          n.write_cache = p.write_cache;
          n.can_flush = n.bdev->supports(bdev::IoType::kFlush);
          n.can_unmap = n.bdev->supports(bdev::IoType::kUnmap);
          n.can_write_zeroes = n.bdev->supports(bdev::IoType::kWriteZeroes);
          n.can_compare = n.bdev->supports(bdev::IoType::kCompare);
          n.ids = ids;
          n.state = PgNamespace::State::kActive;
          // Without a channel (the device behind is being reset, say) the namespace is
          // still there: its I/O answers Namespace Not Ready until a channel is had (io.cc).
          n.ch = mgr->get_io_channel(desc);
          if (n.ch == nullptr) {
            fmt::print(stderr, "nvmf: namespace {}: no bdev channel on {} yet\n", nsid,
                       g.thread()->name());
          }
        }
        next();
      },
      [this, slot, nsid] { notify_changed(slot, nsid); });
  return nsid;
}

Status Target::remove_namespace(const std::string& nqn, uint32_t nsid) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  auto it = s->ns_.find(nsid);
  if (it == s->ns_.end() || it->second.info.removing)
    return fail(fmt::format("{}: no namespace {}", nqn, nsid), ENODEV);
  remove_namespace_entry(*s, nsid, nullptr);
  return ok_status();
}

// Every group stops taking I/O for the namespace, waits for what it has in the bdev layer,
// and lets its channel go; then the descriptor closes and the controllers hear of it.
void Target::remove_namespace_entry(Subsystem& s, uint32_t nsid, std::function<void()> then) {
  s.ns_[nsid].info.removing = true;
  const uint32_t slot = s.slot_;
  bdev::Manager* mgr = &bdevs_;
  for_each_group(
      [slot, nsid, mgr](PollGroup& g, std::function<void()> next) {
        PgSubsystem* sub = g.subsystem(slot);
        if (sub == nullptr || sub->ns[nsid - 1].state != PgNamespace::State::kActive) {
          if (sub != nullptr) sub->ns[nsid - 1] = PgNamespace{};
          return next();
        }
        PgNamespace& n = sub->ns[nsid - 1];
        n.state = PgNamespace::State::kRemoving;
        auto release = [&n, mgr, next] {
          if (n.ch != nullptr) mgr->put_io_channel(n.ch);
          n = PgNamespace{};
          next();
        };
        if (n.outstanding == 0) return release();
        n.drained = release;
      },
      [this, slot, nsid, then = std::move(then)] {
        Subsystem& sub = *subsystems_[slot];
        auto it = sub.ns_.find(nsid);
        if (it != sub.ns_.end()) {
          bdevs_.close(it->second.desc);
          sub.ns_.erase(it);
        }
        ns_ctx_.erase(
            std::remove_if(ns_ctx_.begin(), ns_ctx_.end(),
                           [&](const auto& c) { return c->slot == slot && c->nsid == nsid; }),
            ns_ctx_.end());
        notify_changed(slot, nsid);
        if (then) then();
      });
}

// The bdev under a namespace is going (hot removal): the namespace goes with it.
void Target::on_bdev_event(bdev::DescEvent e, bdev::Bdev&, void* arg) {
  if (e != bdev::DescEvent::kRemove) return;
  auto* ctx = static_cast<NsEventCtx*>(arg);
  Target& t = *ctx->target;
  if (ctx->slot >= t.subsystems_.size() || !t.subsystems_[ctx->slot]) return;
  Subsystem& s = *t.subsystems_[ctx->slot];
  auto it = s.ns_.find(ctx->nsid);
  if (it == s.ns_.end() || it->second.info.removing) return;
  fmt::print(stderr, "nvmf: {} namespace {}: bdev {} removed\n", s.nqn(), ctx->nsid,
             it->second.info.bdev_name);
  t.remove_namespace_entry(s, ctx->nsid, nullptr);
}

// Namespace changes reach controllers only after every group has them: a host that hears of
// a new namespace finds it on whichever queue it uses.
void Target::notify_changed(uint32_t slot, uint32_t nsid) {
  for_each_group(
      [slot, nsid](PollGroup& g, std::function<void()> next) {
        if (PgSubsystem* sub = g.subsystem(slot)) {
          for (Controller* c : std::vector<Controller*>(sub->ctrls)) c->namespace_changed(nsid);
        }
        next();
      },
      nullptr);
}

void Target::notify_discovery() {
  for_each_group(
      [](PollGroup& g, std::function<void()> next) {
        if (PgSubsystem* sub = g.subsystem(0)) {
          for (Controller* c : std::vector<Controller*>(sub->ctrls)) c->discovery_changed();
        }
        next();
      },
      nullptr);
}

void Target::bump_genctr() {
  ++genctr_;
  notify_discovery();
}

// ---------------------------------------------------------------------- hosts, listeners ---

Status Target::add_host(const std::string& nqn, const std::string& hostnqn, HostKeys keys) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  if (s->discovery_) return fail("the discovery subsystem admits every host");
  std::string why;
  if (!valid_nqn(hostnqn, &why)) return fail("host '" + hostnqn + "' " + why);
  if (keys.ctrlr_key && !keys.key)
    return fail("dhchap_ctrlr_key needs dhchap_key (the host authenticates first)");
  if (!s->hosts_.insert(hostnqn).second)
    return fail("host " + hostnqn + " is allowed already", EEXIST);
  if (keys.key) s->host_keys_[hostnqn] = std::move(keys);
  bump_genctr();
  return ok_status();
}

Status Target::set_auth_options(const AuthOptions& o) {
  if (o.digests.empty()) return fail("dhchap_digests: at least one hash function");
  if (o.dhgroups.empty()) return fail("dhchap_dhgroups: at least one DH group");
  for (uint8_t h : o.digests)
    if (dhchap::hash_name(h) == nullptr) return fail("unknown hash id " + std::to_string(h));
  for (uint8_t g : o.dhgroups)
    if (dhchap::dhgroup_name(g) == nullptr) return fail("unknown DH group id " + std::to_string(g));
  if (o.timeout_ms == 0) return fail("the authentication timeout must be above 0");
  auth_options_ = o;
  return ok_status();
}

Status Target::remove_host(const std::string& nqn, const std::string& hostnqn) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  if (s->hosts_.erase(hostnqn) == 0) return fail("host " + hostnqn + " is not allowed", ENODEV);
  s->host_keys_.erase(hostnqn);
  bump_genctr();
  return ok_status();
}

Status Target::set_allow_any_host(const std::string& nqn, bool allow) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  if (s->discovery_) return fail("the discovery subsystem admits every host");
  s->opts_.allow_any_host = allow;
  bump_genctr();
  return ok_status();
}

Status Target::add_listener(const std::string& nqn, const ListenAddress& a) {
  Subsystem* s = find(nqn);
  if (s == nullptr || s->deleting_) return fail("no subsystem " + nqn, ENODEV);
  Transport* t = transport(a.trtype);
  if (t == nullptr)
    return fail("no transport " + a.trtype + " (nvmf_create_transport first)", ENODEV);
  // Subsystems share the transport's listener on one address (as SPDK's do). A listener on
  // port "0" (any) is known by the port it was bound to from then on: a subsystem naming that
  // port, or "0" again, shares it, and the discovery log shows the port.
  ListenAddress bound = a;
  if (auto any = any_port_.find(a.to_string()); any != any_port_.end()) bound = any->second;
  if (std::find(s->listeners_.begin(), s->listeners_.end(), bound) != s->listeners_.end())
    return fail(nqn + " listens on " + bound.to_string() + " already", EEXIST);
  auto it =
      std::find_if(listening_.begin(), listening_.end(), [&](auto& p) { return p.first == bound; });
  if (it == listening_.end()) {
    if (auto st = t->listen(a); !st) return st;
    if (const uint16_t port = t->bound_port(a); a.trsvcid == "0" && port != 0) {
      bound.trsvcid = std::to_string(port);
      any_port_[a.to_string()] = bound;
    }
    listening_.emplace_back(bound, 1);
    if (!port_ids_.count(bound.to_string()))
      port_ids_[bound.to_string()] = static_cast<uint16_t>(port_ids_.size() + 1);
  } else {
    ++it->second;
  }
  s->listeners_.push_back(bound);
  bump_genctr();
  return ok_status();
}

ListenAddress Target::as_configured(const ListenAddress& bound) const {
  ListenAddress a = bound;
  for (const auto& [asked, b] : any_port_)
    if (b == bound) a.trsvcid = "0";
  return a;
}

Status Target::remove_listener(const std::string& nqn, const ListenAddress& asked) {
  Subsystem* s = find(nqn);
  if (s == nullptr) return fail("no subsystem " + nqn, ENODEV);
  ListenAddress a = asked;
  if (auto any = any_port_.find(asked.to_string()); any != any_port_.end()) a = any->second;
  auto l = std::find(s->listeners_.begin(), s->listeners_.end(), a);
  if (l == s->listeners_.end()) return fail(nqn + " does not listen on " + a.to_string(), ENODEV);
  s->listeners_.erase(l);
  auto it =
      std::find_if(listening_.begin(), listening_.end(), [&](auto& p) { return p.first == a; });
  if (it != listening_.end() && --it->second == 0) {
    if (Transport* t = transport(a.trtype)) t->stop_listening(a);
    listening_.erase(it);
    std::erase_if(any_port_, [&](const auto& p) { return p.second == a; });
  }
  bump_genctr();
  return ok_status();
}

// ---------------------------------------------------------------------- discovery ---

std::vector<uint8_t> Target::discovery_log(const std::string& hostnqn) const {
  std::vector<nf::DiscoveryLogEntry> entries;
  for (const auto& s : subsystems_) {
    if (!s || s->discovery_ || s->deleting_ || !s->host_allowed(hostnqn)) continue;
    for (const ListenAddress& a : s->listeners_) {
      nf::DiscoveryLogEntry e{};
      const Transport* t = transport(a.trtype);
      e.trtype = t ? t->limits().discovery_trtype : nf::trtype::kTcp;
      e.adrfam = lower(a.adrfam) == "ipv6" ? nf::adrfam::kIpv6 : nf::adrfam::kIpv4;
      e.subtype = nf::subtype::kNvm;
      // No secure channel (TLS) is offered, none asked for; SQ flow control may be turned off.
      e.treq = nf::treq::kSecureChannelNotSpecified | nf::treq::kSqFlowControlDisableSupported;
      auto pid = port_ids_.find(a.to_string());
      e.portid = pid == port_ids_.end() ? 0 : pid->second;
      e.cntlid = nf::connect::kCntlidDynamic;
      e.asqsz = static_cast<uint16_t>(t ? t->limits().max_aq_depth : 32);
      space_pad(e.trsvcid, sizeof e.trsvcid, a.trsvcid);
      std::memcpy(e.subnqn, s->nqn().data(), std::min(s->nqn().size(), sizeof e.subnqn - 1));
      space_pad(e.traddr, sizeof e.traddr, a.traddr);
      if (e.trtype == nf::trtype::kRdma) {
        e.tsas[0] = nf::tsas::kRdmaQptypeConnected;
        e.tsas[1] = nf::tsas::kRdmaPrtypeRoceV2;
        e.tsas[2] = nf::tsas::kRdmaCmsRdmaCm;
      } else {
        e.tsas[0] = nf::tsas::kSectypeNone;
      }
      entries.push_back(e);
    }
  }
  std::vector<uint8_t> page(sizeof(nf::DiscoveryLogHeader) +
                            entries.size() * sizeof(nf::DiscoveryLogEntry));
  nf::DiscoveryLogHeader h{};
  h.genctr = genctr_;
  h.numrec = entries.size();
  h.recfmt = 0;
  std::memcpy(page.data(), &h, sizeof h);
  if (!entries.empty())
    std::memcpy(page.data() + sizeof h, entries.data(),
                entries.size() * sizeof(nf::DiscoveryLogEntry));
  return page;
}

// ---------------------------------------------------------------------- stop ---

void Target::stop(std::function<void()> done) {
  stopping_ = true;
  for (const auto& [a, n] : listening_)
    if (Transport* t = transport(a.trtype)) t->stop_listening(a);
  listening_.clear();
  // Every queue pair ends (an admin queue's end ends its controller, which waits for its I/O
  // queues in other groups): first tell every group, then wait for each to be empty.
  for_each_group(
      [](PollGroup& g, std::function<void()> next) {
        for (Qpair* q : g.qpairs()) q->disconnect();
        next();
      },
      nullptr);
  for_each_group([](PollGroup& g, std::function<void()> next) { g.when_empty(std::move(next)); },
                 [this, done = std::move(done)] {
                   // Then the transports' group state and every namespace channel go.
                   std::vector<Transport*> ts = transports();
                   bdev::Manager* mgr = &bdevs_;
                   for_each_group(
                       [ts, mgr](PollGroup& g, std::function<void()> next) {
                         for (Transport* t : ts) t->remove_group(g);
                         for (uint32_t slot = 0; slot < g.subsystem_slots(); ++slot) {
                           PgSubsystem* sub = g.subsystem(slot);
                           if (sub == nullptr) continue;
                           for (PgNamespace& n : sub->ns) {
                             if (n.ch != nullptr) mgr->put_io_channel(n.ch);
                             n = PgNamespace{};
                           }
                           g.remove_subsystem(slot);
                         }
                         next();
                       },
                       [this, done] {
                         for (auto& s : subsystems_) {
                           if (!s) continue;
                           for (auto& [nsid, ns] : s->ns_) bdevs_.close(ns.desc);
                           s->ns_.clear();
                         }
                         ns_ctx_.clear();
                         if (done) done();
                       });
                 });
}

}  // namespace pollux::fabric::target
