// nvme::Controller over fabrics: registers as properties (Property Get/Set), the Connect of
// each queue, DH-HMAC-CHAP, keep-alive. Registers of a PCIe controller are read here too.
#include <cstring>

#include "driver/nvme/controller.h"
#include "driver/nvme/controller_internal.h"
#include "driver/nvme/status.h"
#include "spec/nvme_fabrics.h"

namespace pollux::nvme {

namespace nf = spec::nvmf;
using detail::host_id;

// --------------------------------------------------------------- registers, fabrics ---

uint32_t Controller::reg32(uint32_t offset) {
  if (!transport_->fabrics()) return transport_->read32(offset);
  auto v = property_get(offset, nf::property::kSize4);
  return v ? static_cast<uint32_t>(*v) : ~0u;
}

uint64_t Controller::reg64(uint32_t offset) {
  if (!transport_->fabrics()) return transport_->read64(offset);
  auto v = property_get(offset, nf::property::kSize8);
  return v ? *v : ~0ull;
}

void Controller::set_reg32(uint32_t offset, uint32_t value) {
  if (!transport_->fabrics()) {
    transport_->write32(offset, value);
  } else {
    (void)property_set(offset, nf::property::kSize4, value);  // a failure shows in CSTS next
  }
}

void Controller::set_reg64(uint32_t offset, uint64_t value) {
  if (!transport_->fabrics()) {
    transport_->write64(offset, value);
  } else {
    (void)property_set(offset, nf::property::kSize8, value);
  }
}

Result<uint64_t> Controller::property_get(uint32_t offset, uint8_t attrib) {
  nf::PropertyGetCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kPropertyGet;
  c.attrib = attrib;
  c.ofst = offset;
  sn::SubmissionEntry cmd;
  std::memcpy(&cmd, &c, sizeof cmd);
  auto cpl = admin_sync(cmd);
  if (!cpl) return cpl.error();
  return nf::property_value(*cpl);
}

Result<sn::CompletionEntry> Controller::property_set(uint32_t offset, uint8_t attrib,
                                                     uint64_t value) {
  nf::PropertySetCommand c{};
  c.opcode = nf::kOpcodeFabrics;
  c.fctype = nf::fctype::kPropertySet;
  c.attrib = attrib;
  c.ofst = offset;
  c.value = value;
  sn::SubmissionEntry cmd;
  std::memcpy(&cmd, &c, sizeof cmd);
  return admin_sync(cmd);
}

Result<sn::CompletionEntry> Controller::run_on(Qpair& qp, const sn::SubmissionEntry& cmd,
                                               void* data, uint32_t len) {
  struct Wait {
    bool done = false;
    sn::CompletionEntry cpl{};
  } wait;
  const int rc = qp.submit_first(
      cmd, data, len,
      [](void* ctx, const sn::CompletionEntry& cpl) {
        auto* w = static_cast<Wait*>(ctx);
        w->cpl = cpl;
        w->done = true;
      },
      &wait);
  if (rc != 0) return make_error(-rc, "submit failed");
  const uint64_t deadline = clock_.now() + clock_.us_to_ticks(options_.admin_timeout_us);
  while (!wait.done) {
    if (qp.process_completions() < 0) return make_error(ENODEV, "gone");
    if (wait.done) break;
    if (qp.transport().broken() || clock_.now() > deadline) {
      qp.fail_all(sn::status::make(sn::sct::kGeneric, sn::sc::kAbortedByRequest));
      return make_error(qp.transport().broken() ? ECONNRESET : ETIMEDOUT,
                        qp.transport().broken() ? "the connection broke" : "no answer in time");
    }
    wait_turn();
  }
  if (cpl_is_error(wait.cpl)) return make_error(EIO, describe(Status::from_cqe(wait.cpl.status)));
  return wait.cpl;
}

// DH-HMAC-CHAP on a connected queue (dhchap_host.h): Authentication Send/Receive commands run
// ahead of anything waiting there, the messages in the controller's DMA buffer.
std::string Controller::authenticate_queue(Qpair& qp) {
  std::lock_guard lock(auth_mu_);
  auto* buf = static_cast<uint8_t*>(auth_buf_->data());
  auto command = [](uint8_t fctype, uint32_t len) {
    nf::AuthenticationCommand a{};
    a.opcode = nf::kOpcodeFabrics;
    a.fctype = fctype;
    a.secp = nf::kSecpNvme;
    a.spsp0 = spec::nvme_auth::kSpsp0;
    a.spsp1 = spec::nvme_auth::kSpsp1;
    a.length = len;
    sn::SubmissionEntry cmd;
    std::memcpy(&cmd, &a, sizeof cmd);
    return cmd;
  };
  dhchap::HostExchange ex;
  ex.send = [&](const uint8_t* msg, uint32_t len) -> Result<std::monostate> {
    auto cpl = run_on(qp, command(nf::fctype::kAuthenticationSend, len), const_cast<uint8_t*>(msg),
                      len);
    if (!cpl) return cpl.error();
    return std::monostate{};
  };
  ex.receive = [&](uint8_t* into, uint32_t cap) -> Result<std::monostate> {
    auto cpl = run_on(qp, command(nf::fctype::kAuthenticationReceive, cap), into, cap);
    if (!cpl) return cpl.error();
    return std::monostate{};
  };
  auto r = dhchap::authenticate_host(*auth_, auth_tid_++, buf, ex);
  if (!r) {
    ++stats_.authentication_failures;
    return "authenticate queue " + std::to_string(qp.id()) + " with " + auth_->subnqn +
           " (DH-HMAC-CHAP): " + r.error().message;
  }
  ++stats_.authentications;
  return "";
}

// Fabrics: the association lives while the controller hears from the host within KATO.
void Controller::keep_alive() {
  if (!transport_->fabrics() || options_.keep_alive_timeout_ms == 0) return;
  const uint64_t now = clock_.now();
  // The host's side of KATO (as Linux's host does): a Keep Alive unanswered for KATO means the
  // controller no longer answers — recover now rather than after the admin timeout.
  if (keep_alive_pending_) {
    if (now - keep_alive_sent_ >=
        clock_.us_to_ticks(uint64_t{options_.keep_alive_timeout_ms} * 1000)) {
      keep_alive_pending_ = false;
      ++stats_.keep_alive_expired;
      request_reset();
    }
    return;  // one Keep Alive at a time
  }
  if (now < next_keep_alive_) return;
  next_keep_alive_ = now + clock_.us_to_ticks(uint64_t{options_.keep_alive_timeout_ms} * 500);
  sn::SubmissionEntry cmd{};
  cmd.opcode = sn::admin::kKeepAlive;
  const int rc = admin_->submit_raw(
      cmd, nullptr, 0,
      [](void* ctx, const sn::CompletionEntry& cpl) {
        auto* c = static_cast<Controller*>(ctx);
        c->keep_alive_pending_ = false;
        // A refused Keep Alive (not a reset ending it): the association is in doubt.
        if (cpl_is_error(cpl) && sn::status::sc(cpl.status) != sn::sc::kAbortedByRequest) {
          c->request_reset();
        }
      },
      this);
  if (rc == 0) {
    keep_alive_pending_ = true;
    keep_alive_sent_ = now;
  }
}

// Fabrics: every queue's connection holds (the caller holds admin_mu_).
bool Controller::connections_ok() {
  if (admin_ && admin_->transport().broken()) return false;
  for (Qpair* qp : io_qpairs_) {
    // A queue its owner is still connecting (alloc_io_qpair_async) is not a lost one.
    if (qp->transport().broken() && !io_connects_.contains(qp)) return false;
  }
  return true;
}

}  // namespace pollux::nvme
