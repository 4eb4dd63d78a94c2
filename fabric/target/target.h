// The NVMe-oF target's core, transport-independent (after SPDK's lib/nvmf): subsystems with
// their namespaces (bdevs), allowed hosts and listeners, the discovery subsystem, poll groups
// (one lightweight thread per reactor), transports, and the routing of Connect commands.
//
// Threading: the Target object and its subsystems belong to the target thread (the thread that
// created it: the application's). Poll groups own queue pairs and controllers; they learn about
// subsystem changes by messages, walked across the groups in index order (so two changes reach
// every group in the order they were made). A change completes asynchronously: when_settled()
// runs its callback once every change made so far has reached every group.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/event/framework.h"
#include "fabric/target/auth.h"
#include "fabric/target/poll_group.h"
#include "fabric/target/transport.h"
#include "fabric/target/types.h"

namespace pollux::fabric::target {

struct SubsystemOptions {
  std::string nqn;
  std::string serial = "POLLUX00000000000001";
  std::string model = "Pollux bdev Controller";
  uint32_t max_namespaces = 32;
  bool allow_any_host = false;
  uint16_t min_cntlid = 1;
  uint16_t max_cntlid = nf::connect::kCntlidMax;
  // Keep Alive granularity (Identify KAS, 100 ms units; 10 = 1 s, as SPDK and Linux's nvmet):
  // a Connect's KATO is rounded up to it.
  uint16_t kas = 10;
  // Command Quiesce Time (Identify CQT, ms; 0: not reported): after a controller's keep-alive
  // timeout, the longest one of its commands may still take effect — the target's own
  // detection slack plus what its bdevs may hold (a drive's command timeout and reset). A host
  // waits KATO + CQT before sending a lost association's writes again.
  uint16_t cqt_ms = 0;
};

struct NamespaceOptions {
  std::string bdev_name;
  uint32_t nsid = 0;  // 0: the lowest free one
  // Unset: the UUID is the bdev's (when it has one) or a random one; NGUID and EUI64 none.
  std::optional<std::array<uint8_t, 16>> uuid, nguid;
  std::optional<std::array<uint8_t, 8>> eui64;
};

struct NamespaceInfo {
  uint32_t nsid = 0;
  std::string bdev_name;
  NamespaceIds ids;
  bool removing = false;
};

// What the target thread knows of a controller (the object itself lives on its group's thread).
struct ControllerInfo {
  PollGroup* group = nullptr;
  uint64_t id = 0;
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
};

struct NsEventCtx;

class Subsystem {
 public:
  uint32_t slot() const { return slot_; }
  const SubsystemOptions& options() const { return opts_; }
  const std::string& nqn() const { return opts_.nqn; }
  bool discovery() const { return discovery_; }
  bool allow_any_host() const { return opts_.allow_any_host; }
  const std::set<std::string>& hosts() const { return hosts_; }
  const std::vector<ListenAddress>& listeners() const { return listeners_; }
  const std::map<uint16_t, ControllerInfo>& controllers() const { return ctrls_; }
  std::vector<NamespaceInfo> namespaces() const;
  bool host_allowed(const std::string& hostnqn) const {
    return discovery_ || opts_.allow_any_host || hosts_.count(hostnqn) != 0;
  }
  // The host's DH-HMAC-CHAP keys here (nullptr: none; it need not authenticate).
  const HostKeys* host_keys(const std::string& hostnqn) const {
    auto it = host_keys_.find(hostnqn);
    return it == host_keys_.end() ? nullptr : &it->second;
  }

 private:
  friend class Target;
  struct Ns {
    NamespaceInfo info;
    bdev::Desc* desc = nullptr;
  };
  uint32_t slot_ = 0;
  SubsystemOptions opts_;
  bool discovery_ = false;
  std::set<std::string> hosts_;
  std::map<std::string, HostKeys> host_keys_;
  std::vector<ListenAddress> listeners_;
  std::map<uint32_t, Ns> ns_;
  std::map<uint16_t, ControllerInfo> ctrls_;
  uint16_t next_cntlid_ = 1;
  bool deleting_ = false;
  bool dropping_ = false;  // deleted: its groups' state is going
};

class Target {
 public:
  // On a framework thread (it becomes the target thread): one poll group per reactor.
  static Result<std::unique_ptr<Target>> create(event::Framework& fw, bdev::Manager& bdevs);
  ~Target();
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  event::Framework& framework() const { return fw_; }
  bdev::Manager& bdevs() const { return bdevs_; }
  event::Thread* thread() const { return thread_; }
  const std::vector<std::unique_ptr<PollGroup>>& groups() const { return groups_; }
  // The group a new connection goes to: round robin, admin queues and I/O queues each in their
  // own turn (as SPDK's RDMA transport schedules them), so hosts that each open an admin and
  // an I/O queue do not put every I/O queue on the same group. A transport that cannot tell
  // which it is (TCP: only the Connect after the connection names the queue) asks for I/O.
  PollGroup& next_group(bool admin = false);

  // ---- target thread
  Status add_transport(std::unique_ptr<Transport> t);
  // Any thread (a metrics scrape): transports are published once and never removed.
  Transport* transport(const std::string& trtype) const;  // case-insensitive
  std::vector<Transport*> transports() const;
  static constexpr std::size_t kMaxTransports = 4;

  Result<Subsystem*> create_subsystem(const SubsystemOptions& o);
  // Disconnects its controllers, removes its namespaces and listeners.
  Status delete_subsystem(const std::string& nqn);
  Subsystem* find(const std::string& nqn) const;
  Subsystem* discovery_subsystem() const { return subsystems_.at(0).get(); }
  std::vector<Subsystem*> subsystems() const;  // the discovery subsystem first

  Result<uint32_t> add_namespace(const std::string& nqn, const NamespaceOptions& o);
  Status remove_namespace(const std::string& nqn, uint32_t nsid);
  // With keys.key: the host must authenticate (DH-HMAC-CHAP) on every queue it connects from
  // then on; keys.ctrlr_key (needs keys.key): the controller proves itself when asked. A host
  // of a subsystem that allows any host may still be added for its keys.
  Status add_host(const std::string& nqn, const std::string& hostnqn, HostKeys keys = {});
  Status remove_host(const std::string& nqn, const std::string& hostnqn);
  Status set_allow_any_host(const std::string& nqn, bool allow);
  // What every controller may negotiate from now on (nvmf_set_config's dhchap_digests and
  // dhchap_dhgroups). Empty lists are refused.
  Status set_auth_options(const AuthOptions& o);
  const AuthOptions& auth_options() const { return auth_options_; }
  Status add_listener(const std::string& nqn, const ListenAddress& a);
  // How a listener was asked for: port "0" (any) for one bound to whatever port was free, so a
  // saved configuration binds afresh (the old port may be taken by then); else as it is.
  ListenAddress as_configured(const ListenAddress& bound) const;
  Status remove_listener(const std::string& nqn, const ListenAddress& a);

  // fn runs on the target thread once every change made so far has reached every group.
  void when_settled(std::function<void()> fn);
  // Runs step on every group in index order (step calls next() when done, on the group's
  // thread), then done on the target thread. Counted for when_settled().
  using Step = std::function<void(PollGroup& g, std::function<void()> next)>;
  void for_each_group(Step step, std::function<void()> done);
  // Ends every association, removes every subsystem, stops the transports' groups; done()
  // runs on the target thread when all is gone.
  void stop(std::function<void()> done);
  bool stopping() const { return stopping_; }

  // The discovery log page as `hostnqn` may see it: header and entries.
  std::vector<uint8_t> discovery_log(const std::string& hostnqn) const;
  uint64_t discovery_genctr() const { return genctr_; }

  // ---- any thread
  // Runs fn on thread t (a heap closure: control paths only). false: t has exited, fn dropped.
  bool run_on(event::Thread* t, std::function<void()> fn) const;

  // ---- internal (the Connect path)
  struct ConnectOp;
  void route_connect(ConnectOp* op);  // target thread
  void controller_gone(uint32_t slot, uint16_t cntlid, uint64_t id);

 private:
  Target(event::Framework& fw, bdev::Manager& bdevs, event::Thread* thread);
  void walk(std::shared_ptr<struct Walk> w);
  void settle_one();
  void notify_changed(uint32_t slot, uint32_t nsid);
  void notify_discovery();
  void remove_namespace_entry(Subsystem& s, uint32_t nsid, std::function<void()> then);
  static void on_bdev_event(bdev::DescEvent e, bdev::Bdev& b, void* ctx);
  void bump_genctr();

  event::Framework& fw_;
  bdev::Manager& bdevs_;
  event::Thread* thread_;
  std::vector<std::unique_ptr<PollGroup>> groups_;
  std::vector<event::Thread*> group_threads_;
  uint32_t next_admin_group_ = 0, next_io_group_ = 0;
  std::vector<std::unique_ptr<Transport>> transports_;  // capacity kMaxTransports: no realloc
  std::atomic<std::size_t> published_transports_{0};
  std::vector<std::unique_ptr<Subsystem>> subsystems_;    // by slot; null: a free slot
  std::vector<std::pair<ListenAddress, int>> listening_;  // address, subsystems using it
  std::map<std::string, ListenAddress> any_port_;  // an address with port "0" -> as bound
  std::map<std::string, uint16_t> port_ids_;              // discovery log PORTID by address
  std::vector<std::unique_ptr<NsEventCtx>> ns_ctx_;       // bdev event contexts
  uint64_t genctr_ = 0;
  AuthOptions auth_options_;
  uint64_t unsettled_ = 0;
  std::vector<std::function<void()>> settled_waiters_;
  bool stopping_ = false;
};

// "Aa-bb..." / 32 hex digits into 16 bytes (UUIDs may carry dashes). false on bad text.
bool parse_hex_id(const std::string& text, uint8_t* out, std::size_t n);
std::string format_uuid(const std::array<uint8_t, 16>& u);
std::string format_hex(const uint8_t* p, std::size_t n);

}  // namespace pollux::fabric::target
