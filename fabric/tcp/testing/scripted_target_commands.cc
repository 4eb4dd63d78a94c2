// The scripted target's commands (scripted_target.h): what it answers to Connect, Property
// Get/Set, Authentication and the other fabrics commands, the admin commands a host needs
// and I/O on its RAM namespace.
#include <algorithm>
#include <cstring>

#include "fabric/tcp/testing/scripted_target.h"

namespace pollux::fabric::tcp::testing {

namespace {

void put_padded(char* field, std::size_t size, const std::string& s) {
  std::memset(field, ' ', size);
  std::memcpy(field, s.data(), std::min(size, s.size()));
}

}  // namespace

void ScriptedTarget::execute(Conn& c, Command cmd) {
  if (cmd.fabrics()) {
    execute_fabrics(c, cmd);
  } else if (c.qid_ < 0) {
    c.send_resp(cmd.sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kCommandSequenceError));
  } else if (c.qid_ == 0) {
    execute_admin(c, cmd);
  } else {
    execute_io(c, cmd);
  }
}

void ScriptedTarget::execute_fabrics(Conn& c, const Command& cmd) {
  const uint16_t cid = cmd.sqe.cid;
  const uint16_t invalid_field = sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidField);
  switch (cmd.fctype()) {
    case nf::fctype::kConnect: {
      nf::ConnectCommand cc;
      std::memcpy(&cc, &cmd.sqe, sizeof cc);
      if (cmd.data.size() != sizeof(nf::ConnectData)) {
        violation(c, "Connect data of " + std::to_string(cmd.data.size()) + " bytes");
        c.send_resp(cid, invalid_field);
        return;
      }
      nf::ConnectData d;
      std::memcpy(&d, cmd.data.data(), sizeof d);
      if (cc.recfmt != nf::connect::kRecfmt)
        violation(c, "Connect RECFMT " + std::to_string(cc.recfmt));
      const uint16_t bad_params =
          sn::status::make(sn::sct::kCommandSpecific, nf::sc::kConnectInvalidParameters);
      if (std::string(d.subnqn, strnlen(d.subnqn, sizeof d.subnqn)) != subnqn()) {
        c.send_resp(
            cid, bad_params,
            nf::connect::make_invalid_parameter_dw0(offsetof(nf::ConnectData, subnqn), true));
        return;
      }
      uint16_t cntlid;
      {
        std::lock_guard lock(mu_);
        if (cc.qid == nf::connect::kAdminQid) {
          cntlid = next_cntlid_++;
          controllers_[cntlid] = Controller{};
        } else {
          auto it = controllers_.find(d.cntlid);
          cntlid = it != controllers_.end() && (it->second.csts & sn::csts::kRdy) ? d.cntlid : 0;
        }
      }
      if (cntlid == 0) {
        c.send_resp(
            cid, bad_params,
            nf::connect::make_invalid_parameter_dw0(offsetof(nf::ConnectData, cntlid), true));
        return;
      }
      c.qid_ = cc.qid;
      c.cntlid_ = cntlid;
      c.sqsize_ = cc.sqsize;
      {
        std::lock_guard lock(mu_);
        ConnInfo& info = log_.conns[c.id_];
        info.qid = cc.qid;
        info.cntlid = cntlid;
        info.connect = cc;
        info.connect_data = d;
      }
      changed();
      c.send_resp(cid, 0, nf::connect::make_success_dw0(cntlid));
      return;
    }
    case nf::fctype::kPropertyGet: {
      nf::PropertyGetCommand g;
      std::memcpy(&g, &cmd.sqe, sizeof g);
      uint64_t v = 0;
      bool ok = c.qid_ == 0;
      {
        std::lock_guard lock(mu_);
        const Controller& ctrl = controllers_[c.cntlid_];
        switch (g.ofst) {
          case sn::reg::kCap:
            v = sn::cap::make(options_.mqes, true, 1, 0, false, sn::cap::kCssNvm, 0, 0);
            break;
          case sn::reg::kVs:
            v = sn::make_version(1, 4);
            break;
          case sn::reg::kCc:
            v = ctrl.cc;
            break;
          case sn::reg::kCsts:
            v = ctrl.csts;
            break;
          default:
            ok = false;
        }
      }
      if (!ok) {
        c.send_resp(cid, invalid_field);
      } else if (nf::property::size_bytes(g.attrib) == 8) {
        c.send_resp(cid, 0, static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32));
      } else {
        c.send_resp(cid, 0, static_cast<uint32_t>(v));
      }
      return;
    }
    case nf::fctype::kPropertySet: {
      nf::PropertySetCommand s;
      std::memcpy(&s, &cmd.sqe, sizeof s);
      if (c.qid_ != 0) {
        c.send_resp(cid, invalid_field);
        return;
      }
      if (s.ofst == sn::reg::kCc) {
        std::lock_guard lock(mu_);
        Controller& ctrl = controllers_[c.cntlid_];
        const uint32_t cc = static_cast<uint32_t>(s.value);
        // Ready the moment it is enabled, idle the moment it is not; shutdowns finish at once.
        ctrl.csts = (cc & sn::cc::kEn) ? sn::csts::kRdy : 0;
        if (sn::cc::shn(cc) != sn::cc::kShnNone) ctrl.csts |= sn::csts::kShstComplete << 2;
        ctrl.cc = cc;
      }
      c.send_resp(cid);
      return;
    }
    default:
      c.send_resp(cid, sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidOpcode));
  }
}

std::vector<uint8_t> ScriptedTarget::identify(const Conn& c, const sn::SubmissionEntry& sqe,
                                              bool* ok) {
  const TargetOptions o = options();
  std::vector<uint8_t> out(4096, 0);
  *ok = true;
  switch (sqe.cdw10 & 0xff) {
    case sn::cns::kController: {
      sn::IdentifyController id{};
      id.vid = 0x1b36;
      put_padded(id.sn, sizeof id.sn, "POLLUX-SCRIPTED");
      put_padded(id.mn, sizeof id.mn, "Pollux scripted NVMe/TCP target");
      put_padded(id.fr, sizeof id.fr, "1.0");
      id.mdts = o.mdts;
      id.cntlid = c.cntlid_;
      id.ver = sn::make_version(1, 4);
      id.acl = 3;
      id.aerl = 3;
      id.sqes = 0x66;
      id.cqes = 0x44;
      id.maxcmd = static_cast<uint16_t>(o.mqes + 1);
      id.nn = 1;
      id.sgls = sn::sgls::kSupported;
      id.kas = 1;
      id.cqt = o.cqt_ms;
      std::memcpy(id.subnqn, o.subnqn.data(), std::min(o.subnqn.size(), sizeof id.subnqn - 1));
      nf::IdentifyControllerFabrics f{};
      f.ioccsz = o.ioccsz;
      f.iorcsz = 1;
      f.msdbd = 1;
      std::memcpy(id.nvmeof, &f, sizeof f);
      std::memcpy(out.data(), &id, sizeof id);
      break;
    }
    case sn::cns::kActiveNamespaceList:
      if (sqe.nsid < 1) {
        const uint32_t one = 1;
        std::memcpy(out.data(), &one, 4);
      }
      break;
    case sn::cns::kNamespace:
      if (sqe.nsid == 1) {
        sn::IdentifyNamespace ns{};
        ns.nsze = ns.ncap = ns.nuse = o.num_blocks;
        ns.lbaf[0].lbads = static_cast<uint8_t>(std::countr_zero(o.block_size));
        std::memcpy(out.data(), &ns, sizeof ns);
      }
      break;
    default:
      *ok = false;
  }
  return out;
}

void ScriptedTarget::execute_admin(Conn& c, const Command& cmd) {
  const sn::SubmissionEntry& sqe = cmd.sqe;
  switch (sqe.opcode) {
    case sn::admin::kIdentify: {
      bool ok;
      std::vector<uint8_t> data = identify(c, sqe, &ok);
      if (!ok) {
        c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidField));
        return;
      }
      data.resize(std::min<std::size_t>(data.size(), sqe.dptr.sgl1.length));
      c.send_read_data(sqe.cid, data);
      return;
    }
    case sn::admin::kSetFeatures: {
      uint32_t dw0 = 0;
      if ((sqe.cdw10 & 0xff) == sn::feature::kNumberOfQueues) {
        const uint32_t want = std::min(sqe.cdw11 & 0xffff, sqe.cdw11 >> 16) + 1;
        const uint32_t n = std::min<uint32_t>(want, options().io_queues);
        dw0 = (n - 1) | (n - 1) << 16;
      }
      c.send_resp(sqe.cid, 0, dw0);
      return;
    }
    case sn::admin::kGetFeatures:
    case sn::admin::kKeepAlive:
      c.send_resp(sqe.cid);
      return;
    case sn::admin::kAsyncEventRequest:
      return;  // held: nothing to report
    default:
      c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidOpcode));
  }
}

void ScriptedTarget::execute_io(Conn& c, const Command& cmd) {
  const sn::SubmissionEntry& sqe = cmd.sqe;
  const TargetOptions o = options();
  if (sqe.opcode == sn::nvm::kFlush) {
    c.send_resp(sqe.cid);
    return;
  }
  if (sqe.opcode != sn::nvm::kRead && sqe.opcode != sn::nvm::kWrite) {
    c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidOpcode));
    return;
  }
  if (sqe.nsid != 1) {
    c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kInvalidNamespaceOrFormat));
    return;
  }
  const uint64_t bytes = uint64_t{sqe.nlb()} * o.block_size;
  if (sqe.slba() + sqe.nlb() > o.num_blocks) {
    c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kLbaOutOfRange));
    return;
  }
  if (sqe.dptr.sgl1.length != bytes) {
    violation(c, "SGL length " + std::to_string(sqe.dptr.sgl1.length) + " for " +
                     std::to_string(bytes) + " bytes");
    c.send_resp(sqe.cid, sn::status::make(sn::sct::kGeneric, sn::sc::kDataSglLengthInvalid));
    return;
  }
  const uint64_t at = sqe.slba() * o.block_size;
  if (sqe.opcode == sn::nvm::kRead) {
    c.send_read_data(sqe.cid, ram(at, bytes));
    return;
  }
  if (cmd.data.size() != bytes) {
    violation(c, "write of " + std::to_string(bytes) + " bytes came with " +
                     std::to_string(cmd.data.size()));
  }
  fill_ram(at, std::span(cmd.data).first(std::min<std::size_t>(bytes, cmd.data.size())));
  c.send_resp(sqe.cid);
}

}  // namespace pollux::fabric::tcp::testing
