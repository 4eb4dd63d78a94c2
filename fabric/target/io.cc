// NVM commands on I/O queues, mapped to the bdev layer: Read, Write (FUA: a flush after the
// write when the bdev caches writes), Compare, Flush, Write Zeroes, Dataset Management
// (deallocate: one unmap per range). Hot path: the namespace comes from this poll group's
// table, the bdev channel is this thread's; no lock, no allocation.
#include <cstring>
#include <memory>

#include "fabric/target/controller.h"
#include "fabric/target/internal.h"
#include "fabric/target/poll_group.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target {

namespace {

namespace nvm = sn::nvm;

uint16_t status_of(const bdev::BdevIo& io) {
  switch (io.status()) {
    case bdev::IoStatus::kSuccess:
      return kSuccess;
    case bdev::IoStatus::kNvmeError:
      return io.nvme_status() & 0xfffe;
    case bdev::IoStatus::kMiscompare:
      return status(sn::sct::kMediaError, sn::sc_media::kCompareFailure);
    case bdev::IoStatus::kAborted:
      return generic(sn::sc::kAbortedByRequest);
    case bdev::IoStatus::kRemoved:
      // The bdev went away under the command: the namespace is going too.
      return generic(sn::sc::kInvalidNamespaceOrFormat);
    default:
      return status(sn::sct::kGeneric, sn::sc::kInternalError, false);
  }
}

void link(Request& r) {
  Qpair& q = *r.qpair;
  r.io_prev = nullptr;
  r.io_next = q.io_head;
  if (q.io_head) q.io_head->io_prev = &r;
  q.io_head = &r;
}

void unlink(Request& r) {
  if (r.io_prev == nullptr && r.qpair->io_head != &r) return;  // not in the list
  (r.io_prev ? r.io_prev->io_next : r.qpair->io_head) = r.io_next;
  if (r.io_next) r.io_next->io_prev = r.io_prev;
  r.io_prev = r.io_next = nullptr;
}

void io_finish(Request& r, uint16_t st) {
  PgNamespace* ns = r.ns;
  r.ns = nullptr;
  unlink(r);
  if (r.abort_reply != nullptr) [[unlikely]] {
    std::unique_ptr<AbortReply> reply(r.abort_reply);
    r.abort_reply = nullptr;
    reply->send(st == generic(sn::sc::kAbortedByRequest));
  }
  PollGroupStats& s = r.qpair->group().stats();
  --s.pending_bdev_io;
  ++s.completed_nvme_io;
  if (st != kSuccess) ++s.io_errors;
  if (--ns->outstanding == 0 && ns->drained) {
    auto fn = std::move(ns->drained);
    ns->drained = nullptr;
    finish(r, st);
    fn();
    return;
  }
  finish(r, st);
}

void on_flush_after_write(bdev::BdevIo& io, bool, void* arg) {
  io_finish(*static_cast<Request*>(arg), status_of(io));
}

void on_done(bdev::BdevIo& io, bool ok, void* arg) {
  Request& r = *static_cast<Request*>(arg);
  if (ok && r.cmd.opcode == nvm::kWrite && (r.cmd.cdw12 & nvm::kCdw12Fua) && r.ns->write_cache &&
      r.ns->can_flush && r.qpair->state != Qpair::State::kClosing) {
    // Force Unit Access on a bdev that caches writes: the write is durable once flushed.
    const int rc = r.qpair->group().bdevs().flush(r.ns->desc, r.ns->ch, r.cmd.slba(), r.cmd.nlb(),
                                                  on_flush_after_write, &r);
    if (rc == 0) return;
    io_finish(r, status(sn::sct::kGeneric, sn::sc::kInternalError, false));
    return;
  }
  io_finish(r, status_of(io));
}

// Dataset Management: one unmap per range; the command ends with the last.
void on_unmap_done(bdev::BdevIo& io, bool ok, void* arg) {
  Request& r = *static_cast<Request*>(arg);
  if (!ok && r.first_error == 0) r.first_error = status_of(io);
  if (--r.pending == 0) io_finish(r, r.first_error);
}

// 0: submitted; else the status to complete with; -ENOMEM is kRetry.
constexpr uint16_t kRetry = 0xffff;

uint16_t map_rc(int rc) {
  if (rc == -ENOMEM) return kRetry;
  if (rc == -ENOTSUP) return generic(sn::sc::kInvalidOpcode);
  if (rc == -EBADF) return generic(sn::sc::kNamespaceWriteProtected);
  return generic(sn::sc::kInvalidField);
}

uint16_t submit(Request& r) {
  PgNamespace& ns = *r.ns;
  bdev::Manager& mgr = r.qpair->group().bdevs();
  const sn::SubmissionEntry& c = r.cmd;
  switch (c.opcode) {
    case nvm::kRead:
    case nvm::kWrite:
    case nvm::kCompare: {
      int rc;
      if (c.opcode == nvm::kRead) {
        rc = mgr.read(ns.desc, ns.ch, r.data, c.slba(), c.nlb(), on_done, &r);
      } else if (c.opcode == nvm::kWrite) {
        rc = mgr.write(ns.desc, ns.ch, r.data, c.slba(), c.nlb(), on_done, &r);
      } else {
        if (!ns.can_compare) return generic(sn::sc::kInvalidOpcode);
        rc = mgr.compare(ns.desc, ns.ch, r.data, c.slba(), c.nlb(), on_done, &r);
      }
      return rc == 0 ? kSuccess : map_rc(rc);
    }
    case nvm::kFlush: {
      const int rc = mgr.flush(ns.desc, ns.ch, 0, ns.num_blocks, on_done, &r);
      return rc == 0 ? kSuccess : map_rc(rc);
    }
    case nvm::kWriteZeroes: {
      const int rc = mgr.write_zeroes(ns.desc, ns.ch, c.slba(), c.nlb(), on_done, &r);
      return rc == 0 ? kSuccess : map_rc(rc);
    }
    case nvm::kDatasetManagement: {
      // Ranges already checked; r.pending counts the unmaps still to submit and outstanding.
      const uint32_t nr = (c.cdw10 & 0xff) + 1;
      const auto* ranges = static_cast<const nvm::DsmRange*>(r.data);
      // Submitted in order; a retry continues at the first range not yet submitted.
      uint32_t next = r.cursor;
      while (next < nr) {
        nvm::DsmRange d;
        std::memcpy(&d, &ranges[next], sizeof d);
        if (d.length != 0) {
          const int rc = mgr.unmap(ns.desc, ns.ch, d.slba, d.length, on_unmap_done, &r);
          if (rc == -ENOMEM) {
            r.cursor = next;
            return kRetry;
          }
          if (rc != 0) {
            if (r.first_error == 0) r.first_error = map_rc(rc);
          } else {
            ++r.pending;
          }
        }
        ++next;
      }
      r.cursor = next;
      // The submitter's own count drops: the command ends with the last unmap (or now).
      if (--r.pending == 0) io_finish(r, r.first_error);
      return kSuccess;
    }
    default:
      return generic(sn::sc::kInvalidOpcode);
  }
}

void start(Request& r) {
  // A retry (the bdev layer was out of bdev_ios) of a queue that has closed since. Dataset
  // Management may have unmaps out already: only the submitter's own count drops (submit()).
  // ... or one an Abort command named while it waited: it ends aborted, never submitted.
  if (r.qpair->state == Qpair::State::kClosing || r.abort_reply != nullptr) [[unlikely]] {
    const uint16_t st = r.abort_reply != nullptr ? generic(sn::sc::kAbortedByRequest)
                                                 : generic(sn::sc::kAbortedSqDeletion);
    if (r.cmd.opcode != nvm::kDatasetManagement) return io_finish(r, st);
    if (r.first_error == 0) r.first_error = st;
    if (--r.pending == 0) io_finish(r, r.first_error);
    return;
  }
  const uint16_t st = submit(r);
  if (st == kSuccess) return;
  if (st == kRetry) {
    r.qpair->group().retry_later(r);
    return;
  }
  io_finish(r, st);
}

bool range_ok(const PgNamespace& ns, uint64_t slba, uint64_t nlb) {
  return slba < ns.num_blocks && nlb <= ns.num_blocks - slba;
}

// The group has no bdev channel for ns (none could be had when the namespace was added: its
// device was being reset, say): try again, at most once a millisecond. Off the hot path.
bool has_channel(PgNamespace& ns, PollGroup& g) {
  if (ns.ch != nullptr) return true;
  const env::Clock& clock = g.bdevs().framework().clock();
  const uint64_t now = clock.now();
  if (now < ns.next_channel_try) return false;
  ns.ch = g.bdevs().get_io_channel(ns.desc);
  if (ns.ch == nullptr) ns.next_channel_try = now + clock.us_to_ticks(1000);
  return ns.ch != nullptr;
}

}  // namespace

void execute_io(Request& r) {
  const sn::SubmissionEntry& c = r.cmd;
  PgNamespace* ns = r.qpair->subsystem->active(c.nsid);
  if (ns == nullptr) return finish(r, generic(sn::sc::kInvalidNamespaceOrFormat));
  if (!has_channel(*ns, r.qpair->group())) [[unlikely]]
    return finish(r, status(sn::sct::kGeneric, sn::sc::kNamespaceNotReady, /*dnr=*/false));
  uint16_t st = kSuccess;
  switch (c.opcode) {
    case nvm::kRead:
    case nvm::kWrite:
    case nvm::kCompare: {
      if (!range_ok(*ns, c.slba(), c.nlb())) {
        st = generic(sn::sc::kLbaOutOfRange);
      } else if ((uint64_t{c.nlb()} << ns->block_shift) > r.length || r.data == nullptr) {
        st = generic(sn::sc::kDataSglLengthInvalid);
      }
      break;
    }
    case nvm::kFlush:
      if (!ns->can_flush) return finish(r, kSuccess);  // nothing cached: nothing to flush
      break;
    case nvm::kWriteZeroes:
      if (!ns->can_write_zeroes) {
        st = generic(sn::sc::kInvalidOpcode);
      } else if (!range_ok(*ns, c.slba(), c.nlb())) {
        st = generic(sn::sc::kLbaOutOfRange);
      }
      break;
    case nvm::kDatasetManagement: {
      const uint32_t nr = (c.cdw10 & 0xff) + 1;
      if (uint64_t{nr} * sizeof(nvm::DsmRange) > r.length || r.data == nullptr) {
        st = generic(sn::sc::kDataSglLengthInvalid);
        break;
      }
      if (!(c.cdw11 & nvm::kDsmDeallocate)) return finish(r, kSuccess);  // hints only
      if (!ns->can_unmap) return finish(r, kSuccess);                    // deallocation is advisory
      const auto* ranges = static_cast<const nvm::DsmRange*>(r.data);
      for (uint32_t i = 0; i < nr && st == kSuccess; ++i) {
        nvm::DsmRange d;
        std::memcpy(&d, &ranges[i], sizeof d);
        if (d.length != 0 && !range_ok(*ns, d.slba, d.length)) st = generic(sn::sc::kLbaOutOfRange);
      }
      r.pending = 1;  // the submitter's own count (see submit)
      r.first_error = 0;
      r.cursor = 0;
      break;
    }
    default:
      st = generic(sn::sc::kInvalidOpcode);
  }
  if (st != kSuccess) return finish(r, st);
  r.ns = ns;
  link(r);
  ++ns->outstanding;
  ++r.qpair->group().stats().pending_bdev_io;
  start(r);
}

void resubmit_io(Request& r) {
  start(r);
}

void abort_io(Qpair& q) {
  bdev::Manager& mgr = q.group().bdevs();
  // Completions never run inside Manager::abort, so the list holds still while walked.
  for (Request* r = q.io_head; r != nullptr; r = r->io_next) mgr.abort(r->ns->desc, r->ns->ch, r);
}

void abort_command(PollGroup& g, uint64_t qpair_id, uint16_t cid, const AbortReply& reply) {
  Qpair* q = g.qpair(qpair_id);
  Request* r = nullptr;
  for (Request* x = q != nullptr ? q->io_head : nullptr; x != nullptr && r == nullptr; x = x->io_next)
    if (x->cmd.cid == cid && x->abort_reply == nullptr) r = x;
  if (r == nullptr) return reply.send(false);  // completed already, or never an I/O in flight
  r->abort_reply = new AbortReply(reply);  // an Abort is rare: off the I/O path
  // Waiting in the bdev layer: it ends aborted; in the module: the module decides (bdev_nvme
  // never retries it; one the device holds completes as the device completes it).
  g.bdevs().abort(r->ns->desc, r->ns->ch, r);
}

void AbortReply::send(bool aborted) const {
  PollGroup* g = admin_group;
  g->target().run_on(g->thread(), [g, id = ctrlr_id, token = token, aborted] {
    if (Controller* c = g->controller(id)) c->abort_answered(token, aborted);
  });
}

}  // namespace pollux::fabric::target
