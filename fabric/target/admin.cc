// The admin command set a host needs of a fabrics controller (what Linux's nvme-tcp and
// nvme-cli send, and Pollux's own driver): Identify (controller, namespace, active namespace
// list, namespace identification descriptors), Get Log Page (error, SMART / health, firmware
// slot, changed namespaces; discovery on a discovery controller), Get/Set Features, Keep
// Alive, Asynchronous Event Request, Abort; and the fabrics Property Get/Set.
#include <algorithm>
#include <cstring>
#include <memory>

#include "fabric/target/controller.h"
#include "fabric/target/internal.h"
#include "fabric/target/target.h"

namespace pollux::fabric::target {

namespace {

namespace adm = sn::admin;

void pad_copy(char* dst, std::size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}

bool nonzero(const uint8_t* p, std::size_t n) {
  return std::any_of(p, p + n, [](uint8_t b) { return b != 0; });
}

uint8_t log2_floor(uint64_t v) {
  uint8_t l = 0;
  while (v > 1) {
    v >>= 1;
    ++l;
  }
  return l;
}

// Copies [offset, offset + length) of a log page into the command's buffer (zero past the
// page's end). The caller has checked the offset.
void copy_log(Request& r, const uint8_t* page, std::size_t size, uint64_t offset, uint32_t len) {
  auto* out = static_cast<uint8_t*>(r.data);
  const std::size_t avail = offset < size ? size - offset : 0;
  const std::size_t n = std::min<std::size_t>(avail, len);
  if (n) std::memcpy(out, page + offset, n);
  std::memset(out + n, 0, len - n);
  r.length = len;
}

struct LogRequest {
  uint8_t lid;
  bool rae;
  uint64_t offset;
  uint32_t len;
};

}  // namespace

struct AdminCommands {
  static uint16_t identify(Controller& c, Request& r);
  static void identify_controller(Controller& c, sn::IdentifyController& id);
  static uint16_t get_log_page(Controller& c, Request& r);
  static void smart_log(Controller& c, Request& r, const LogRequest& lr);
  static void discovery_log(Controller& c, Request& r, const LogRequest& lr);
  static uint16_t get_features(Controller& c, Request& r);
  static uint16_t set_features(Controller& c, Request& r);
  static uint16_t async_event_request(Controller& c, Request& r, bool* held);
};

// ---------------------------------------------------------------------- dispatch ---

void Controller::execute(Request& r) {
  uint16_t st = kSuccess;
  bool async = false;  // completed later (held AER, a log built elsewhere)
  const sn::SubmissionEntry& cmd = r.cmd;
  if (cmd.opcode == nf::kOpcodeFabrics) {
    nf::FabricsCommand f;
    std::memcpy(&f, &cmd, sizeof f);
    switch (f.fctype) {
      case nf::fctype::kPropertyGet:
        st = property_get(r);
        break;
      case nf::fctype::kPropertySet:
        st = property_set(r);
        break;
      case nf::fctype::kConnect:
        st = generic(sn::sc::kCommandSequenceError);  // the admin queue is connected already
        break;
      case nf::fctype::kDisconnect:
        st = specific(nf::sc::kInvalidQueueType);  // an admin queue ends by closing it
        break;
      default:
        st = generic(sn::sc::kInvalidOpcode);
    }
  } else if (!(cc_ & sn::cc::kEn) || !(csts_ & sn::csts::kRdy)) {
    st = generic(sn::sc::kCommandSequenceError);  // only fabrics commands while disabled
  } else {
    switch (cmd.opcode) {
      case adm::kIdentify:
        st = AdminCommands::identify(*this, r);
        break;
      case adm::kGetLogPage:
        st = AdminCommands::get_log_page(*this, r);
        async = st == 0xffff;
        break;
      case adm::kGetFeatures:
        st = AdminCommands::get_features(*this, r);
        break;
      case adm::kSetFeatures:
        st = AdminCommands::set_features(*this, r);
        break;
      case adm::kKeepAlive:
        last_keep_alive_ = group_.thread()->clock().now();
        break;
      case adm::kAsyncEventRequest:
        st = AdminCommands::async_event_request(*this, r, &async);
        break;
      case adm::kAbort:
        async = start_abort(r);
        break;
      default:
        st = generic(sn::sc::kInvalidOpcode);
    }
  }
  if (async) return;
  if (st != kSuccess) log_error(r, st);
  finish(r, st);
}

// ---------------------------------------------------------------------- identify ---

void AdminCommands::identify_controller(Controller& c, sn::IdentifyController& id) {
  const ControllerConfig& cfg = c.cfg_;
  const TransportLimits& l = cfg.limits;
  id = sn::IdentifyController{};
  pad_copy(id.sn, sizeof id.sn, cfg.serial);
  pad_copy(id.mn, sizeof id.mn, cfg.model);
  pad_copy(id.fr, sizeof id.fr, cfg.firmware);
  id.rab = 6;
  id.cmic = 1u << 1;  // more than one controller may attach to the subsystem
  id.mdts = log2_floor(std::max<uint64_t>(l.max_io_size / 4096, 1));
  id.cntlid = cfg.cntlid;
  id.ver = c.vs_;
  id.oaes = cfg.discovery ? 1u << 31 : 1u << 8;  // discovery log / namespace attribute notices
  id.ctratt = 1u << 0;                           // 128-bit host identifier
  id.cntrltype = cfg.discovery ? 2 : 1;
  id.acl = 3;
  id.aerl = Controller::kAerLimit - 1;
  id.frmw = 0x3;     // one slot, read-only
  id.lpa = 1u << 2;  // extended Get Log Page: offset and NUMDU
  id.elpe = Controller::kErrorLogEntries - 1;
  id.kas = cfg.kas;
  id.cqt = cfg.cqt_ms;
  id.sqes = 0x66;
  id.cqes = 0x44;
  id.maxcmd = static_cast<uint16_t>(std::min<uint32_t>(l.max_queue_depth, 0xffff));
  id.nn = cfg.discovery ? 0 : cfg.max_namespaces;
  if (!cfg.discovery) {
    id.oncs = sn::oncs::kCompare | sn::oncs::kDatasetManagement | sn::oncs::kWriteZeroes;
    id.vwc = 0x1 | 0x2 << 1;  // present; a flush to every namespace (FFFFFFFFh) not supported
  }
  id.sgls = sn::sgls::kSupported | 1u << 20;  // SGLs with byte alignment; offsets (in-capsule)
  if (l.keyed_sgl) id.sgls |= sn::sgls::kKeyed;
  std::memcpy(id.subnqn, cfg.subnqn.data(), std::min(cfg.subnqn.size(), sizeof id.subnqn - 1));
  nf::IdentifyControllerFabrics f{};
  f.ioccsz = (sizeof(sn::SubmissionEntry) + (cfg.discovery ? 0 : l.in_capsule_data_size)) /
             nf::kCapsuleSizeUnit;
  f.iorcsz = sizeof(sn::CompletionEntry) / nf::kCapsuleSizeUnit;
  f.icdoff = 0;
  f.fcatt = 0;  // dynamic controller model
  f.msdbd = l.msdbd;
  f.ofcs = nf::kOfcsDisconnect;
  std::memcpy(id.nvmeof, &f, sizeof f);
}

uint16_t AdminCommands::identify(Controller& c, Request& r) {
  if (r.data == nullptr || r.length < 4096) return generic(sn::sc::kDataSglLengthInvalid);
  const uint8_t cns = r.cmd.cdw10 & 0xff;
  const uint32_t nsid = r.cmd.nsid;
  auto* out = static_cast<uint8_t*>(r.data);
  r.length = 4096;
  if (cns == sn::cns::kController) {
    sn::IdentifyController id;
    identify_controller(c, id);
    std::memcpy(out, &id, sizeof id);
    return kSuccess;
  }
  if (c.cfg_.discovery) return generic(sn::sc::kInvalidField);
  PgSubsystem* s = c.group_.subsystem(c.cfg_.slot);
  if (s == nullptr) return generic(sn::sc::kInternalError);
  switch (cns) {
    case sn::cns::kNamespace: {
      if (nsid == 0 || nsid > c.cfg_.max_namespaces)
        return generic(sn::sc::kInvalidNamespaceOrFormat);
      std::memset(out, 0, 4096);
      const PgNamespace* ns = s->active(nsid);
      if (ns == nullptr) return kSuccess;  // an inactive NSID: all zeroes
      sn::IdentifyNamespace id{};
      id.nsze = id.ncap = id.nuse = ns->num_blocks;
      id.nlbaf = 0;
      id.flbas = 0;
      id.lbaf[0].lbads = static_cast<uint8_t>(ns->block_shift);
      id.nmic = 1;  // may be attached to more than one controller
      std::memcpy(id.nguid, ns->ids.nguid.data(), 16);
      std::memcpy(id.eui64, ns->ids.eui64.data(), 8);
      std::memcpy(out, &id, sizeof id);
      return kSuccess;
    }
    case sn::cns::kActiveNamespaceList: {
      if (nsid >= 0xfffffffe) return generic(sn::sc::kInvalidNamespaceOrFormat);
      std::memset(out, 0, 4096);
      uint32_t n = 0;
      for (uint32_t i = nsid + 1; i <= s->ns.size() && n < 1024; ++i) {
        if (s->active(i) == nullptr) continue;
        std::memcpy(out + 4 * n++, &i, 4);
      }
      return kSuccess;
    }
    case sn::cns::kNamespaceIdDescriptors: {
      const PgNamespace* ns = s->active(nsid);
      if (ns == nullptr) return generic(sn::sc::kInvalidNamespaceOrFormat);
      std::memset(out, 0, 4096);
      std::size_t at = 0;
      auto add = [&](uint8_t type, const uint8_t* v, uint8_t len) {
        if (!nonzero(v, len)) return;
        out[at] = type;
        out[at + 1] = len;
        std::memcpy(out + at + 4, v, len);
        at += 4 + len;
      };
      add(sn::nidt::kEui64, ns->ids.eui64.data(), 8);
      add(sn::nidt::kNguid, ns->ids.nguid.data(), 16);
      add(sn::nidt::kUuid, ns->ids.uuid.data(), 16);
      return kSuccess;
    }
    default:
      return generic(sn::sc::kInvalidField);
  }
}

// ---------------------------------------------------------------------- log pages ---

uint16_t AdminCommands::get_log_page(Controller& c, Request& r) {
  const sn::SubmissionEntry& cmd = r.cmd;
  LogRequest lr;
  lr.lid = cmd.cdw10 & 0xff;
  lr.rae = cmd.cdw10 & (1u << 15);
  const uint64_t numd = ((uint64_t{cmd.cdw11 & 0xffff} << 16) | (cmd.cdw10 >> 16)) + 1;
  lr.offset = uint64_t{cmd.cdw13} << 32 | cmd.cdw12;
  if (lr.offset & 3) return generic(sn::sc::kInvalidField);
  if (r.data == nullptr || numd * 4 > r.length) return generic(sn::sc::kDataSglLengthInvalid);
  lr.len = static_cast<uint32_t>(numd * 4);
  const uint16_t bad_log = specific(sn::sc_cmd::kInvalidLogPage);
  if (c.cfg_.discovery) {
    if (lr.lid != nf::kLogDiscovery) return bad_log;
    discovery_log(c, r, lr);
    return 0xffff;  // completed asynchronously
  }
  switch (lr.lid) {
    case sn::log::kErrorInformation: {
      std::vector<sn::ErrorLogEntry> page(Controller::kErrorLogEntries);
      std::copy(c.error_log_.rbegin(), c.error_log_.rend(), page.begin());  // newest first
      const std::size_t size = page.size() * sizeof(sn::ErrorLogEntry);
      if (lr.offset >= size) return generic(sn::sc::kInvalidField);
      copy_log(r, reinterpret_cast<const uint8_t*>(page.data()), size, lr.offset, lr.len);
      return kSuccess;
    }
    case sn::log::kSmartHealth:
      if (lr.offset >= sizeof(sn::SmartHealthLog)) return generic(sn::sc::kInvalidField);
      smart_log(c, r, lr);
      return 0xffff;
    case sn::log::kFirmwareSlot: {
      uint8_t page[512] = {};
      page[0] = 1;  // active slot 1
      pad_copy(reinterpret_cast<char*>(page + 8), 8, c.cfg_.firmware);
      if (lr.offset >= sizeof page) return generic(sn::sc::kInvalidField);
      copy_log(r, page, sizeof page, lr.offset, lr.len);
      return kSuccess;
    }
    case sn::log::kChangedNamespaceList: {
      std::vector<uint32_t> page(Controller::kChangedNsMax, 0);
      if (c.changed_ns_overflow_) {
        page[0] = 0xffffffff;
      } else {
        std::vector<uint32_t> sorted = c.changed_ns_;
        std::sort(sorted.begin(), sorted.end());
        std::copy(sorted.begin(), sorted.end(), page.begin());
      }
      const std::size_t size = page.size() * 4;
      if (lr.offset >= size) return generic(sn::sc::kInvalidField);
      copy_log(r, reinterpret_cast<const uint8_t*>(page.data()), size, lr.offset, lr.len);
      if (!lr.rae) {  // read: the list starts again, and the next change is reported
        c.changed_ns_.clear();
        c.changed_ns_overflow_ = false;
        c.ns_notice_masked_ = false;
      }
      return kSuccess;
    }
    default:
      return bad_log;
  }
}

// Health from the bdev layer's statistics of the subsystem's namespaces (what this target
// moved, and anyone else using those bdevs): data units of 1000 x 512 bytes, command counts.
// No sensor: the temperature reads 0.
void AdminCommands::smart_log(Controller& c, Request& r, const LogRequest& lr) {
  struct Walk {
    Request* r;
    LogRequest lr;
    std::vector<PgNamespace*> ns;  // each holds a count in `outstanding` while its stats come
    std::size_t next = 0;
    uint64_t read_bytes = 0, write_bytes = 0, reads = 0, writes = 0, errors = 0;
    bdev::Manager* mgr;
  };
  auto w = std::make_shared<Walk>();
  w->r = &r;
  w->lr = lr;
  w->mgr = &c.group_.bdevs();
  if (PgSubsystem* s = c.group_.subsystem(c.cfg_.slot)) {
    for (PgNamespace& n : s->ns) {
      if (n.state != PgNamespace::State::kActive) continue;
      if (r.cmd.nsid != 0 && r.cmd.nsid != 0xffffffff && r.cmd.nsid != n.nsid) continue;
      ++n.outstanding;
      w->ns.push_back(&n);
    }
  }
  // One namespace after another (get_stats walks the bdev's channels by messages).
  struct Step {
    static void next(std::shared_ptr<Walk> w) {
      if (w->next == w->ns.size()) return done(w);
      PgNamespace* n = w->ns[w->next];
      auto* hold = new std::shared_ptr<Walk>(w);
      w->mgr->get_stats(
          *n->bdev,
          [](const bdev::IoStats& st, void* arg) {
            std::unique_ptr<std::shared_ptr<Walk>> h(static_cast<std::shared_ptr<Walk>*>(arg));
            Walk& w = **h;
            const auto& rd = st.by_type[static_cast<int>(bdev::IoType::kRead)];
            const auto& wr = st.by_type[static_cast<int>(bdev::IoType::kWrite)];
            w.read_bytes += rd.bytes;
            w.write_bytes += wr.bytes;
            w.reads += rd.ops;
            w.writes += wr.ops;
            for (const auto& t : st.by_type) w.errors += t.errors;
            PgNamespace* ns = w.ns[w.next++];
            if (--ns->outstanding == 0 && ns->drained) {
              auto fn = std::move(ns->drained);
              ns->drained = nullptr;
              fn();
            }
            next(*h);
          },
          hold);
    }
    static void done(std::shared_ptr<Walk> w) {
      sn::SmartHealthLog log{};
      log.available_spare = 100;
      log.available_spare_threshold = 10;
      auto units = [](uint64_t bytes) { return (bytes + 511'999) / 512'000; };
      log.data_units_read[0] = units(w->read_bytes);
      log.data_units_written[0] = units(w->write_bytes);
      log.host_read_commands[0] = w->reads;
      log.host_write_commands[0] = w->writes;
      log.media_errors[0] = 0;
      log.num_error_log_entries[0] = w->errors;
      copy_log(*w->r, reinterpret_cast<const uint8_t*>(&log), sizeof log, w->lr.offset, w->lr.len);
      finish(*w->r, kSuccess);
    }
  };
  Step::next(w);
}

// Built on the target thread (it owns the subsystems), completed back here.
void AdminCommands::discovery_log(Controller& c, Request& r, const LogRequest& lr) {
  Target& t = c.group_.target();
  event::Thread* here = c.group_.thread();
  const bool unmask = !lr.rae;
  Controller* self = &c;
  const uint64_t id = c.id();
  PollGroup* g = &c.group_;
  t.run_on(t.thread(), [&t, here, &r, lr, hostnqn = c.cfg_.hostnqn, unmask, self, id, g] {
    auto page = std::make_shared<std::vector<uint8_t>>(t.discovery_log(hostnqn));
    t.run_on(here, [&r, lr, page, unmask, self, id, g] {
      if (lr.offset >= page->size()) {
        finish(r, generic(sn::sc::kInvalidField));
        return;
      }
      copy_log(r, page->data(), page->size(), lr.offset, lr.len);
      if (unmask && g->controller(id) == self) self->discovery_notice_masked_ = false;
      finish(r, kSuccess);
    });
  });
}

// ---------------------------------------------------------------------- features ---

uint16_t AdminCommands::get_features(Controller& c, Request& r) {
  namespace ft = sn::feature;
  const uint8_t fid = r.cmd.cdw10 & 0xff;
  const uint8_t sel = (r.cmd.cdw10 >> 8) & 7;
  if (sel == ft::kSelCapabilities) {
    r.rsp.dw0 = ft::kCapChangeable;
    return kSuccess;
  }
  const bool dflt = sel == ft::kSelDefault;
  if (c.cfg_.discovery && fid != ft::kKeepAliveTimer && fid != ft::kAsyncEventConfig)
    return generic(sn::sc::kInvalidField);
  uint32_t v;
  switch (fid) {
    case ft::kArbitration:
      v = dflt ? 0 : c.arbitration_;
      break;
    case ft::kPowerManagement:
      v = 0;
      break;
    case ft::kTemperatureThreshold:
      v = dflt ? 0x157 : c.temp_threshold_;
      break;
    case ft::kErrorRecovery:
      v = dflt ? 0 : c.error_recovery_;
      break;
    case ft::kVolatileWriteCache:
      v = dflt ? 1 : c.wce_;
      break;
    case ft::kNumberOfQueues: {
      const uint32_t n = (dflt ? c.cfg_.limits.max_io_qpairs_per_ctrlr : c.io_queues_) - 1;
      v = n | n << 16;
      break;
    }
    case ft::kInterruptCoalescing:
      v = dflt ? 0 : c.coalescing_;
      break;
    case ft::kWriteAtomicityNormal:
      v = dflt ? 0 : c.write_atomicity_;
      break;
    case ft::kAsyncEventConfig:
      v = dflt ? 0 : c.aec_;
      break;
    case ft::kKeepAliveTimer:
      v = dflt ? 0 : c.kato_ms_;
      break;
    default:
      return generic(sn::sc::kInvalidField);
  }
  r.rsp.dw0 = v;
  return kSuccess;
}

uint16_t AdminCommands::set_features(Controller& c, Request& r) {
  namespace ft = sn::feature;
  const uint8_t fid = r.cmd.cdw10 & 0xff;
  const uint32_t v = r.cmd.cdw11;
  if (r.cmd.cdw10 & (1u << 31)) return specific(sn::sc_cmd::kFeatureIdNotSaveable);
  if (c.cfg_.discovery && fid != ft::kKeepAliveTimer && fid != ft::kAsyncEventConfig)
    return generic(sn::sc::kInvalidField);
  switch (fid) {
    case ft::kArbitration:
      c.arbitration_ = v;
      return kSuccess;
    case ft::kPowerManagement:
      return (v & 0x1f) == 0 ? kSuccess : generic(sn::sc::kInvalidField);  // power state 0 only
    case ft::kTemperatureThreshold:
      c.temp_threshold_ = v & 0xffff;
      return kSuccess;
    case ft::kErrorRecovery:
      c.error_recovery_ = v;
      return kSuccess;
    case ft::kVolatileWriteCache:
      c.wce_ = v & 1;
      return kSuccess;
    case ft::kNumberOfQueues: {
      const uint32_t nsqr = v & 0xffff, ncqr = v >> 16;
      if (nsqr == 0xffff || ncqr == 0xffff) return generic(sn::sc::kInvalidField);
      if (!c.io_qpairs_.empty()) return generic(sn::sc::kCommandSequenceError);
      const uint32_t max = c.cfg_.limits.max_io_qpairs_per_ctrlr;
      const uint32_t nsqa = std::min(nsqr + 1, max), ncqa = std::min(ncqr + 1, max);
      c.io_queues_ = std::min(nsqa, ncqa);
      c.io_queues_set_ = true;
      r.rsp.dw0 = (nsqa - 1) | (ncqa - 1) << 16;
      return kSuccess;
    }
    case ft::kInterruptCoalescing:
      c.coalescing_ = v & 0xffff;
      return kSuccess;
    case ft::kWriteAtomicityNormal:
      c.write_atomicity_ = v & 1;
      return kSuccess;
    case ft::kAsyncEventConfig:
      c.aec_ = v;
      return kSuccess;
    case ft::kKeepAliveTimer:
      c.set_kato(v);
      if (c.cfg_.discovery && c.kato_ms_ == 0) c.kato_ms_ = Controller::kDiscoveryKatoMs;
      c.start_keep_alive();
      return kSuccess;
    default:
      return generic(sn::sc::kInvalidField);
  }
}

uint16_t AdminCommands::async_event_request(Controller& c, Request& r, bool* held) {
  if (c.aers_.size() >= Controller::kAerLimit)
    return specific(sn::sc_cmd::kAsyncEventRequestLimitExceeded);
  c.aers_.push_back(&r);
  *held = true;
  if (!c.events_.empty()) {
    const uint32_t dw0 = c.events_.front();
    c.events_.pop_front();
    c.complete_aer(dw0);
  }
  return kSuccess;
}

}  // namespace pollux::fabric::target
