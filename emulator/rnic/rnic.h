// The Pollux RNIC as hardware, functionally: BAR0 registers and a command mailbox, doorbells,
// and the RoCEv2 Reliable Connected transport over a Wire (spec/rnic.h is the driver-facing
// contract, spec/roce.h the packets). Everything the driver gives it (WQEs, scatter/gather
// lists, rings, the mailbox) is read from host memory by DMA through HostMemory.
//
// process(now_ns) does the work due at virtual time now (doorbells, received packets,
// transmissions, timers, completions) and next_timer_ns() says when it next needs to run
// without any new input. Functional by default (everything takes no time); with a timing
// profile (RnicConfig::timing, nic_timing.h) each step is dated: doorbells cross PCIe, WQEs
// and payloads are read by DMA, packets go through the transmit and receive pipelines and
// wait for room on the port (the wire's network serialises them), received payloads and
// CQEs are written by DMA, and a completion becomes visible to the host only when its CQE
// write lands.
//
// Single-threaded: registers, receive() and process() are called from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "emulator/rnic/host_memory.h"
#include "emulator/rnic/nic_profile.h"
#include "emulator/rnic/nic_timing.h"
#include "emulator/rnic/resources.h"
#include "emulator/rnic/wire.h"
#include "spec/rnic.h"
#include "spec/roce.h"

namespace pollux::emu::rnic {

struct RnicConfig {
  spec::roce::Mtu max_mtu = spec::roce::Mtu::k4096;
  uint32_t max_inflight_packets = 256;  // per QP, unacknowledged request packets
  // The NIC's timing (PCIe, pipelines; the network's part is the wire's): none = functional.
  std::optional<NicProfile> timing;
};

struct RnicCounters {
  uint64_t tx_packets = 0, rx_packets = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;
  uint64_t retransmitted_packets = 0;
  uint64_t timeouts = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0;
  uint64_t seq_naks_sent = 0;
  uint64_t icrc_errors = 0;
  uint64_t dropped_packets = 0;  // unknown QP, QP not ready, malformed
  uint64_t duplicate_requests = 0;
  uint64_t dma_faults = 0;
  uint64_t cq_overflows = 0;
  uint64_t commands = 0, command_errors = 0;
  uint64_t pushed_wqes = 0;  // send WQEs taken from the push window (no DMA read)
};

class Rnic final : public WirePort {
 public:
  // `doorbells`: the 4 KiB doorbell page (shared with the host, or owned by a test);
  // `push`: the push window (sr::reg::kPushSize bytes, BAR0 from kPushBase), or nullptr for a
  // NIC that reads every WQE from the ring.
  Rnic(HostMemory& memory, volatile uint8_t* doorbells, uint64_t port_address,
       RnicConfig config = {}, volatile uint8_t* push = nullptr);

  void connect(Wire* wire) { wire_ = wire; }
  uint64_t port_address() const { return port_address_; }

  // ---- BAR0 registers below the doorbell page (aligned 32/64-bit accesses) ----
  uint32_t read32(uint32_t offset) const;
  uint64_t read64(uint32_t offset) const;
  void write32(uint32_t offset, uint32_t value);
  void write64(uint32_t offset, uint64_t value);
  // Function-level reset: every resource is gone, the NIC is disabled.
  void reset();

  // ---- the link ----
  void receive(uint64_t src_address, const uint8_t* packet, std::size_t len) override;

  // ---- device work ----
  // Returns true if it did anything (a caller loops while true before advancing time).
  // `stores_at_ns`: when the host's CPU made the doorbell stores this call finds (its clock at
  // the end of the work that posted them; 0 or earlier than now: now). A lockstep host runs a
  // whole step of software at one instant of virtual time; its doorbells reach the NIC when
  // that software's modelled CPU time has passed, as the SSD's do (TimedSsd::scan's clock).
  bool process(uint64_t now_ns, uint64_t stores_at_ns = 0);
  // Earliest retransmission or RNR timer (timed: or received packet through the pipeline, or
  // completion landing in host memory), or UINT64_MAX.
  uint64_t next_timer_ns() const;
  // Work pending without new input (packets received, doorbells not yet looked at).
  bool busy() const { return !rx_.empty(); }

  const RnicCounters& counters() const { return counters_; }
  // The timing model, or nullptr for a functional NIC.
  const NicTiming* timing() const { return timing_.get(); }
  // For tests and inspection: a QP's state as the device sees it (kReset if none).
  sr::QpState qp_state(uint32_t qpn) const;
  bool enabled() const { return control_ & sr::control::kEnable; }
  // Every QP that exists, in QPN order: fn(qpn, state, counters) (metrics).
  template <typename F>
  void for_each_qp(F&& fn) const {
    for (uint32_t n = sr::kFirstQpn; n < qps_.size(); ++n)
      if (qps_[n].valid) fn(n, qps_[n].state, qps_[n].counters);
  }
  // A fault hook: the QP fails as after an internal error (QP_FATAL event, to Error, its work
  // flushed). false: no such QP, or it is in Reset or Error already.
  bool force_qp_error(uint32_t qpn);

 private:
  friend struct RnicAccess;  // tests
  struct RxPacket {
    uint64_t src;
    std::vector<uint8_t> bytes;
    SimTime due = 0;  // timed: when the receive pipeline hands it to the transport
  };
  // A completion whose CQE write lands in host memory at `due` (timed only).
  struct PendingCompletion {
    SimTime due;
    uint32_t qpn;
    uint32_t cqn;
    sr::Cqe cqe;
  };
  // Parsed packet (pointers into RxPacket::bytes).
  struct Packet {
    const spec::roce::Bth* bth = nullptr;
    const spec::roce::Reth* reth = nullptr;
    const spec::roce::Aeth* aeth = nullptr;
    uint32_t imm = 0;
    const uint8_t* payload = nullptr;
    uint32_t payload_len = 0;
    uint64_t src = 0;
  };

  // commands.cc
  void execute_command();
  sr::CmdStatus run_command(sr::CommandMailbox& m);
  sr::CmdStatus modify_qp(const sr::QpAttrs& in, uint32_t* syndrome);
  void destroy_all();

  // completions.cc
  bool post_cqe(uint32_t cqn, const sr::Cqe& cqe);
  void post_event(sr::EventType type, uint32_t resource, uint32_t detail = 0);
  void complete_send(Qp& qp, uint32_t qpn, const SendOp& op, sr::WcStatus status,
                     uint8_t vendor_err = 0);
  void complete_recv(Qp& qp, uint32_t qpn, sr::WcStatus status, uint32_t byte_len, bool with_imm,
                     uint32_t imm, bool rdma_with_imm);
  void deliver_completion(uint32_t qpn, uint32_t cqn, const sr::Cqe& cqe);
  void post_completion(uint32_t qpn, uint32_t cqn, const sr::Cqe& cqe);
  void drop_completions(uint32_t qpn);
  void enter_error(uint32_t qpn);
  void flush_queues(Qp& qp, uint32_t qpn);
  uint32_t doorbell(uint32_t offset) const;

  // Memory: a local key's MR checked for PD, access and bounds; a pointer for DMA.
  Mr* find_mr(uint32_t key);
  uint8_t* local_ptr(const Qp& qp, uint32_t lkey, uint64_t addr, uint32_t len, uint32_t access);
  // Copies [offset, offset + n) of a scatter/gather list to (gather) or from (scatter) buf.
  bool gather(const Qp& qp, const sr::Sge* sge, uint32_t nsge, uint32_t offset, uint8_t* buf,
              uint32_t n);
  bool scatter(const Qp& qp, const sr::Sge* sge, uint32_t nsge, uint32_t offset, const uint8_t* buf,
               uint32_t n);

  // requester.cc
  bool fetch_send_wqes(Qp& qp, uint32_t qpn);
  // The WQE the host pushed for SQ count `count` (a whole, matching slot), if any.
  bool take_pushed_wqe(uint32_t qpn, uint32_t count, sr::SendWqe* out);
  void clear_push_slots(uint32_t qpn);
  bool transmit(Qp& qp, uint32_t qpn);
  void send_request_packet(Qp& qp, uint32_t qpn, SendOp& op, uint32_t pkt);
  void handle_response(Qp& qp, uint32_t qpn, const Packet& p);
  void handle_ack(Qp& qp, uint32_t qpn, const Packet& p);
  void handle_read_response(Qp& qp, uint32_t qpn, const Packet& p);
  void acknowledge_through(Qp& qp, uint32_t qpn, uint32_t psn);  // PSNs <= psn are acked
  void rewind_to(Qp& qp, uint32_t psn);
  void check_timers(Qp& qp, uint32_t qpn);
  void arm_ack_timer(Qp& qp);

  // responder.cc
  void handle_request(Qp& qp, uint32_t qpn, const Packet& p);
  bool take_recv_wqe(Qp& qp);
  void send_ack(Qp& qp, uint8_t syndrome, uint32_t psn);
  void queue_read_response(Qp& qp, uint64_t va, uint32_t rkey, uint32_t len, uint32_t first_psn);
  bool send_responses(Qp& qp);
  void responder_error(Qp& qp, uint32_t qpn, uint8_t nak_code, uint32_t psn,
                       sr::WcStatus recv_status, sr::EventType event);
  uint8_t* remote_ptr(const Qp& qp, uint32_t rkey, uint64_t va, uint32_t len, uint32_t access);

  // packets.cc
  void handle_packet(const RxPacket& rx);
  // `ready`: when the packet reaches the MAC (picoseconds; functional: now).
  void emit(const Qp& qp, uint8_t opcode, uint32_t psn, bool ack_req, bool solicited,
            const spec::roce::Reth* reth, const spec::roce::Aeth* aeth, const uint32_t* imm,
            const uint8_t* payload, uint32_t len, SimTime ready);
  SimTime now_ps() const { return now_ * timing::kNs; }
  // When the doorbell stores this process() call found were made (timed dating).
  SimTime stores_ps() const { return std::max(now_, stores_at_) * timing::kNs; }
  // The port has room for another packet (the transmit window; always, functional).
  bool tx_room() const;
  // When a packet made now (an acknowledgement) reaches the MAC.
  SimTime header_ready() { return timing_ ? timing_->transmit(now_ps()) : now_ps(); }
  uint32_t qpn_of(const Qp& qp) const { return static_cast<uint32_t>(&qp - qps_.data()); }

  HostMemory& mem_;
  volatile uint8_t* doorbells_;
  volatile uint8_t* push_;
  uint64_t port_address_;
  RnicConfig config_;
  Wire* wire_ = nullptr;
  uint64_t now_ = 0;
  uint64_t stores_at_ = 0;

  uint32_t control_ = 0;
  uint64_t cmd_addr_ = 0;
  std::vector<Pd> pds_;
  std::vector<Mr> mrs_;
  std::vector<Cq> cqs_;
  std::vector<Srq> srqs_;
  std::vector<Qp> qps_;
  std::vector<uint32_t> live_qps_;  // QPNs of valid QPs, ascending: the work loop's list
  bool eq_valid_ = false;
  ProducerRing eq_;
  uint8_t next_mr_tag_ = 1;

  std::unique_ptr<NicTiming> timing_;
  std::deque<PendingCompletion> completions_;  // in due order
  SimTime last_completion_ = 0;
  uint32_t rr_next_ = 0;  // timed: the QP the work loop starts with (round robin)

  std::deque<RxPacket> rx_;
  std::vector<uint8_t> tx_buf_;
  std::vector<uint8_t> scratch_;
  RnicCounters counters_;
};

// The ICRC of a packet (BTH onwards, without the ICRC itself): CRC-32 (IEEE 802.3) with the
// BTH's byte 4 (reserved, FECN, BECN) taken as 0xff. Stored big-endian after the pad.
uint32_t packet_icrc(const uint8_t* packet, std::size_t len);

}  // namespace pollux::emu::rnic
