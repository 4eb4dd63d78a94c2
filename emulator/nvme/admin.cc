// Admin command set.
#include <algorithm>
#include <cstring>

#include "emulator/nvme/controller.h"
#include "emulator/nvme/controller_internal.h"

namespace pollux::emu::nvme {

namespace {

void pad(char* dst, size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}

constexpr uint32_t kBroadcastNsid = 0xffffffff;

}  // namespace

uint16_t Controller::dispatch_admin(uint16_t sqid, const sp::SubmissionEntry& sqe, uint32_t* dw0,
                                    bool* defer) {
  (void)sqid;
  // Fused operations are not offered (FUSES = 0); admin commands over PCIe use PRPs only.
  if (sqe.fuse() != 0 || sqe.psdt() != sp::kPsdtPrp) return kInvalidField;
  switch (sqe.opcode) {
    case sp::admin::kDeleteIoSq: return admin_delete_sq(sqe);
    case sp::admin::kCreateIoSq: return admin_create_sq(sqe);
    case sp::admin::kGetLogPage: return admin_get_log_page(sqe);
    case sp::admin::kDeleteIoCq: return admin_delete_cq(sqe);
    case sp::admin::kCreateIoCq: return admin_create_cq(sqe);
    case sp::admin::kIdentify: return admin_identify(sqe);
    case sp::admin::kAbort: return admin_abort(sqe, dw0);
    case sp::admin::kSetFeatures: return admin_set_features(sqe, dw0);
    case sp::admin::kGetFeatures: return admin_get_features(sqe, dw0);
    case sp::admin::kAsyncEventRequest: return admin_async_event(sqe.cid, defer);
    case sp::admin::kKeepAlive: ++counters_.keep_alives; return kOk;
    case sp::admin::kFormatNvm: return admin_format(sqe);
    default: return gen_err(sp::sc::kInvalidOpcode);
  }
}

// ------------------------------------------------------------------------- identify ---

uint16_t Controller::admin_identify(const sp::SubmissionEntry& sqe) {
  const uint8_t cns = sqe.cdw10 & 0xff;
  uint8_t* buf = admin_buf_.data();
  std::memset(buf, 0, 4096);
  switch (cns) {
    case sp::cns::kNamespace: {
      Namespace* ns = find_ns(sqe.nsid);
      if (!ns) return kInvalidNamespace;
      auto* id = reinterpret_cast<sp::IdentifyNamespace*>(buf);
      id->nsze = id->ncap = ns->nsze;
      id->nuse = std::min(ns->nsze, (ns->store->allocated_bytes() + (1u << ns->shift) - 1) >> ns->shift);
      id->nsfeat = 1;  // thin provisioning: NUSE reports allocated blocks
      id->nlbaf = 1;   // two formats: 512 B and 4 KiB, no metadata
      id->flbas = ns->flbas;
      id->dlfeat = 0x08 | 0x01;  // Write Zeroes DEAC supported; deallocated blocks read zeroes
      id->nmic = 0;
      std::memcpy(id->nguid, ns->nguid, 16);
      std::memcpy(id->eui64, ns->eui64, 8);
      id->lbaf[0] = sp::LbaFormat{0, 9, 0};
      id->lbaf[1] = sp::LbaFormat{0, 12, 0};
      break;
    }
    case sp::cns::kController: {
      auto* id = reinterpret_cast<sp::IdentifyController*>(buf);
      id->vid = sp::pci::kVendorPollux;
      id->ssvid = sp::pci::kVendorPollux;
      pad(id->sn, sizeof id->sn, config_.serial);
      pad(id->mn, sizeof id->mn, config_.model);
      pad(id->fr, sizeof id->fr, config_.firmware);
      id->rab = 6;
      id->ieee[0] = 0x00;
      id->ieee[1] = 0x54;
      id->ieee[2] = 0x52;
      id->mdts = static_cast<uint8_t>(config_.mdts);
      id->cntlid = 1;
      id->ver = sp::make_version(1, 4);
      id->oaes = 1u << 8;  // Namespace Attribute Notices
      id->cntrltype = 1;   // I/O controller
      id->oacs = 1u << 1;  // Format NVM
      id->acl = kAbortLimit - 1;
      id->aerl = kAerLimit - 1;
      id->frmw = 0x03;    // one slot, read-only
      id->lpa = 1u << 2;  // extended data for Get Log Page (NUMDU, LPOL/LPOU)
      id->elpe = kErrorLogEntries - 1;
      id->npss = 0;
      id->wctemp = 0x157;
      id->cctemp = 0x175;
      id->kas = 1;  // 100 ms granularity
      id->sqes = 0x66;
      id->cqes = 0x44;
      id->nn = namespace_count();
      id->oncs = sp::oncs::kCompare | sp::oncs::kDatasetManagement | sp::oncs::kWriteZeroes;
      id->fna = 0;  // Format applies per namespace; no cryptographic erase
      // Bit 0: a volatile write cache is present; bits 2:1 = 11b: Flush with NSID FFFFFFFFh.
      id->vwc = static_cast<uint8_t>((config_.volatile_write_cache ? 1 : 0) | 0x6);
      id->sgls = sp::sgls::kSupported | sp::sgls::kBitBucket;
      const std::string nqn = "nqn.2026-11.io.pollux:nvme:" + config_.serial;
      std::memcpy(id->subnqn, nqn.data(), std::min(nqn.size(), sizeof id->subnqn - 1));
      id->psd[0].mp = 2500;  // 25 W
      break;
    }
    case sp::cns::kActiveNamespaceList: {
      if (sqe.nsid >= 0xfffffffe) return kInvalidNamespace;
      auto* list = reinterpret_cast<uint32_t*>(buf);
      size_t n = 0;
      for (uint32_t id = sqe.nsid + 1; id <= namespace_count() && n < 1024; ++id) list[n++] = id;
      break;
    }
    case sp::cns::kNamespaceIdDescriptors: {
      Namespace* ns = find_ns(sqe.nsid);
      if (!ns) return kInvalidNamespace;
      uint8_t* p = buf;
      auto add = [&p](uint8_t type, const uint8_t* id, uint8_t len) {
        p[0] = type;
        p[1] = len;
        std::memcpy(p + 4, id, len);
        p += 4 + len;
      };
      add(sp::nidt::kEui64, ns->eui64, 8);
      add(sp::nidt::kNguid, ns->nguid, 16);
      add(sp::nidt::kUuid, ns->uuid, 16);
      break;
    }
    default:
      return kInvalidField;
  }
  if (uint16_t st = map_dptr(sqe, 4096, Dir::kToHost); st != kOk) return st;
  return copy_to_host(buf, 4096, 4096);
}

// --------------------------------------------------------------------------- queues ---

uint16_t Controller::admin_create_cq(const sp::SubmissionEntry& sqe) {
  const uint32_t qid = sqe.cdw10 & 0xffff;
  const uint32_t qsize = (sqe.cdw10 >> 16) + 1;
  const bool pc = sqe.cdw11 & 1, ien = sqe.cdw11 & 2;
  const uint32_t iv = sqe.cdw11 >> 16;
  const uint64_t base = sqe.dptr.prp.prp1;
  if (qid == 0 || qid > ncqa_ || cqs_[qid].exists) return cmd_err(sp::sc_cmd::kInvalidQueueIdentifier);
  if (qsize < 2 || qsize > config_.max_queue_entries) return cmd_err(sp::sc_cmd::kInvalidQueueSize);
  if (!pc) return kInvalidField;  // CAP.CQR = 1: queues must be physically contiguous
  if (ien && iv > config_.max_io_queue_pairs) return cmd_err(sp::sc_cmd::kInvalidInterruptVector);
  if (base == 0 || (base & (page_size_ - 1))) return gen_err(sp::sc::kPrpOffsetInvalid);
  if (sp::cc::iocqes(cc_) != 4) return kInvalidField;
  if (!dma_.translate(base, size_t{qsize} * sizeof(sp::CompletionEntry))) {
    ++counters_.iommu_faults;
    return kDataTransferError;
  }
  create_cq(static_cast<uint16_t>(qid), base, qsize, ien, static_cast<uint16_t>(iv));
  return kOk;
}

uint16_t Controller::admin_create_sq(const sp::SubmissionEntry& sqe) {
  const uint32_t qid = sqe.cdw10 & 0xffff;
  const uint32_t qsize = (sqe.cdw10 >> 16) + 1;
  const bool pc = sqe.cdw11 & 1;
  const uint32_t cqid = sqe.cdw11 >> 16;
  const uint64_t base = sqe.dptr.prp.prp1;
  if (qid == 0 || qid > nsqa_ || sqs_[qid].exists) return cmd_err(sp::sc_cmd::kInvalidQueueIdentifier);
  // NVMe Base 2.0, 5.5 (Create I/O Submission Queue, Command Dword 11 CQID, and its command
  // specific status values): CQID 0 (the admin CQ) or an identifier outside the allocated
  // range is an Invalid Queue Identifier; Completion Queue Invalid is for an identifier in
  // range whose CQ does not exist.
  if (cqid == 0 || cqid > ncqa_ || cqid >= cqs_.size()) {
    return cmd_err(sp::sc_cmd::kInvalidQueueIdentifier);
  }
  if (!cqs_[cqid].exists) return cmd_err(sp::sc_cmd::kCompletionQueueInvalid);
  if (qsize < 2 || qsize > config_.max_queue_entries) return cmd_err(sp::sc_cmd::kInvalidQueueSize);
  if (!pc) return kInvalidField;
  if (base == 0 || (base & (page_size_ - 1))) return gen_err(sp::sc::kPrpOffsetInvalid);
  if (sp::cc::iosqes(cc_) != 6) return kInvalidField;
  if (!dma_.translate(base, size_t{qsize} * sizeof(sp::SubmissionEntry))) {
    ++counters_.iommu_faults;
    return kDataTransferError;
  }
  const uint8_t qprio = (sqe.cdw11 >> 1) & 3;
  create_sq(static_cast<uint16_t>(qid), base, qsize, static_cast<uint16_t>(cqid), qprio);
  return kOk;
}

// Commands are executed when fetched, so a deleted SQ has nothing outstanding: entries the
// host queued but the controller never fetched are simply dropped.
uint16_t Controller::admin_delete_sq(const sp::SubmissionEntry& sqe) {
  const uint32_t qid = sqe.cdw10 & 0xffff;
  if (qid == 0 || qid >= sqs_.size() || !sqs_[qid].exists) {
    return cmd_err(sp::sc_cmd::kInvalidQueueIdentifier);
  }
  delete_sq(static_cast<uint16_t>(qid));
  return kOk;
}

uint16_t Controller::admin_delete_cq(const sp::SubmissionEntry& sqe) {
  const uint32_t qid = sqe.cdw10 & 0xffff;
  if (qid == 0 || qid >= cqs_.size() || !cqs_[qid].exists) {
    return cmd_err(sp::sc_cmd::kInvalidQueueIdentifier);
  }
  if (cqs_[qid].bound_sqs) return cmd_err(sp::sc_cmd::kInvalidQueueDeletion);
  delete_cq(static_cast<uint16_t>(qid));
  return kOk;
}

// ------------------------------------------------------------------------ log pages ---

uint16_t Controller::admin_get_log_page(const sp::SubmissionEntry& sqe) {
  const uint8_t lid = sqe.cdw10 & 0xff;
  const bool rae = (sqe.cdw10 >> 15) & 1;
  const uint64_t numd = ((sqe.cdw10 >> 16) | uint64_t{sqe.cdw11 & 0xffff} << 16) + 1;
  const uint64_t len = numd * 4;
  const uint64_t offset = sqe.cdw12 | uint64_t{sqe.cdw13} << 32;
  if (offset & 3) return kInvalidField;
  if (mdts_bytes_ && len > mdts_bytes_) return kInvalidField;
  if (!mdts_bytes_ && len > (uint64_t{1} << 30)) return kInvalidField;
  uint8_t* buf = admin_buf_.data();
  std::memset(buf, 0, 4096);
  size_t size = 0;
  uint8_t event_type = 0xff;
  switch (lid) {
    case sp::log::kErrorInformation: {
      size = kErrorLogEntries * sizeof(sp::ErrorLogEntry);
      auto* out = reinterpret_cast<sp::ErrorLogEntry*>(buf);
      const uint64_t n = std::min<uint64_t>(error_count_, kErrorLogEntries);
      for (uint64_t i = 0; i < n; ++i) {  // newest first
        out[i] = error_log_[(error_count_ - 1 - i) % kErrorLogEntries];
      }
      event_type = sp::aer::kTypeError;
      break;
    }
    case sp::log::kSmartHealth: {
      if (sqe.nsid != 0 && sqe.nsid != kBroadcastNsid) return kInvalidField;  // LPA bit 0 = 0
      size = sizeof(sp::SmartHealthLog);
      auto* s = reinterpret_cast<sp::SmartHealthLog*>(buf);
      s->critical_warning = critical_warning_;
      s->composite_temperature = temperature_;
      s->available_spare = 100;
      s->available_spare_threshold = 10;
      s->percentage_used = 0;
      s->data_units_read[0] = (bytes_read_ / 512 + 999) / 1000;
      s->data_units_written[0] = (bytes_written_ / 512 + 999) / 1000;
      s->host_read_commands[0] = host_read_commands_;
      s->host_write_commands[0] = host_write_commands_;
      s->power_cycles[0] = 1;
      s->unsafe_shutdowns[0] = unsafe_shutdowns_;
      s->media_errors[0] = media_errors_;
      s->num_error_log_entries[0] = error_count_;
      s->temperature_sensor[0] = temperature_;
      event_type = sp::aer::kTypeSmart;
      break;
    }
    case sp::log::kFirmwareSlot: {
      size = 512;
      buf[0] = 1;  // AFI: slot 1 active
      pad(reinterpret_cast<char*>(buf + 8), 8, config_.firmware);
      break;
    }
    case sp::log::kChangedNamespaceList: {
      size = 4096;
      auto* list = reinterpret_cast<uint32_t*>(buf);
      if (changed_ns_overflow_) {
        list[0] = kBroadcastNsid;
      } else {
        std::sort(changed_ns_.begin(), changed_ns_.end());
        for (size_t i = 0; i < changed_ns_.size(); ++i) list[i] = changed_ns_[i];
      }
      event_type = sp::aer::kTypeNotice;
      break;
    }
    case sp::log::kPolluxEmulatorStatus: {
      size = sizeof(sp::PolluxEmulatorStatus);
      auto* st = reinterpret_cast<sp::PolluxEmulatorStatus*>(buf);
      std::memcpy(st->signature, "PLXE", 4);
      st->version = 1;
      st->realtime = realtime_status_.realtime;
      st->lag_ns = realtime_status_.lag_ns;
      st->max_lag_ns = realtime_status_.max_lag_ns;
      st->warn_lag_ns = realtime_status_.warn_lag_ns;
      st->fell_behind = realtime_status_.realtime && realtime_status_.warn_lag_ns > 0 &&
                        realtime_status_.max_lag_ns > realtime_status_.warn_lag_ns;
      break;
    }
    default:
      return cmd_err(sp::sc_cmd::kInvalidLogPage);
  }
  if (offset > size) return kInvalidField;
  if (uint16_t st = map_dptr(sqe, len, Dir::kToHost); st != kOk) return st;
  if (uint16_t st = copy_to_host(buf + offset, size - offset, len); st != kOk) return st;
  if (lid == sp::log::kChangedNamespaceList) {  // cleared by reading
    changed_ns_.clear();
    changed_ns_overflow_ = false;
  }
  if (!rae && event_type != 0xff && (masked_event_types_ & (1u << event_type))) {
    masked_event_types_ &= ~(1u << event_type);
    deliver_events();
  }
  return kOk;
}

// ------------------------------------------------------------------------- features ---

uint16_t Controller::admin_set_features(const sp::SubmissionEntry& sqe, uint32_t* dw0) {
  const uint8_t fid = sqe.cdw10 & 0xff;
  const bool save = sqe.cdw10 >> 31;
  const uint32_t v = sqe.cdw11;
  if (save) return cmd_err(sp::sc_cmd::kFeatureIdNotSaveable);  // ONCS.SaveSelect = 0
  switch (fid) {
    case sp::feature::kArbitration:
      features_.arbitration = v;
      ++queue_generation_;
      return kOk;
    case sp::feature::kPowerManagement:
      if ((v & 0x1f) != 0) return kInvalidField;  // NPSS = 0: only power state 0
      features_.power_management = v & 0xff;
      return kOk;
    case sp::feature::kTemperatureThreshold: {
      const uint32_t tmpsel = (v >> 16) & 0xf, thsel = (v >> 20) & 3;
      if (tmpsel != 0 || thsel > 1) return kInvalidField;  // only the composite temperature
      if (thsel == 0) {
        features_.temp_over = static_cast<uint16_t>(v & 0xffff);
      } else {
        features_.temp_under = static_cast<uint16_t>(v & 0xffff);
      }
      check_temperature();
      return kOk;
    }
    case sp::feature::kErrorRecovery:
      if (v & (1u << 16)) return kInvalidField;  // DULBE needs NSFEAT bit 2
      features_.error_recovery = v & 0xffff;
      return kOk;
    case sp::feature::kVolatileWriteCache:
      if (!config_.volatile_write_cache) return kInvalidField;
      features_.write_cache = v & 1;
      return kOk;
    case sp::feature::kNumberOfQueues: {
      const uint32_t nsqr = v & 0xffff, ncqr = v >> 16;
      if (nsqr == 0xffff || ncqr == 0xffff) return kInvalidField;
      if (active_io_sqs_.size() || active_cqs_.size() > 1) {
        return gen_err(sp::sc::kCommandSequenceError);
      }
      nsqa_ = std::min(nsqr + 1, config_.max_io_queue_pairs);
      ncqa_ = std::min(ncqr + 1, config_.max_io_queue_pairs);
      queues_feature_set_ = true;
      *dw0 = (ncqa_ - 1) << 16 | (nsqa_ - 1);
      return kOk;
    }
    case sp::feature::kInterruptCoalescing:
      features_.interrupt_coalescing = v & 0xffff;
      return kOk;
    case sp::feature::kInterruptVectorConfig: {
      const uint32_t iv = v & 0xffff;
      if (iv >= vector_cd_.size()) return kInvalidField;
      vector_cd_[iv] = (v >> 16) & 1;
      return kOk;
    }
    case sp::feature::kWriteAtomicityNormal:
      features_.write_atomicity = v & 1;
      return kOk;
    case sp::feature::kAsyncEventConfig:
      features_.async_event_config = v & 0x1ff;  // SMART warnings, namespace attribute notices
      check_temperature();
      return kOk;
    case sp::feature::kKeepAliveTimer:
      features_.keep_alive_ms = v;
      return kOk;
    case sp::feature::kHostBehaviorSupport:
      return set_host_behavior(sqe);
    default:
      return kInvalidField;
  }
}

// Host Behavior Support travels as a 512-byte data structure. Not saveable; a controller reset
// returns it to all zeroes (reset_features()).
uint16_t Controller::set_host_behavior(const sp::SubmissionEntry& sqe) {
  sp::HostBehaviorSupport hbs;
  if (uint16_t st = map_dptr(sqe, sizeof hbs, Dir::kFromHost); st != kOk) return st;
  copy_from_host(&hbs);
  if (hbs.acre > 1 || hbs.etdas > 1 || hbs.lbafee > 1) return kInvalidField;  // reserved values
  features_.acre = hbs.acre;
  features_.etdas = hbs.etdas;
  features_.lbafee = hbs.lbafee;
  return kOk;
}

uint16_t Controller::get_host_behavior(const sp::SubmissionEntry& sqe, bool defaults) {
  sp::HostBehaviorSupport hbs{};
  if (!defaults) {
    hbs.acre = features_.acre;
    hbs.etdas = features_.etdas;
    hbs.lbafee = features_.lbafee;
  }
  if (uint16_t st = map_dptr(sqe, sizeof hbs, Dir::kToHost); st != kOk) return st;
  return copy_to_host(&hbs, sizeof hbs, sizeof hbs);
}

uint16_t Controller::admin_get_features(const sp::SubmissionEntry& sqe, uint32_t* dw0) {
  const uint8_t fid = sqe.cdw10 & 0xff;
  const uint32_t sel = (sqe.cdw10 >> 8) & 7;
  if (sel > sp::feature::kSelCapabilities) return kInvalidField;
  Features defaults{};
  const Features* f = &features_;
  uint32_t nsqa = nsqa_, ncqa = ncqa_;
  if (sel == sp::feature::kSelDefault || sel == sp::feature::kSelSaved) {  // nothing is saveable
    defaults.arbitration = 3;
    defaults.temp_over = 0x157;
    defaults.write_cache = config_.volatile_write_cache;
    f = &defaults;
    nsqa = ncqa = config_.max_io_queue_pairs;
  }
  const bool caps = sel == sp::feature::kSelCapabilities;
  constexpr uint32_t kChangeable = sp::feature::kCapChangeable;
  switch (fid) {
    case sp::feature::kArbitration: *dw0 = caps ? kChangeable : f->arbitration; return kOk;
    case sp::feature::kPowerManagement: *dw0 = caps ? kChangeable : f->power_management; return kOk;
    case sp::feature::kTemperatureThreshold: {
      const uint32_t tmpsel = (sqe.cdw11 >> 16) & 0xf, thsel = (sqe.cdw11 >> 20) & 3;
      if (tmpsel != 0 || thsel > 1) return kInvalidField;
      *dw0 = caps ? kChangeable : (thsel == 0 ? f->temp_over : f->temp_under);
      return kOk;
    }
    case sp::feature::kErrorRecovery: *dw0 = caps ? kChangeable : f->error_recovery; return kOk;
    case sp::feature::kVolatileWriteCache:
      if (!config_.volatile_write_cache) return kInvalidField;
      *dw0 = caps ? kChangeable : (f->write_cache ? 1 : 0);
      return kOk;
    case sp::feature::kNumberOfQueues:
      *dw0 = caps ? kChangeable : ((ncqa - 1) << 16 | (nsqa - 1));
      return kOk;
    case sp::feature::kInterruptCoalescing:
      *dw0 = caps ? kChangeable : f->interrupt_coalescing;
      return kOk;
    case sp::feature::kInterruptVectorConfig: {
      const uint32_t iv = sqe.cdw11 & 0xffff;
      if (iv >= vector_cd_.size()) return kInvalidField;
      *dw0 = caps ? kChangeable : (iv | (f == &features_ ? uint32_t{vector_cd_[iv]} << 16 : 0));
      return kOk;
    }
    case sp::feature::kWriteAtomicityNormal: *dw0 = caps ? kChangeable : f->write_atomicity; return kOk;
    case sp::feature::kAsyncEventConfig: *dw0 = caps ? kChangeable : f->async_event_config; return kOk;
    case sp::feature::kKeepAliveTimer: *dw0 = caps ? kChangeable : f->keep_alive_ms; return kOk;
    case sp::feature::kHostBehaviorSupport:
      if (caps) {
        *dw0 = kChangeable;
        return kOk;
      }
      return get_host_behavior(sqe, f != &features_);
    default: return kInvalidField;
  }
}

// --------------------------------------------------------------- abort, AER, format ---

// A command can be aborted only while it still sits in its SQ (fetched commands complete
// within the same poll()). DW0 bit 0: 0 = the command will complete as aborted, 1 = not aborted.
uint16_t Controller::admin_abort(const sp::SubmissionEntry& sqe, uint32_t* dw0) {
  const uint32_t sqid = sqe.cdw10 & 0xffff;
  const uint16_t cid = static_cast<uint16_t>(sqe.cdw10 >> 16);
  *dw0 = 1;
  if (sqid >= sqs_.size() || !sqs_[sqid].exists) return kOk;
  Sq& sq = sqs_[sqid];
  refresh_sq_tail(sq);
  if (sq.head == sq.tail) return kOk;
  auto* ring = reinterpret_cast<const sp::SubmissionEntry*>(
      dma_.translate(sq.base, size_t{sq.size} * sizeof(sp::SubmissionEntry)));
  if (!ring) {
    ++counters_.iommu_faults;
    return kOk;
  }
  for (uint32_t i = sq.head; i != sq.tail; i = i + 1 == sq.size ? 0 : i + 1) {
    uint16_t c;
    std::memcpy(&c, reinterpret_cast<const uint8_t*>(&ring[i]) + offsetof(sp::SubmissionEntry, cid),
                sizeof c);
    if (c != cid) continue;
    for (uint32_t k = 0; k < sq.n_aborts; ++k) {
      if (sq.aborts[k] == cid) {
        *dw0 = 0;
        return kOk;
      }
    }
    if (sq.n_aborts >= kAbortLimit) return cmd_err(sp::sc_cmd::kAbortCommandLimitExceeded);
    sq.aborts[sq.n_aborts++] = cid;
    *dw0 = 0;
    return kOk;
  }
  return kOk;
}

uint16_t Controller::admin_async_event(uint16_t cid, bool* defer) {
  if (aer_cids_.size() >= kAerLimit) return cmd_err(sp::sc_cmd::kAsyncEventRequestLimitExceeded);
  aer_cids_.push_back(cid);
  *defer = true;
  deliver_events();
  return kOk;
}

uint16_t Controller::admin_format(const sp::SubmissionEntry& sqe) {
  const uint32_t lbaf = sqe.cdw10 & 0xf;
  const uint32_t pi = (sqe.cdw10 >> 5) & 7;
  const uint32_t ses = (sqe.cdw10 >> 9) & 7;
  if (sqe.nsid != kBroadcastNsid && !find_ns(sqe.nsid)) return kInvalidNamespace;
  if (lbaf > 1 || pi != 0) return cmd_err(sp::sc_cmd::kInvalidFormat);
  if (ses > 1 || (sqe.cdw10 >> 12)) return kInvalidField;  // no cryptographic erase
  for (auto& ns : namespaces_) {
    if (sqe.nsid != kBroadcastNsid && ns->nsid != sqe.nsid) continue;
    if (!ns->store->erase_all()) {
      ++media_errors_;
      return media_err(sp::sc_media::kWriteFault);
    }
    ns->flbas = static_cast<uint8_t>(lbaf);
    ns->shift = lbaf ? 12 : 9;
    ns->nsze = ns->size_bytes >> ns->shift;
  }
  return kOk;
}

}  // namespace pollux::emu::nvme
