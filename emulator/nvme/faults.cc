#include "emulator/nvme/faults.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace pollux::emu::nvme {

namespace sp = ::pollux::spec::nvme;

Result<int> FaultInjector::add(const FaultRule& r) {
  if (!(r.probability >= 0.0 && r.probability <= 1.0)) {
    return Error{"fault rule: probability must be in [0, 1]"};
  }
  if (r.lba_lo > r.lba_hi) return Error{"fault rule: lba_lo is above lba_hi"};
  if (r.action == FaultAction::kStatus && (r.status & 0xfffe) == 0) {
    return Error{"fault rule: a status rule needs a non-zero status"};
  }
  if (r.opcode < -1 || r.opcode > 0xff) return Error{"fault rule: opcode must be 0..255 or -1 (any)"};
  if (r.admin && r.opcode < 0) return Error{"fault rule: an admin rule needs an opcode"};
  if (r.admin && r.action != FaultAction::kStatus && r.action != FaultAction::kNeverComplete) {
    return Error{std::string("fault rule: admin commands take status or never_complete, not ") +
                 to_string(r.action)};
  }
  rules_.push_back(Armed{next_id_, r});
  return next_id_++;
}

bool FaultInjector::remove(int id) {
  return std::erase_if(rules_, [id](const Armed& a) { return a.id == id; }) != 0;
}

std::optional<FaultHit> FaultInjector::match(const sp::SubmissionEntry& sqe, bool admin) {
  if (rules_.empty()) return std::nullopt;
  const bool ranged = !admin && sp::nvm::has_lba_range(sqe.opcode);
  const uint64_t slba = sqe.slba(), n = sqe.nlb();
  for (size_t i = 0; i < rules_.size(); ++i) {
    Armed& a = rules_[i];
    const FaultRule& r = a.rule;
    if (r.admin != admin) continue;
    if (r.opcode >= 0 && r.opcode != sqe.opcode) continue;
    if (r.nsid != 0 && r.nsid != sqe.nsid) continue;
    if (ranged && (slba > r.lba_hi || slba + n - 1 < r.lba_lo)) continue;
    if (r.probability < 1.0) {
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
      if (u >= r.probability) continue;
    }
    const FaultHit hit{r.action, static_cast<uint16_t>(r.status & 0xfffe), r.delay_ns, r.shift};
    ++hits_;
    ++hits_by_action_[static_cast<int>(r.action)];
    if (r.count != 0 && ++a.hits >= r.count) rules_.erase(rules_.begin() + static_cast<long>(i));
    return hit;
  }
  return std::nullopt;
}

const char* to_string(FaultAction a) {
  static const char* const kNames[kFaultActions] = {
      "status",      "never_complete", "delay",     "duplicate_completion",
      "unknown_cid", "stale_phase",    "drop_data", "misdirect"};
  return kNames[static_cast<int>(a)];
}

bool FaultInjector::has_bad_block(uint32_t nsid, uint64_t lba, uint64_t n,
                                  uint64_t* first) const {
  if (bad_.empty()) return false;
  auto it = bad_.lower_bound({nsid, lba});
  if (it == bad_.end() || it->first != nsid || it->second >= lba + n) return false;
  *first = it->second;
  return true;
}

void FaultInjector::heal(uint32_t nsid, uint64_t lba, uint64_t n) {
  if (bad_.empty()) return;
  bad_.erase(bad_.lower_bound({nsid, lba}), bad_.lower_bound({nsid, lba + n}));
}

Result<uint16_t> parse_fault_status(const std::string& name) {
  struct Named {
    const char* name;
    uint16_t status;
  };
  static const Named kNames[] = {
      {"unrecovered_read_error", sp::status::make(sp::sct::kMediaError, sp::sc_media::kUnrecoveredReadError)},
      {"write_fault", sp::status::make(sp::sct::kMediaError, sp::sc_media::kWriteFault)},
      {"namespace_not_ready", sp::status::make(sp::sct::kGeneric, sp::sc::kNamespaceNotReady)},
      {"internal_error", sp::status::make(sp::sct::kGeneric, sp::sc::kInternalError)},
      {"data_transfer_error", sp::status::make(sp::sct::kGeneric, sp::sc::kDataTransferError)},
      {"aborted_by_request", sp::status::make(sp::sct::kGeneric, sp::sc::kAbortedByRequest)},
  };
  for (const Named& n : kNames) {
    if (name == n.name) return n.status;
  }
  // "sct:sc" in hex, e.g. "2:81"; a trailing "+dnr" sets Do Not Retry.
  std::string s = name;
  bool dnr = false;
  if (s.size() > 4 && s.ends_with("+dnr")) {
    dnr = true;
    s.resize(s.size() - 4);
  }
  const auto colon = s.find(':');
  if (colon != std::string::npos) {
    char* e1 = nullptr;
    char* e2 = nullptr;
    // Named strings: the end pointers must not point into destroyed temporaries.
    const std::string sct_text = s.substr(0, colon);
    const unsigned long sct = std::strtoul(sct_text.c_str(), &e1, 16);
    const std::string sc_text = s.substr(colon + 1);
    const unsigned long sc = std::strtoul(sc_text.c_str(), &e2, 16);
    if (e1 && *e1 == 0 && e2 && *e2 == 0 && colon > 0 && !sc_text.empty() && sct <= 7 &&
        sc <= 0xff && (sct | sc) != 0) {
      return sp::status::make(static_cast<uint8_t>(sct), static_cast<uint8_t>(sc), dnr);
    }
  }
  return Error{"fault status '" + name +
               "': not one of unrecovered_read_error, write_fault, namespace_not_ready, "
               "internal_error, data_transfer_error, aborted_by_request, or SCT:SC in hex "
               "(e.g. 2:81, optionally +dnr)"};
}

}  // namespace pollux::emu::nvme
