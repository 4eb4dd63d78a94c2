// The seam between the target's core and a transport: a queue pair (one connection on TCP) and
// the requests on it. The transport owns both: it parses capsules into Requests, gives each to
// the core (execute()) once its data is in (host-to-controller) or its buffer is ready
// (controller-to-host), and sends what the core completes. The core never allocates per
// command: a Request carries the scratch it needs.
//
// Threading: a queue pair lives on one poll group's thread; every call below is made there.
#pragma once

#include <cstdint>
#include <string>

#include "fabric/target/types.h"

namespace pollux::fabric::target {

class Controller;
class PollGroup;
class Qpair;
class Transport;
struct PgNamespace;
struct QpairAuth;
struct PgSubsystem;
struct AbortReply;

// Data direction of a command: opcode bits 1:0, or a fabrics command's FCTYPE bits 1:0.
enum class Xfer : uint8_t { kNone, kHostToController, kControllerToHost, kBidirectional };
Xfer xfer_of(const sn::SubmissionEntry& cmd);

struct Request {
  Qpair* qpair = nullptr;
  sn::SubmissionEntry cmd{};
  sn::CompletionEntry rsp{};
  // The command's data: `length` bytes (the SGL's length; for a controller-to-host command the
  // core may lower it to what it produced). In-capsule data or a transport buffer.
  void* data = nullptr;
  uint32_t length = 0;
  Xfer xfer = Xfer::kNone;
  // Core scratch.
  PgNamespace* ns = nullptr;  // an I/O command counted in its namespace's outstanding I/O
  uint32_t pending = 0;       // bdev I/Os still outstanding (Dataset Management, FUA flush)
  uint16_t first_error = 0;   // of those, the first failure
  uint32_t cursor = 0;        // Dataset Management: the next range to submit
  Request* next = nullptr;    // core lists: AERs held, I/O waiting for a bdev_io
  Request* io_prev = nullptr;  // the queue's list of I/O commands in the bdev layer
  Request* io_next = nullptr;
  // An Abort command of the controller names this I/O command: told how it ended (io.cc).
  AbortReply* abort_reply = nullptr;
};

class Qpair {
 public:
  enum class State : uint8_t {
    kAwaitingConnect,  // only a Connect is accepted
    kConnecting,       // its Connect is with the target/controller threads
    kAuthenticating,   // connected, must authenticate (auth.h): only Authentication Send/Receive
    kActive,
    kClosing,  // the transport is ending it
  };

  Qpair(PollGroup& group, Transport& transport);
  virtual ~Qpair();
  Qpair(const Qpair&) = delete;
  Qpair& operator=(const Qpair&) = delete;

  // ---- core -> transport
  // The command is done (rsp holds its status): send the response and any C2H data.
  virtual void complete(Request& r) = 0;
  // End this queue: the transport stops taking commands, lets the outstanding ones finish,
  // then calls qpair_closed() and deletes it. Idempotent.
  virtual void disconnect() = 0;
  // Connect has sized the queue (SQSIZE + 1 entries; qid 0: the admin queue): the transport
  // prepares its per-queue state. false: out of memory (the Connect fails).
  virtual bool prepare(uint16_t qid, uint32_t entries) = 0;
  // The listener the connection came in on (subsystems admit hosts per listener).
  virtual const ListenAddress& listen_address() const = 0;
  virtual std::string peer() const = 0;

  PollGroup& group() const { return group_; }
  Transport& transport() const { return transport_; }
  uint64_t id() const { return id_; }
  bool is_admin() const { return qid == 0; }

  // ---- state the core keeps (the transport reads sq_flow_control and advances sq_head)
  State state = State::kAwaitingConnect;
  uint16_t qid = 0;
  uint32_t entries = 0;         // SQSIZE + 1
  bool sq_flow_control = true;  // CATTR bit 2 clear: CQEs report the SQ head
  // Commands completed, modulo entries: an SQ entry is held until its command completes (as
  // SPDK's target does), so a host that follows SQHD — or, without SQ flow control, counts
  // completions — never has more commands outstanding than the queue has entries, and a
  // transport can hold one request per entry.
  uint16_t sq_head = 0;
  uint16_t cntlid = 0;
  uint32_t subsystem_slot = 0;
  Controller* ctrlr = nullptr;       // admin queue: its controller, on this thread
  PollGroup* ctrlr_group = nullptr;  // I/O queue: where its controller lives ...
  uint64_t ctrlr_id = 0;             // ... and its id there
  PgSubsystem* subsystem = nullptr;  // this poll group's view of the subsystem
  QpairAuth* auth = nullptr;         // DH-HMAC-CHAP state (auth.cc): a host with a key only
  Request* io_head = nullptr;        // I/O commands in the bdev layer (aborted when it closes)

 private:
  PollGroup& group_;
  Transport& transport_;
  uint64_t id_;
};

// ---- transport -> core (the queue's thread)
// A command whose data is in place: runs it, and eventually calls q.complete(r).
void execute(Request& r);
// The transport starts closing q: the core gives back requests it holds with no end in sight
// (Asynchronous Event Requests), completing them; the transport drops their responses. Its
// I/O commands are aborted in the bdev layer: none is issued to a device again (a retry after
// the device's reset would land after whatever the host, reconnected, has written since).
void qpair_closing(Qpair& q);
// q has no request outstanding and is about to be deleted: the core detaches it from its
// controller (an admin queue ends its association).
void qpair_closed(Qpair& q);

}  // namespace pollux::fabric::target
