// A controller of the target (dynamic model): created by an admin queue's Connect, it lives on
// that queue's poll-group thread and owns everything controller-wide — properties (CAP, VS, CC,
// CSTS) and the CC.EN / CC.SHN state machine, features, the keep-alive timer, asynchronous
// events and the changed-namespace log, the admin command set. Its I/O queues run on their own
// poll groups' threads; the controller talks to them only by messages, naming each by
// (group, queue pair id): a reset (CC.EN 1 -> 0), a shutdown or the end of the association
// disconnects them that way and waits until each has reported itself gone.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "driver/event/framework.h"
#include "fabric/target/poll_group.h"
#include "fabric/target/qpair.h"
#include "fabric/target/types.h"

namespace pollux::fabric::target {

class Target;

// What a controller is given at its creation (copied from the subsystem and the Connect).
struct ControllerConfig {
  uint64_t id = 0;
  uint16_t cntlid = 0;
  uint32_t slot = 0;  // the subsystem's slot in every PollGroup
  std::string subnqn;
  bool discovery = false;
  std::string serial;
  std::string model;
  std::string firmware;
  uint32_t max_namespaces = 0;
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
  uint32_t kato_ms = 0;  // as asked for in Connect (rounded up to KAS units here)
  uint16_t kas = 10;     // SubsystemOptions::kas
  uint16_t cqt_ms = 0;   // SubsystemOptions::cqt_ms
  TransportLimits limits;
};

class Controller {
 public:
  static constexpr uint32_t kDiscoveryKatoMs = 120'000;  // discovery without KATO
  static constexpr uint32_t kAerLimit = 4;               // AERL + 1
  static constexpr uint32_t kErrorLogEntries = 64;
  static constexpr uint32_t kChangedNsMax = 1024;

  Controller(PollGroup& group, ControllerConfig config);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  uint64_t id() const { return cfg_.id; }
  uint16_t cntlid() const { return cfg_.cntlid; }
  const ControllerConfig& config() const { return cfg_; }
  PollGroup& group() const { return group_; }
  uint32_t cc() const { return cc_; }
  uint32_t csts() const { return csts_; }
  uint64_t cap() const { return cap_; }
  uint32_t kato_ms() const { return kato_ms_; }
  uint32_t io_queues_granted() const { return io_queues_; }
  std::size_t io_queue_count() const { return io_qpairs_.size(); }
  std::size_t aers_outstanding() const { return aers_.size(); }

  // The admin queue connected: the association starts (keep-alive timer on).
  void attach_admin(Qpair& admin);
  // A command on the admin queue (admin and fabrics commands).
  void execute(Request& r);
  // The admin queue is closing: held AERs end. Then admin_gone(): the association ends.
  void release_held(Qpair& admin);
  // An I/O queue's thread says how the command an Abort named ended (AbortReply).
  void abort_answered(uint64_t token, bool aborted);
  void admin_gone();

  // An I/O queue's Connect reached this controller. Returns a status (0: joined).
  uint16_t join_io(uint16_t qid, PollGroup* group, uint64_t qpair_id, uint32_t entries);
  // An I/O queue has gone (its connection closed, or it was disconnected).
  void io_gone(uint16_t qid, uint64_t qpair_id);

  // Namespace `nsid` appeared, went or changed: the changed-namespace log and an AEN.
  void namespace_changed(uint32_t nsid);
  // The discovery log changed (discovery controllers).
  void discovery_changed();
  // Ends the association: every queue disconnected (keep-alive expiry, subsystem deleted,
  // target stopping). The controller goes once its admin queue has.
  void disconnect_all(const char* why);

  // Records an admin command's failure in the error log (I/O queues' failures are counted per
  // poll group, not logged here: they happen on other threads).
  void log_error(const Request& r, uint16_t status);

 private:
  friend struct AdminCommands;
  static event::PollStatus keep_alive_poll(void* arg);
  void start_keep_alive();
  void stop_keep_alive();
  void set_kato(uint32_t ms);
  uint16_t property_get(Request& r);
  uint16_t property_set(Request& r);
  uint16_t set_cc(uint32_t value);
  // Disconnects every I/O queue; then() runs once all of them have reported themselves gone.
  void quiesce_io(std::function<void()> then);
  void check_quiesced();
  void complete_aer(uint32_t dw0);
  // Abort (SQID, CID in CDW10): the I/O command is given up in the bdev layer on its queue's
  // thread, and the Abort completes once it ends — CDW0 bit 0 clear if it ended aborted. An
  // admin command, or one not (or no longer) in flight: not aborted, at once. true: pending.
  bool start_abort(Request& r);
  void maybe_destroy();

  PollGroup& group_;
  ControllerConfig cfg_;
  Qpair* admin_ = nullptr;
  // Properties.
  uint64_t cap_ = 0;
  uint32_t vs_ = 0;
  uint32_t cc_ = 0;
  uint32_t csts_ = 0;
  // Features.
  uint32_t kato_ms_ = 0;
  uint32_t io_queues_ = 0;  // Number of Queues granted (both NSQA and NCQA), not 0's based
  bool io_queues_set_ = false;
  uint32_t aec_ = 0;
  uint32_t arbitration_ = 0, temp_threshold_ = 0, error_recovery_ = 0, wce_ = 1;
  uint32_t coalescing_ = 0, write_atomicity_ = 0;
  // Keep alive.
  event::Poller* kato_poller_ = nullptr;
  uint64_t last_keep_alive_ = 0;
  // Asynchronous events: AER commands held, events waiting for one, the masks of events
  // reported and not yet acknowledged by reading their log page.
  std::vector<Request*> aers_;
  std::deque<uint32_t> events_;
  bool ns_notice_masked_ = false;
  bool discovery_notice_masked_ = false;
  std::vector<uint32_t> changed_ns_;
  bool changed_ns_overflow_ = false;
  // Error log (a ring of the most recent entries).
  std::vector<sn::ErrorLogEntry> error_log_;
  uint64_t error_count_ = 0;
  // I/O queues by QID: where they live.
  struct IoQueueRef {
    PollGroup* group;
    uint64_t qpair_id;
  };
  std::map<uint16_t, IoQueueRef> io_qpairs_;
  // Aborts waiting for their command's end, by token (a late answer finds none).
  std::map<uint64_t, Request*> pending_aborts_;
  uint64_t abort_serial_ = 0;
  // CC.EN 1 -> 0 or CC.SHN: I/O queues are being disconnected; then() when they are gone.
  std::vector<std::function<void()>> quiesce_waiters_;
  bool quiescing_ = false;
  bool ending_ = false;  // the association is ending (admin queue disconnected or gone)
  bool admin_gone_ = false;
};

}  // namespace pollux::fabric::target
