// The controller's timed-layering entry points: the same steps poll() takes, one at a time,
// for a timing model that decides when each happens (see controller.h).
#include <algorithm>
#include <cstring>

#include "emulator/nvme/controller.h"
#include "emulator/nvme/controller_internal.h"

namespace pollux::emu::nvme {

void Controller::power_cycle() {
  subsystem_reset();
  csts_ = 0;  // not an NVM Subsystem Reset: a power-on
  removed_ = false;
  journal_.clear();
}

void Controller::service() {
  if (removed_) return;
  if (ready_countdown_) {
    count_down_to_ready();
    return;
  }
  if ((csts_ & (sp::csts::kRdy | sp::csts::kCfs)) != sp::csts::kRdy) return;
  ++poll_gen_;
  for (uint16_t cqid : active_cqs_) update_cq_head(cqs_[cqid]);
  fire_interrupts();
}

bool Controller::service_if_quiet() {
  if (removed_) return true;
  if (ready_countdown_) return false;
  if ((csts_ & (sp::csts::kRdy | sp::csts::kCfs)) != sp::csts::kRdy) return true;
  for (uint16_t cqid : active_cqs_) {
    const Cq& cq = cqs_[cqid];
    if (db_[cq_db_index(cqid)] != cq.last_db || !cq.overflow.empty() || cq.irq_pending) {
      return false;
    }
  }
  ++poll_gen_;  // as service() does
  return true;
}

Controller::Fetch Controller::fetch(uint16_t sqid, sp::SubmissionEntry* sqe) {
  if (removed_) return Fetch::kUnavailable;
  if ((csts_ & (sp::csts::kRdy | sp::csts::kCfs)) != sp::csts::kRdy) return Fetch::kUnavailable;
  if (sqid >= sqs_.size() || !sqs_[sqid].exists) return Fetch::kUnavailable;
  Sq& sq = sqs_[sqid];
  if (!refresh_sq_tail(sq) || sq.head == sq.tail) return Fetch::kEmpty;
  Cq& cq = cqs_[sq.cqid];
  if (cq_free(cq) == 0) {
    ++counters_.cq_full_stalls;
    return Fetch::kCqFull;
  }
  ++poll_gen_;  // translate afresh: the host may have remapped memory since the last step
  auto* ring = reinterpret_cast<sp::SubmissionEntry*>(
      dma_.translate(sq.base, size_t{sq.size} * sizeof(sp::SubmissionEntry)));
  if (ring == nullptr) {
    ++counters_.iommu_faults;
    set_fatal();
    return Fetch::kUnavailable;
  }
  std::memcpy(sqe, &ring[sq.head], sizeof *sqe);
  sq.head = sq.head + 1 == sq.size ? 0 : sq.head + 1;
  ++cq.reserved;
  if (sq.n_aborts && take_abort(sq, sqe->cid)) {
    ++counters_.aborted_commands;
    const sp::CompletionEntry cqe{0, 0, 0, sq.qid, sqe->cid,
                                  sp::status::make(sp::sct::kGeneric, sp::sc::kAbortedByRequest)};
    ++counters_.failed_commands;
    log_error(sq.qid, sqe->cid, cqe.status, sqe->nsid);
    post(cq, cqe, true);
    fire_interrupts();
    return Fetch::kAborted;
  }
  return Fetch::kFetched;
}

void Controller::complete_fetched(uint16_t sqid, const sp::CompletionEntry& cqe) {
  if (sqid >= sqs_.size()) return;
  // The SQ may have been deleted after the command executed: the command took effect, so its
  // entry still goes to the CQ the SQ was bound to, into the slot fetch() reserved there
  // (ahead of the Delete's own entry). Only a deleted CQ drops it.
  Cq& cq = cqs_[sqs_[sqid].cqid];
  if (!cq.exists) return;
  ++poll_gen_;
  sp::CompletionEntry c = cqe;
  c.sqid = sqid;
  post(cq, c, true);
  fire_interrupts();
}

void Controller::release_fetched(uint16_t sqid) {
  if (sqid >= sqs_.size() || !sqs_[sqid].exists) return;
  Cq& cq = cqs_[sqs_[sqid].cqid];
  if (cq.reserved) --cq.reserved;
}

void Controller::journal(uint32_t nsid, uint64_t offset, uint64_t len) {
  NamespaceStore* store = namespace_store(nsid);
  last_write_id_ = next_write_id_++;
  if (store == nullptr) return;
  JournalEntry e{last_write_id_, nsid, offset, std::vector<uint8_t>(len)};
  if (!store->read(offset, e.old.data(), len)) return;
  journal_.push_back(std::move(e));
}

void Controller::mark_durable(uint64_t id) {
  // Usually the oldest: writes reach the media in about the order they were cached.
  for (size_t i = 0; i < journal_.size(); ++i) {
    if (journal_[i].id == id) {
      journal_.erase(journal_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::vector<uint64_t> Controller::power_loss() {
  std::vector<uint64_t> lost;
  for (auto it = journal_.rbegin(); it != journal_.rend(); ++it) {
    if (NamespaceStore* store = namespace_store(it->nsid)) {
      (void)store->write(it->offset, it->old.data(), it->old.size());
    }
    lost.push_back(it->id);
  }
  journal_.clear();
  std::reverse(lost.begin(), lost.end());
  inject_spontaneous_disable();  // counts the unsafe shutdown
  return lost;
}

uint32_t Controller::queue_slots() const { return static_cast<uint32_t>(sqs_.size()); }

Controller::QueueState Controller::sq_state(uint16_t qid) const {
  if (qid >= sqs_.size() || !sqs_[qid].exists) return {};
  const Sq& sq = sqs_[qid];
  return QueueState{true, sq.size, sq.cqid, sq.prio, sq.head, sq.tail};
}

Controller::QueueState Controller::cq_state(uint16_t qid) const {
  if (qid >= cqs_.size() || !cqs_[qid].exists) return {};
  const Cq& cq = cqs_[qid];
  return QueueState{true, cq.size, 0, 0, cq.head, cq.tail};
}

}  // namespace pollux::emu::nvme
