// The core's own cross-file entry points (not for transports).
#pragma once

#include <memory>

#include "fabric/target/qpair.h"

namespace pollux::fabric::target {

// io.cc: an NVM command on an I/O queue; and the retry of one the bdev layer refused for lack
// of bdev_ios.
void execute_io(Request& r);
void resubmit_io(Request& r);
// q is closing: its I/O commands in the bdev layer are aborted there (qpair_closing).
void abort_io(Qpair& q);
// The Abort admin command (its controller's thread asked, by message, the I/O queue's thread):
// where the answer goes — the controller (by id, in the group of its admin queue) and which of
// its pending Aborts. send() posts it to that thread: aborted, or not.
class PollGroup;
struct AbortReply {
  PollGroup* admin_group = nullptr;
  uint64_t ctrlr_id = 0;
  uint64_t token = 0;
  void send(bool aborted) const;
};
// On the I/O queue's thread: the command `cid` of queue pair `qpair_id` is given up in the bdev
// layer (Manager::abort); the reply says whether it ended aborted. Not found: not aborted.
void abort_command(PollGroup& g, uint64_t qpair_id, uint16_t cid, const AbortReply& reply);
// fabrics.cc: a fabrics command (Connect on any queue; Disconnect on I/O queues).
void execute_fabrics(Request& r);
// auth.cc: Authentication Send/Receive on a queue; the queue's DH-HMAC-CHAP state starts at
// Connect (auth_begin: the queue waits in kAuthenticating) and goes with the queue.
struct AuthConfig;
void execute_auth(Request& r);
void auth_begin(Qpair& q, std::shared_ptr<const AuthConfig> cfg);
void auth_release(Qpair& q);
// Fills the CQE's CID, SQID, SQHD and status (DW0/DW1 as the handler left them) and hands the
// request back to its transport.
void finish(Request& r, uint16_t status);

}  // namespace pollux::fabric::target
