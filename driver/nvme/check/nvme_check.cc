// pollux-nvme-check: the driver test list's command part. Sends admin and NVM commands whose
// outcome the NVMe base specification fixes (errors included) to any controller and compares
// what comes back with what the spec says, case by case. Run against QEMU's controller (HIL
// guest, trtype pcie) and Pollux's emulator (trtype vfio-user): a case that passes on one and
// not the other is one implementation's bug (docs/HARDWARE.md lists them).
//
//   pollux-nvme-check -r "trtype:pcie traddr:0000:01:00.0" [--known CASE=why ...] [--list]
//
// Every case prints PASS, FAIL, KNOWN (fails, and --known says why) or SKIP (the controller
// does not claim the optional feature), with what came back and the spec section. Exit status
// 0 when nothing FAILs, 1 otherwise, 2 when the controller cannot be attached. It writes to
// the first namespace: use it only on a drive whose contents do not matter.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/cli.h"
#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/memory_registry.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/status.h"
#include "driver/nvme/transport_id.h"
#include "spec/nvme.h"

namespace {

using namespace pollux;
namespace sn = spec::nvme;

constexpr uint64_t kCommandTimeoutNs = 5'000'000'000;
constexpr size_t kBufferBytes = 2 << 20;

struct Outcome {
  enum Kind { kPass, kFail, kSkip } kind = kPass;
  std::string observed;
};

struct Case {
  const char* name;
  const char* ref;       // NVMe Base Specification 2.0 section
  const char* expected;  // in words
  std::function<Outcome()> run;
};

std::string status_text(const sn::CompletionEntry& c) {
  return nvme::describe(nvme::Status::from_cqe(c.status));
}

class Checker {
 public:
  // Without a controller (all null) the cases can be listed, not run.
  Checker(nvme::Controller* ctrl, nvme::Qpair* qp, env::DmaRegion* buf)
      : ctrl_(ctrl), qp_(qp), buf_(buf) {
    if (ctrl != nullptr) ns_ = ctrl_->ns(ctrl_->namespace_ids().front());
    fabrics_ = ctrl != nullptr && ctrl->transport().fabrics();
  }
  std::vector<Case> cases();
  // A command got no completion: the controller still owns it (and maybe the buffer), so
  // the cases after it cannot be trusted.
  bool stalled() const { return stalled_; }

 private:
  // One command to completion (the admin queue or the I/O queue pair), or a timeout status
  // (SCT 7 SC 0xff: nothing came back in 5 s).
  sn::CompletionEntry admin(sn::SubmissionEntry cmd, void* data = nullptr, uint32_t len = 0) {
    Wait& w = waits_.emplace_back();
    if (ctrl_->admin_submit(cmd, data, len, Wait::done, &w) != 0) return refused();
    return wait(w, [this] { ctrl_->process_admin_completions(); });
  }
  sn::CompletionEntry io(sn::SubmissionEntry cmd, void* data = nullptr, uint32_t len = 0) {
    Wait& w = waits_.emplace_back();
    if (qp_->submit_raw(cmd, data, len, Wait::done, &w) != 0) return refused();
    return wait(w, [this] { qp_->process_completions(); });
  }
  struct Wait {
    bool finished = false;
    sn::CompletionEntry cpl{};
    static void done(void* ctx, const sn::CompletionEntry& c) {
      auto* w = static_cast<Wait*>(ctx);
      w->cpl = c;
      w->finished = true;
    }
  };
  template <typename Poll>
  sn::CompletionEntry wait(Wait& w, Poll poll) {
    const env::Clock& clock = env::MonotonicClock::instance();
    const uint64_t deadline = clock.now() + kCommandTimeoutNs;
    while (!w.finished && clock.now() < deadline) poll();
    if (!w.finished) {
      stalled_ = true;  // w stays in waits_: a late completion lands there, not on the stack
      sn::CompletionEntry c{};
      c.status = sn::status::make(sn::sct::kVendor, 0xff);
      return c;
    }
    return w.cpl;
  }
  static bool timed_out(const sn::CompletionEntry& c) {
    return c.status == sn::status::make(sn::sct::kVendor, 0xff);
  }
  static sn::CompletionEntry refused() {
    sn::CompletionEntry c{};
    c.status = sn::status::make(sn::sct::kVendor, 0xfe);
    return c;
  }
  // PASS when the status is (sct, sc), else FAIL; either way what came back.
  static Outcome expect(const sn::CompletionEntry& c, uint8_t sct, uint8_t sc) {
    const nvme::Status s = nvme::Status::from_cqe(c.status);
    return {s.sct == sct && s.sc == sc ? Outcome::kPass : Outcome::kFail, status_text(c)};
  }
  static Outcome expect_success(const sn::CompletionEntry& c) {
    return expect(c, sn::sct::kGeneric, sn::sc::kSuccess);
  }
  sn::SubmissionEntry rw(uint8_t opcode, uint64_t lba, uint32_t blocks, uint32_t nsid = 0) {
    sn::SubmissionEntry c{};
    c.opcode = opcode;
    c.nsid = nsid ? nsid : ns_->id;
    c.cdw10 = static_cast<uint32_t>(lba);
    c.cdw11 = static_cast<uint32_t>(lba >> 32);
    c.cdw12 = blocks - 1;
    return c;
  }
  uint8_t* data() { return static_cast<uint8_t*>(buf_->data()); }
  // Number of Queues as the controller reports it (Get Features), 1's based.
  std::pair<uint32_t, uint32_t> queues_allocated() {
    sn::SubmissionEntry c{};
    c.opcode = sn::admin::kGetFeatures;
    c.cdw10 = sn::feature::kNumberOfQueues;
    const auto cpl = admin(c);
    if (nvme::cpl_is_error(cpl)) return {0, 0};
    return {(cpl.dw0 & 0xffff) + 1, (cpl.dw0 >> 16) + 1};
  }
  uint32_t bs() const { return ns_->block_size; }
  bool supports(uint16_t oncs_bit) const { return ctrl_->identify().oncs & oncs_bit; }
  // A CQ id beyond what the controller allocated (NCQA + 1), or 0 if NCQA is the maximum.
  uint16_t cqid_beyond_allocated() {
    const uint32_t ncqa = queues_allocated().second;
    return ncqa == 0 || ncqa >= 0xffff ? 0 : static_cast<uint16_t>(ncqa + 1);
  }
  Outcome write_then_read_back(uint8_t fill, uint64_t lba, uint32_t blocks);
  // Create I/O SQ 2 bound to `cqid` (which must fail): PASS when the command-specific status
  // is one of `allowed`. An SQ created all the same is deleted again.
  Outcome create_sq_on(uint16_t cqid, std::initializer_list<uint8_t> allowed) {
    sn::SubmissionEntry c{};
    c.opcode = sn::admin::kCreateIoSq;
    c.cdw10 = 2u | (15u << 16);
    c.cdw11 = 1u | uint32_t{cqid} << 16;
    const auto cpl = admin(c, data(), 4096);
    if (!nvme::cpl_is_error(cpl)) {
      sn::SubmissionEntry del{};
      del.opcode = sn::admin::kDeleteIoSq;
      del.cdw10 = 2;
      (void)admin(del);
      return {Outcome::kFail, "success: SQ 2 was created (and deleted again)"};
    }
    const nvme::Status s = nvme::Status::from_cqe(cpl.status);
    const bool ok = s.sct == sn::sct::kCommandSpecific &&
                    std::find(allowed.begin(), allowed.end(), s.sc) != allowed.end();
    return {ok ? Outcome::kPass : Outcome::kFail, status_text(cpl)};
  }

  nvme::Controller* ctrl_;
  nvme::Qpair* qp_;
  env::DmaRegion* buf_;
  const nvme::Namespace* ns_ = nullptr;
  bool fabrics_ = false;  // NVMe-oF: queues come by Connect, data by SGL (no PRP lists)
  // PCIe-only cases (Create/Delete I/O queues, a hand-built PRP list) are skipped on fabrics.
  static Outcome fabrics_skip() {
    return Outcome{Outcome::kSkip, "PCIe only: a fabrics controller's queues come by Connect"};
  }
  std::deque<Wait> waits_;  // stable addresses, kept to the end
  bool stalled_ = false;
};

Outcome Checker::write_then_read_back(uint8_t fill, uint64_t lba, uint32_t blocks) {
  std::memset(data(), fill, size_t{blocks} * bs());
  const auto w = io(rw(sn::nvm::kWrite, lba, blocks), data(), blocks * bs());
  if (nvme::cpl_is_error(w)) return {Outcome::kFail, "write: " + status_text(w)};
  std::memset(data(), ~fill, size_t{blocks} * bs());
  const auto r = io(rw(sn::nvm::kRead, lba, blocks), data(), blocks * bs());
  if (nvme::cpl_is_error(r)) return {Outcome::kFail, "read: " + status_text(r)};
  for (size_t i = 0; i < size_t{blocks} * bs(); ++i) {
    if (data()[i] != fill) return {Outcome::kFail, fmt::format("byte {} differs", i)};
  }
  return {Outcome::kPass, "written and read back"};
}

std::vector<Case> Checker::cases() {
  using namespace sn;
  std::vector<Case> v;
  auto add = [&v](const char* name, const char* ref, const char* expected,
                  std::function<Outcome()> fn) { v.push_back({name, ref, expected, std::move(fn)}); };

  // ---- admin: identify
  add("identify-controller-fields", "5.17.2.1",
      "SQES required 6 (max >= 6), CQES required 4 (max >= 4), NN >= 1, VER reported", [this] {
        const IdentifyController& id = ctrl_->identify();
        const bool ok = (id.sqes & 0xf) == 6 && (id.sqes >> 4) >= 6 && (id.cqes & 0xf) == 4 &&
                        (id.cqes >> 4) >= 4 && id.nn >= 1 && ctrl_->version() != 0;
        return Outcome{ok ? Outcome::kPass : Outcome::kFail,
                       fmt::format("SQES 0x{:02x} CQES 0x{:02x} NN {} VER 0x{:08x}", id.sqes,
                                   id.cqes, id.nn, ctrl_->version())};
      });
  add("identify-active-ns-list-ascending", "5.17.2.2", "success, ids ascending, ends with 0",
      [this] {
        SubmissionEntry c{};
        c.opcode = admin::kIdentify;
        c.cdw10 = cns::kActiveNamespaceList;
        std::memset(data(), 0xa5, 4096);
        const auto cpl = admin(c, data(), 4096);
        if (nvme::cpl_is_error(cpl)) return Outcome{Outcome::kFail, status_text(cpl)};
        const auto* ids = reinterpret_cast<const uint32_t*>(data());
        std::string seen;
        uint32_t prev = 0;
        for (int i = 0; i < 1024 && ids[i]; ++i) {
          if (ids[i] <= prev) return Outcome{Outcome::kFail, "not ascending: " + seen};
          prev = ids[i];
          seen += fmt::format("{} ", ids[i]);
        }
        return Outcome{Outcome::kPass, "namespaces " + seen};
      });
  add("identify-namespace-beyond-nn", "5.17.2.1 (Figure 274)",
      "Invalid Namespace or Format (NSID above NN)", [this] {
        SubmissionEntry c{};
        c.opcode = admin::kIdentify;
        c.cdw10 = cns::kNamespace;
        c.nsid = ctrl_->identify().nn + 1;
        return expect(admin(c, data(), 4096), sct::kGeneric, sc::kInvalidNamespaceOrFormat);
      });
  add("identify-reserved-cns", "5.17", "Invalid Field in Command (CNS 0x7f is reserved)", [this] {
    SubmissionEntry c{};
    c.opcode = admin::kIdentify;
    c.cdw10 = 0x7f;
    return expect(admin(c, data(), 4096), sct::kGeneric, sc::kInvalidField);
  });
  add("admin-invalid-opcode", "3.3.3.2.1 (Figure 95)", "Invalid Command Opcode (0x7e)", [this] {
    SubmissionEntry c{};
    c.opcode = 0x7e;
    return expect(admin(c), sct::kGeneric, sc::kInvalidOpcode);
  });

  // ---- admin: logs and features
  add("get-log-smart", "5.16.1.3", "success (the controller-wide page, NSID FFFFFFFFh)", [this] {
    SubmissionEntry c{};
    c.opcode = admin::kGetLogPage;
    c.nsid = 0xffffffff;
    c.cdw10 = log::kSmartHealth | ((512 / 4 - 1) << 16);
    const auto cpl = admin(c, data(), 512);
    if (nvme::cpl_is_error(cpl)) return Outcome{Outcome::kFail, status_text(cpl)};
    const auto* smart = reinterpret_cast<const SmartHealthLog*>(data());
    return Outcome{Outcome::kPass, fmt::format("critical warning 0x{:02x}", smart->critical_warning)};
  });
  add("get-log-error-information", "5.16.1.2", "success", [this] {
    SubmissionEntry c{};
    c.opcode = admin::kGetLogPage;
    c.nsid = 0xffffffff;
    c.cdw10 = log::kErrorInformation | ((64 / 4 - 1) << 16);
    return expect_success(admin(c, data(), 64));
  });
  add("get-log-reserved-page", "5.16 (Figure 199)", "Invalid Log Page (LID 0x7f is reserved)",
      [this] {
        SubmissionEntry c{};
        c.opcode = admin::kGetLogPage;
        c.nsid = 0xffffffff;
        c.cdw10 = 0x7f | ((512 / 4 - 1) << 16);
        return expect(admin(c, data(), 512), sct::kCommandSpecific, sc_cmd::kInvalidLogPage);
      });
  add("get-features-number-of-queues", "5.27.1.5",
      "success; NSQA/NCQA at least the queues granted at set-up", [this] {
        SubmissionEntry c{};
        c.opcode = admin::kGetFeatures;
        c.cdw10 = feature::kNumberOfQueues;
        const auto cpl = admin(c);
        if (nvme::cpl_is_error(cpl)) return Outcome{Outcome::kFail, status_text(cpl)};
        const uint32_t nsqa = (cpl.dw0 & 0xffff) + 1, ncqa = (cpl.dw0 >> 16) + 1;
        const bool ok = nsqa >= ctrl_->io_queues_granted() && ncqa >= ctrl_->io_queues_granted();
        return Outcome{ok ? Outcome::kPass : Outcome::kFail,
                       fmt::format("NSQA {} NCQA {} (granted {})", nsqa, ncqa,
                                   ctrl_->io_queues_granted())};
      });
  add("get-features-reserved-fid", "5.27.1 (Figure 317)",
      "Invalid Field in Command (FID 00h is reserved)", [this] {
        SubmissionEntry c{};
        c.opcode = admin::kGetFeatures;
        c.cdw10 = 0x00;
        return expect(admin(c), sct::kGeneric, sc::kInvalidField);
      });

  // ---- admin: queue management errors
  add("create-cq-qid-0", "5.4 (Figure 153)", "Invalid Queue Identifier (QID 0 is the admin CQ)",
      [this] {
        if (fabrics_) return fabrics_skip();
        SubmissionEntry c{};
        c.opcode = admin::kCreateIoCq;
        c.cdw10 = 0 | (15u << 16);
        c.cdw11 = 1;  // physically contiguous, no interrupts
        return expect(admin(c, data(), 4096), sct::kCommandSpecific,
                      sc_cmd::kInvalidQueueIdentifier);
      });
  add("create-cq-qid-beyond-allocated", "5.4 (Figure 153)",
      "Invalid Queue Identifier (QID = NCQA + 1)", [this] {
        if (fabrics_) return fabrics_skip();
        const uint16_t qid = cqid_beyond_allocated();
        if (qid == 0) return Outcome{Outcome::kSkip, "NCQA unknown or 65535"};
        SubmissionEntry c{};
        c.opcode = admin::kCreateIoCq;
        c.cdw10 = qid | (15u << 16);
        c.cdw11 = 1;
        return expect(admin(c, data(), 4096), sct::kCommandSpecific,
                      sc_cmd::kInvalidQueueIdentifier);
      });
  add("create-cq-size-above-mqes", "5.4 (Figure 153)", "Invalid Queue Size (QSIZE > CAP.MQES)",
      [this] {
        if (fabrics_) return fabrics_skip();
        const uint32_t mqes = ctrl_->max_queue_entries() - 1;
        if (mqes >= 0xffff) return Outcome{Outcome::kSkip, "CAP.MQES is 65535"};
        if (ctrl_->io_queues_granted() < 2) return Outcome{Outcome::kSkip, "one queue granted"};
        SubmissionEntry c{};
        c.opcode = admin::kCreateIoCq;
        c.cdw10 = 2u | (mqes + 1) << 16;  // QID 2 is free: only the size is wrong
        c.cdw11 = 1;
        const auto cpl = admin(c, data(), 4096);
        return expect(cpl, sct::kCommandSpecific, sc_cmd::kInvalidQueueSize);
      });
  // Create I/O SQ's CQID (5.5, Command Dword 11): 0 (the admin CQ) or an identifier that names
  // no I/O CQ should be answered Invalid Queue Identifier; the status table also defines
  // Completion Queue Invalid for a CQ that does not exist, so for an in-range CQID whose CQ
  // was never created either is within the spec.
  add("create-sq-cqid-0", "5.5", "Invalid Queue Identifier (CQID 0 is the admin CQ)", [this] {
        if (fabrics_) return fabrics_skip();
    if (ctrl_->io_queues_granted() < 2) return Outcome{Outcome::kSkip, "one queue granted"};
    return create_sq_on(0, {sc_cmd::kInvalidQueueIdentifier});
  });
  add("create-sq-cqid-beyond-allocated", "5.5", "Invalid Queue Identifier (CQID = NCQA + 1)",
      [this] {
        if (fabrics_) return fabrics_skip();
        if (ctrl_->io_queues_granted() < 2) return Outcome{Outcome::kSkip, "one queue granted"};
        const uint16_t cqid = cqid_beyond_allocated();
        if (cqid == 0) return Outcome{Outcome::kSkip, "NCQA unknown or 65535"};
        return create_sq_on(cqid, {sc_cmd::kInvalidQueueIdentifier});
      });
  add("create-sq-missing-cq", "5.5",
      "Completion Queue Invalid or Invalid Queue Identifier (CQID 2: no such CQ)", [this] {
        if (fabrics_) return fabrics_skip();
        if (ctrl_->io_queues_granted() < 2) return Outcome{Outcome::kSkip, "one queue granted"};
        return create_sq_on(2, {sc_cmd::kCompletionQueueInvalid, sc_cmd::kInvalidQueueIdentifier});
      });
  add("delete-sq-not-created", "5.7 (Figure 165)", "Invalid Queue Identifier", [this] {
        if (fabrics_) return fabrics_skip();
    SubmissionEntry c{};
    c.opcode = admin::kDeleteIoSq;
    c.cdw10 = ctrl_->io_queues_granted() > 1 ? 2 : queues_allocated().first + 1;
    return expect(admin(c), sct::kCommandSpecific, sc_cmd::kInvalidQueueIdentifier);
  });
  add("delete-cq-with-sq", "5.6 (Figure 163)",
      "Invalid Queue Deletion (SQ 1 still uses CQ 1)", [this] {
        if (fabrics_) return fabrics_skip();
        SubmissionEntry c{};
        c.opcode = admin::kDeleteIoCq;
        c.cdw10 = qp_->id();
        return expect(admin(c), sct::kCommandSpecific, sc_cmd::kInvalidQueueDeletion);
      });

  // ---- NVM: errors
  add("read-lba-out-of-range", "3.3.3.2.2 (Figure 96)", "LBA Out of Range (SLBA = NSZE)",
      [this] {
        return expect(io(rw(nvm::kRead, ns_->num_blocks, 1), data(), bs()), sct::kGeneric,
                      sc::kLbaOutOfRange);
      });
  add("write-crossing-the-end", "3.3.3.2.2 (Figure 96)",
      "LBA Out of Range (the last block + 1)", [this] {
        return expect(io(rw(nvm::kWrite, ns_->num_blocks - 1, 2), data(), 2 * bs()),
                      sct::kGeneric, sc::kLbaOutOfRange);
      });
  add("read-inactive-nsid", "3.3.3.2.1 (Figure 95)",
      "Invalid Namespace or Format (NSID above NN)", [this] {
        return expect(io(rw(nvm::kRead, 0, 1, ctrl_->identify().nn + 1), data(), bs()),
                      sct::kGeneric, sc::kInvalidNamespaceOrFormat);
      });
  add("io-invalid-opcode", "3.3.3.2.1 (Figure 95)", "Invalid Command Opcode (0x7e)", [this] {
    SubmissionEntry c{};
    c.opcode = 0x7e;
    c.nsid = ns_->id;
    return expect(io(c), sct::kGeneric, sc::kInvalidOpcode);
  });
  add("read-above-mdts", "5.17.2.1 (MDTS)", "Invalid Field in Command (MDTS + 1 page)", [this] {
        if (fabrics_) return fabrics_skip();
    const uint32_t mdts = ctrl_->max_transfer_bytes();
    if (mdts == 0 || mdts + 4096 > kBufferBytes / 2)
      return Outcome{Outcome::kSkip, "MDTS unlimited or above 1 MiB"};
    // The driver refuses such a command itself (its own guard): the PRP list is built here,
    // so the controller sees it. Data in the first half of the buffer, the list in the second.
    const uint32_t pages = mdts / 4096 + 1;
    auto* list = reinterpret_cast<uint64_t*>(data() + kBufferBytes / 2);
    for (uint32_t i = 1; i < pages; ++i) list[i - 1] = buf_->iova() + uint64_t{i} * 4096;
    auto c = rw(nvm::kRead, 0, pages * 4096 / bs());
    c.dptr.prp.prp1 = buf_->iova();
    c.dptr.prp.prp2 = buf_->iova() + kBufferBytes / 2;
    return expect(io(c), sct::kGeneric, sc::kInvalidField);
  });

  // ---- NVM: data
  add("write-read-full-mdts", "5.17.2.1 (MDTS)", "success, data back (one MDTS-sized transfer)",
      [this] {
        // MDTS 0 is no limit (Linux's nvmet reports it): the buffer's size then.
        const uint32_t mdts = ctrl_->max_transfer_bytes();
        const uint32_t blocks = std::min<uint32_t>(mdts ? mdts : kBufferBytes, kBufferBytes) / bs();
        return write_then_read_back(0x3c, 8, blocks);
      });
  add("write-fua", "7.1 (FUA)", "success", [this] {
    auto c = rw(nvm::kWrite, 1, 1);
    c.cdw12 |= nvm::kCdw12Fua;
    std::memset(data(), 0x11, bs());
    return expect_success(io(c, data(), bs()));
  });
  add("flush", "7.1", "success", [this] {
    SubmissionEntry c{};
    c.opcode = nvm::kFlush;
    c.nsid = ns_->id;
    return expect_success(io(c));
  });
  add("write-zeroes-reads-zeroes", "7.23", "success; the blocks read back as zeroes", [this] {
    if (!supports(oncs::kWriteZeroes)) return Outcome{Outcome::kSkip, "ONCS: no Write Zeroes"};
    if (auto o = write_then_read_back(0x77, 40, 4); o.kind != Outcome::kPass) return o;
    const auto z = io(rw(nvm::kWriteZeroes, 40, 4));
    if (nvme::cpl_is_error(z)) return Outcome{Outcome::kFail, "write zeroes: " + status_text(z)};
    std::memset(data(), 0xee, 4 * bs());
    const auto r = io(rw(nvm::kRead, 40, 4), data(), 4 * bs());
    if (nvme::cpl_is_error(r)) return Outcome{Outcome::kFail, "read: " + status_text(r)};
    for (size_t i = 0; i < 4 * size_t{bs()}; ++i)
      if (data()[i]) return Outcome{Outcome::kFail, fmt::format("byte {} is not zero", i)};
    return Outcome{Outcome::kPass, "zeroes"};
  });
  // Deallocate is advisory (NVM Command Set 2.0, Dataset Management: the controller "may"
  // deallocate, maybe only some blocks): each block then reads as the data last written, or
  // as DLFEAT says deallocated blocks read (001b zeroes, 010b ones; 000b: not reported, so
  // anything).
  add("deallocate-then-read", "NVM 3.2.3 / 5.17.2.1 (DLFEAT)",
      "success; blocks read as before, or as DLFEAT says deallocated blocks read", [this] {
        if (!supports(oncs::kDatasetManagement))
          return Outcome{Outcome::kSkip, "ONCS: no Dataset Management"};
        constexpr uint8_t kFill = 0x5a;
        if (auto o = write_then_read_back(kFill, 48, 4); o.kind != Outcome::kPass) return o;
        auto* range = reinterpret_cast<nvm::DsmRange*>(data() + kBufferBytes / 2);
        *range = {0, 4, 48};
        SubmissionEntry c{};
        c.opcode = nvm::kDatasetManagement;
        c.nsid = ns_->id;
        c.cdw10 = 0;  // one range
        c.cdw11 = nvm::kDsmDeallocate;
        const auto d = io(c, range, sizeof *range);
        if (nvme::cpl_is_error(d)) return Outcome{Outcome::kFail, "deallocate: " + status_text(d)};
        std::memset(data(), 0xee, 4 * bs());
        const auto r = io(rw(nvm::kRead, 48, 4), data(), 4 * bs());
        if (nvme::cpl_is_error(r)) return Outcome{Outcome::kFail, "read: " + status_text(r)};
        const uint8_t dlfeat = ns_->data.dlfeat & 7;
        if (dlfeat != 1 && dlfeat != 2) {
          return Outcome{Outcome::kPass, fmt::format("DLFEAT {}: deallocated content not "
                                                     "reported, not checked", dlfeat)};
        }
        const uint8_t deallocated = dlfeat == 1 ? 0x00 : 0xff;
        uint32_t kept = 0, dropped = 0;
        for (uint32_t b = 0; b < 4; ++b) {
          const uint8_t* blk = data() + size_t{b} * bs();
          auto all = [&](uint8_t v) { return std::all_of(blk, blk + bs(), [v](uint8_t x) { return x == v; }); };
          if (all(kFill)) ++kept;
          else if (all(deallocated)) ++dropped;
          else return Outcome{Outcome::kFail, fmt::format("block {}: neither the data written nor "
                                                          "what DLFEAT {} says", b, dlfeat)};
        }
        return Outcome{Outcome::kPass, fmt::format("{} block(s) deallocated (DLFEAT {}), {} kept",
                                                   dropped, dlfeat, kept)};
      });
  add("compare-match-and-miscompare", "7.3", "success on equal data, Compare Failure otherwise",
      [this] {
        if (!supports(oncs::kCompare)) return Outcome{Outcome::kSkip, "ONCS: no Compare"};
        if (auto o = write_then_read_back(0x42, 56, 2); o.kind != Outcome::kPass) return o;
        std::memset(data(), 0x42, 2 * bs());
        const auto same = io(rw(nvm::kCompare, 56, 2), data(), 2 * bs());
        if (nvme::cpl_is_error(same)) return Outcome{Outcome::kFail, "equal data: " + status_text(same)};
        data()[bs() + 7] ^= 1;
        return expect(io(rw(nvm::kCompare, 56, 2), data(), 2 * bs()), sct::kMediaError,
                      sc_media::kCompareFailure);
      });
  // Last: a controller may hold an Abort it has nothing to abort with (when it completes it
  // is implementation specific), which would stall the cases after it.
  add("abort-unknown-command", "5.1", "success (the command was not found: DW0 bit 0 set)",
      [this] {
        SubmissionEntry c{};
        c.opcode = admin::kAbort;
        c.cdw10 = qp_->id() | 0xfffeu << 16;  // a CID the driver never uses
        const auto cpl = admin(c);
        if (timed_out(cpl)) return Outcome{Outcome::kSkip, "held (the spec allows it)"};
        if (nvme::cpl_is_error(cpl)) return Outcome{Outcome::kFail, status_text(cpl)};
        return Outcome{cpl.dw0 & 1 ? Outcome::kPass : Outcome::kFail,
                       fmt::format("DW0 0x{:08x}", cpl.dw0)};
      });
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pollux-nvme-check: NVMe commands with spec-defined outcomes, case by case"};
  std::string trid_text;
  std::vector<std::string> known;
  bool list = false;
  app.add_option("-r,--trid", trid_text,
                 "transport ID (trtype:pcie traddr:BDF | trtype:vfio-user traddr:SOCKET)");
  app.add_option("--known", known,
                 "CASE=why: a known deviation of this implementation (prints KNOWN, not FAIL)");
  app.add_flag("--list", list, "print the cases and exit");
  if (auto rc = pollux::cli::parse(app, argc, argv)) return *rc;
  std::map<std::string, std::string> known_why;
  for (const std::string& k : known) {
    const auto eq = k.find('=');
    if (eq == std::string::npos || eq == 0) {
      fmt::print(stderr, "pollux-nvme-check: --known {}: expected CASE=why\n", k);
      return 2;
    }
    known_why[k.substr(0, eq)] = k.substr(eq + 1);
  }
  if (list) {
    for (const Case& c : Checker(nullptr, nullptr, nullptr).cases())
      fmt::print("{:<36} {:<22} {}\n", c.name, c.ref, c.expected);
    return 0;
  }
  if (trid_text.empty()) {
    fmt::print(stderr, "pollux-nvme-check: -r TRID is required\n");
    return 2;
  }
  auto trid = nvme::parse_transport_id(trid_text);
  if (!trid) {
    fmt::print(stderr, "pollux-nvme-check: {}\n", trid.error().message);
    return 2;
  }
  auto ctrl = nvme::connect(*trid);
  if (!ctrl) {
    fmt::print(stderr, "pollux-nvme-check: {}: {}\n", trid_text, ctrl.error().message);
    return 2;
  }
  if ((*ctrl)->namespace_ids().empty()) {
    fmt::print(stderr, "pollux-nvme-check: the controller has no active namespace\n");
    return 2;
  }
  auto qp = (*ctrl)->alloc_io_qpair();
  auto buf = env::DmaRegion::create(env::MemoryRegistry::global(), kBufferBytes);
  if (!qp || !buf) {
    fmt::print(stderr, "pollux-nvme-check: {}\n", !qp ? qp.error().message : buf.error().message);
    return 2;
  }
  Checker checker(ctrl->get(), qp->get(), buf->get());
  std::vector<Case> cases = checker.cases();
  for (const auto& [name, why] : known_why) {
    bool found = false;
    for (const Case& c : cases) found |= name == c.name;
    if (!found) {
      fmt::print(stderr, "pollux-nvme-check: --known {}: no such case\n", name);
      return 2;
    }
  }
  const auto& id = (*ctrl)->identify();
  fmt::print("pollux-nvme-check: {:.40s} serial {:.20s}, VER 0x{:08x}, namespace {} ({} x {} B)\n",
             id.mn, id.sn, (*ctrl)->version(), (*ctrl)->namespace_ids().front(),
             (*ctrl)->ns((*ctrl)->namespace_ids().front())->num_blocks,
             (*ctrl)->ns((*ctrl)->namespace_ids().front())->block_size);
  int failed = 0, passed = 0, skipped = 0, known_seen = 0;
  for (const Case& c : cases) {
    const Outcome o = checker.stalled()
                          ? Outcome{Outcome::kSkip, "not run: an earlier command is still held"}
                          : c.run();
    const auto k = known_why.find(c.name);
    const char* verdict = "PASS";
    if (o.kind == Outcome::kSkip) {
      verdict = "SKIP";
      ++skipped;
    } else if (o.kind == Outcome::kFail && k != known_why.end()) {
      verdict = "KNOWN";
      ++known_seen;
    } else if (o.kind == Outcome::kFail) {
      verdict = "FAIL";
      ++failed;
    } else {
      ++passed;
    }
    fmt::print("{:<5} {:<36} {}  [spec {}: {}]{}\n", verdict, c.name, o.observed, c.ref,
               c.expected, k != known_why.end() ? "  known: " + k->second : "");
  }
  fmt::print("pollux-nvme-check: {} passed, {} failed, {} known deviations, {} skipped\n", passed,
             failed, known_seen, skipped);
  // A held command keeps its queue: the process exits with the controller as it is.
  if (!checker.stalled()) (*ctrl)->free_io_qpair(std::move(qp).value());
  return failed ? 1 : 0;
}
