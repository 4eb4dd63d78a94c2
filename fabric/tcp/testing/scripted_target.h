// Test support: a scripted NVMe/TCP target in the test process. It listens on 127.0.0.1 (an
// ephemeral port), serves each accepted connection on a thread of its own and plays a small
// controller: ICReq/ICResp, Connect (admin: a new CNTLID; I/O queues: that CNTLID), Property
// Get/Set of CAP/VS/CC/CSTS (CC.EN drives CSTS.RDY at once, CC.SHN completes at once),
// Identify (controller with the fabrics IOCCSZ, active namespace list, namespace), Set
// Features (Number of Queues; others accepted), Keep Alive, Async Event Requests (held) and
// Read/Write/Flush on one RAM namespace.
//
// What makes it a test tool:
//  - every PDU a host sends is logged as it was on the wire (digests checked, padding kept),
//    and so is what the target sent;
//  - what a host does that the NVMe/TCP or fabrics specifications do not allow (a command
//    before Connect, a reused CID, a wrong digest, H2CData outside the R2T it answers, a wrong
//    PDO or PLEN...) is recorded as a violation: tests expect none unless they provoke one;
//  - a hook sees every command capsule first and may answer it itself, hold it, or send any
//    PDU, well formed or not (Conn below);
//  - options choose how data moves: C2HData sizes, the SUCCESS flag, PDO padding, the R2T
//    plan for writes, MAXH2CDATA, CPDA, the digests granted, no ICResp at all.
//
// Independent of the host transport (its own CRC32C), so later tests — the target's, fuzzing —
// can reuse it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "spec/nvme.h"
#include "spec/nvme_fabrics.h"
#include "spec/nvme_tcp.h"

namespace pollux::fabric::tcp::testing {

namespace sn = spec::nvme;
namespace nt = spec::nvme_tcp;
namespace nf = spec::nvmf;

// The NVMe/TCP digest of n bytes: CRC32C, initial value ~0, result inverted.
uint32_t crc32c(const void* p, std::size_t n);

using Clock = std::chrono::steady_clock;

// One PDU as it travelled (either way).
struct Pdu {
  int conn = -1;
  Clock::time_point at{};
  nt::CommonHeader ch{};
  std::vector<uint8_t> header;  // HLEN bytes
  std::vector<uint8_t> pad;     // between the header (and its digest) and PDO
  std::vector<uint8_t> data;    // the PDU data, without padding or digest
  bool has_hdgst = false, has_ddgst = false;
  bool hdgst_ok = true, ddgst_ok = true;

  // The header as a PDU structure (nt::R2t, nt::TermReq...).
  template <class T>
  T as() const {
    T t{};
    std::memcpy(&t, header.data(), std::min(sizeof t, header.size()));
    return t;
  }
  // CapsuleCmd: the SQE.
  sn::SubmissionEntry sqe() const { return as<nt::CapsuleCmd>().sqe; }
};

// A command capsule as the target received it.
struct Command {
  int conn = -1;
  int qid = -1;  // -1 before the connection's Connect
  sn::SubmissionEntry sqe{};
  std::vector<uint8_t> data;  // in-capsule data (hooks); all write data (execution)

  bool fabrics() const { return sqe.opcode == nf::kOpcodeFabrics; }
  uint8_t fctype() const { return reinterpret_cast<const uint8_t*>(&sqe)[4]; }
  bool is_connect() const { return fabrics() && fctype() == nf::fctype::kConnect; }
};

// What the target learned about one connection.
struct ConnInfo {
  nt::IcReq icreq{};
  bool icreq_seen = false;
  uint8_t digests = 0;  // granted in ICResp
  int qid = -1;         // from its Connect
  uint16_t cntlid = 0;
  nf::ConnectCommand connect{};
  nf::ConnectData connect_data{};
  bool closed = false;  // end of stream (or reset) seen
};

// Everything observed, under the target's lock (ScriptedTarget::inspect / wait).
struct Log {
  std::vector<Pdu> received;    // from hosts, every connection, in arrival order
  std::vector<Pdu> sent;        // to hosts (headers only: data left out)
  std::vector<ConnInfo> conns;  // by connection number (accept order)
  std::vector<std::string> violations;

  // Received PDUs of one type (and connection, unless -1).
  std::vector<const Pdu*> of_type(uint8_t type, int conn = -1) const;
  // Command capsules of a connection, in order.
  std::vector<sn::SubmissionEntry> commands(int conn) const;
  // The connection whose Connect named `qid` most recently (-1: none).
  int conn_of_qid(int qid) const;
};

struct TargetOptions {
  std::string subnqn = "nqn.2026-01.io.pollux:scripted-target";
  // ICResp.
  bool send_icresp = true;
  uint8_t cpda = 0;
  uint32_t maxh2cdata = 128 * 1024;
  std::optional<uint8_t> icresp_dgst;  // as given; else the digests the host asked for
  // Controller.
  uint16_t mqes = 127;  // CAP.MQES, 0's based
  uint8_t mdts = 0;
  uint32_t ioccsz = (sizeof(sn::SubmissionEntry) + 8192) / nf::kCapsuleSizeUnit;
  uint16_t io_queues = 4;  // Number of Queues granted at most
  uint16_t cqt_ms = 0;     // Identify CQT (KAS is 1: 100 ms)
  uint32_t block_size = 512;
  uint64_t num_blocks = 8192;
  // Data movement. C2HData: at most c2h_chunk bytes per PDU (0: one PDU), the SUCCESS flag on
  // the last one (no CapsuleResp then), PDO (0: the least HPDA allows).
  uint32_t c2h_chunk = 0;
  bool c2h_success = false;
  uint8_t c2h_pdo = 0;
  // Writes without in-capsule data: the R2Ts to send, one at a time, as (offset, length) for a
  // transfer of `len` bytes (none: one R2T for all of it).
  std::function<std::vector<std::pair<uint32_t, uint32_t>>(uint32_t len)> r2t_plan;
};

class ScriptedTarget;

// One connection, as a hook sees it (on the connection's thread). Sends use the digests in
// force on the connection.
class Conn {
 public:
  int id() const { return id_; }
  int qid() const { return qid_; }
  uint8_t digests() const { return digests_; }
  bool hdgst() const { return digests_ & nt::dgst::kHdgstEnable; }
  bool ddgst() const { return digests_ & nt::dgst::kDdgstEnable; }

  // A CapsuleResp (the command is then no longer outstanding).
  void send_resp(uint16_t cid, uint16_t status = 0, uint32_t dw0 = 0, uint32_t dw1 = 0);
  struct C2h {
    uint16_t cccid = 0;
    uint32_t datao = 0;
    std::span<const uint8_t> data;
    uint8_t flags = 0;   // LAST_PDU, SUCCESS; digest flags are added
    uint32_t pdo = 0;    // 0: the least HPDA allows
    uint32_t datal = 0;  // 0: data.size(); else claimed in the header as given
    bool bad_hdgst = false, bad_ddgst = false;
  };
  void send_c2h(const C2h& c);
  // Read data for `cid` as the options say (C2HData PDUs, then a CapsuleResp unless SUCCESS).
  void send_read_data(uint16_t cid, std::span<const uint8_t> data);
  void send_r2t(uint16_t cid, uint16_t ttag, uint32_t offset, uint32_t length);
  void send_c2h_term(uint16_t fes, uint32_t fei);
  // Bytes as they are, and several PDUs in one send (one segment on loopback).
  void send_raw(std::span<const uint8_t> bytes);
  static std::vector<uint8_t> r2t_bytes(uint16_t cid, uint16_t ttag, uint32_t offset,
                                        uint32_t length, bool hdgst);
  void close();

 private:
  friend class ScriptedTarget;
  Conn(ScriptedTarget& t, int id, int fd) : target_(t), id_(id), fd_(fd) {}
  bool send_all(const void* p, std::size_t n);
  void send_pdu(nt::CommonHeader& ch, const void* header, uint32_t hlen, uint32_t pdo,
                std::span<const uint8_t> data, bool bad_hdgst, bool bad_ddgst,
                uint32_t datal_claimed);

  ScriptedTarget& target_;
  int id_;
  int fd_;
  int qid_ = -1;
  uint16_t cntlid_ = 0;
  uint16_t sqsize_ = 0;
  uint8_t digests_ = 0;
  uint8_t hpda_ = 0;
  uint32_t maxh2cdata_ = 0;
  uint8_t cpda_ = 0;
  std::set<uint16_t> outstanding_;  // CIDs the host has given and not seen completed
  std::set<uint16_t> scripted_;     // CIDs a hook took over: their H2CData is the hook's business
  // Writes waiting for H2C data, by CID.
  struct Write {
    Command cmd;
    std::vector<std::pair<uint32_t, uint32_t>> plan;
    std::size_t piece = 0;
    uint16_t ttag = 0;
    uint32_t got = 0;  // of the current R2T
  };
  std::map<uint16_t, Write> writes_;
  uint16_t next_ttag_ = 1;
};

class ScriptedTarget {
 public:
  explicit ScriptedTarget(TargetOptions options = {});
  ~ScriptedTarget();
  ScriptedTarget(const ScriptedTarget&) = delete;
  ScriptedTarget& operator=(const ScriptedTarget&) = delete;

  uint16_t port() const { return port_; }
  std::string subnqn() const;

  // Options may change while hosts are connected (ICResp settings apply to new connections).
  void update(const std::function<void(TargetOptions&)>& change);
  TargetOptions options() const;

  // Called for every command capsule before the target handles it: true means the hook took
  // care of it (answered it, held it, broke the connection...).
  using Hook = std::function<bool(Conn&, const Command&)>;
  void set_hook(Hook hook);

  // Ends a connection from outside (any thread), as a target that drops it would.
  void close_connection(int conn);

  template <class F>
  auto inspect(F f) const {
    std::lock_guard lock(mu_);
    return f(log_);
  }
  // Waits until pred(log) holds; false when `timeout` passed first.
  bool wait(const std::function<bool(const Log&)>& pred,
            std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::vector<std::string> violations() const;

  // The namespace's bytes.
  std::vector<uint8_t> ram(uint64_t offset, std::size_t len) const;
  void fill_ram(uint64_t offset, std::span<const uint8_t> bytes);

 private:
  friend class Conn;
  struct Controller {
    uint32_t cc = 0;
    uint32_t csts = 0;
  };
  void accept_loop();
  void serve(int id, int fd);
  bool handshake(Conn& c);
  bool read_pdu(Conn& c, Pdu& pdu);
  void check_host_pdu(Conn& c, const Pdu& p);
  void on_capsule(Conn& c, const Pdu& p);
  void on_h2c_data(Conn& c, const Pdu& p);
  void next_r2t(Conn& c, Conn::Write& w);
  void execute(Conn& c, Command cmd);
  void execute_fabrics(Conn& c, const Command& cmd);
  void execute_admin(Conn& c, const Command& cmd);
  void execute_io(Conn& c, const Command& cmd);
  std::vector<uint8_t> identify(const Conn& c, const sn::SubmissionEntry& sqe, bool* ok);
  void violation(const Conn& c, const std::string& what);
  void record_sent(const Conn& c, const nt::CommonHeader& ch, const void* header, uint32_t hlen);
  void changed() { cv_.notify_all(); }

  TargetOptions options_;  // under mu_
  Hook hook_;              // under mu_
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Log log_;
  std::vector<int> fds_;  // by connection number; -1 once closed by its thread
  std::vector<std::thread> threads_;
  std::map<uint16_t, Controller> controllers_;
  uint16_t next_cntlid_ = 1;
  std::vector<uint8_t> ram_;
};

}  // namespace pollux::fabric::tcp::testing
