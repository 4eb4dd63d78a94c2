// The Pollux RNIC provider's objects (rnic_provider.h is the public entry point).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "driver/env/dma_memory.h"
#include "driver/env/memory_registry.h"
#include "driver/env/pci_device.h"
#include "driver/rdma/rnic_provider.h"
#include "driver/rdma/verbs.h"
#include "spec/rnic.h"

namespace pollux::rdma::rnic {

namespace sr = spec::rnic;

class RnicCq;
class RnicQp;
class RnicSrq;

// A ring in DMA memory of 2^log entries of T.
template <typename T>
struct Ring {
  std::unique_ptr<env::DmaRegion> mem;
  uint32_t log = 0;
  T* at(uint32_t count) const { return static_cast<T*>(mem->data()) + (count & ((1u << log) - 1)); }
  uint32_t size() const { return 1u << log; }
  uint64_t iova() const { return mem->iova(); }
};

class RnicContext final : public Context {
 public:
  RnicContext(std::unique_ptr<env::PciDevice> pci, env::MemoryRegistry& registry,
              RnicOptions options);
  ~RnicContext() override;
  int init();  // 0 or a negative errno; why() says more

  const DeviceAttr& attr() const override { return attr_; }
  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, std::size_t length,
                                     uint32_t access) override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t min_entries) override;
  Result<std::unique_ptr<Srq>> create_srq(Pd& pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<Qp>> create_qp(Pd& pd, const QpInitAttr& init) override;
  bool get_async_event(AsyncEvent* event) override;
  bool probe_removed() override { return pci_->probe_removed(); }
  bool probe_fatal() override;
  int recover() override;
  uint32_t generation() const override { return gen_.load(std::memory_order_acquire); }
  // The device is gone (a flag load: the hot path reads it).
  bool removed() const { return removed_->load(std::memory_order_acquire); }
  // For an object of generation `gen` on the hot path: 0, -ENODEV (the device is gone) or
  // -EIO (it failed, or the object is older than its last recovery). Flag loads only.
  int check(uint32_t gen) const {
    if (removed()) return -ENODEV;
    if (fatal_.load(std::memory_order_relaxed) || gen != gen_.load(std::memory_order_relaxed))
      return -EIO;
    return 0;
  }

  // One mailbox command: 0 or a negative errno (the device's status mapped to errno).
  int command(sr::CmdOpcode op, const void* in, std::size_t in_len, void* out, std::size_t out_len);
  uint32_t last_syndrome() const { return last_syndrome_; }
  template <typename T>
  int alloc_ring(Ring<T>& ring, uint32_t log);
  volatile uint32_t* doorbell(uint32_t offset) const {
    return reinterpret_cast<volatile uint32_t*>(doorbells_ + (offset - sr::reg::kDoorbellBase));
  }
  // A QP's two push slots (sr::reg::push_slot), or nullptr: WQEs go by the ring only (push
  // is off, or the window cannot be mapped).
  volatile uint8_t* push_slots(uint32_t qpn) const {
    return push_ ? push_ + (sr::reg::push_slot(qpn, 0) - sr::reg::kPushBase) : nullptr;
  }
  env::MemoryRegistry& registry() { return registry_; }
  // Completions name QPs by number; the CQ finds the QP's queues here to free their slots.
  std::array<RnicQp*, sr::kMaxQp> qps{};
  std::array<RnicSrq*, sr::kMaxSrq> srqs{};
  std::array<RnicCq*, sr::kMaxCq> cqs{};
  const std::string& why() const { return why_; }

 private:
  int enable_function();  // memory space and bus mastering on; BAR0 is a Pollux RNIC
  int start();            // the NIC enabled, the mailbox and the event queue set up; attr_ queried
  void mark_fatal() { fatal_.store(true, std::memory_order_release); }

  std::unique_ptr<env::PciDevice> pci_;
  const std::atomic<bool>* removed_;
  env::MemoryRegistry& registry_;
  RnicOptions options_;
  std::unique_ptr<env::DmaRegion> mailbox_;
  volatile uint8_t* doorbells_ = nullptr;
  volatile uint8_t* push_ = nullptr;
  Ring<sr::EventEntry> eq_;
  uint32_t eq_consumed_ = 0;
  DeviceAttr attr_;
  std::mutex command_mu_;  // set-up path only
  uint32_t last_syndrome_ = 0;
  std::string why_;
  std::atomic<bool> fatal_{false};
  std::atomic<uint32_t> gen_{0};
  std::mutex recover_mu_;
};

class RnicCq final : public Cq {
 public:
  RnicCq(RnicContext& ctx, uint32_t handle, Ring<sr::Cqe> ring)
      : ctx_(ctx), gen_(ctx.generation()), handle_(handle), ring_(std::move(ring)) {}
  ~RnicCq() override;
  int poll(WorkCompletion* wc, int n) override;
  // Discards the completions of QP qpn still in the ring (a QP reset or destroyed: its work
  // is gone, and so must be what it completed, as verbs providers do). Set-up path.
  void clean(uint32_t qpn);
  uint32_t handle() const override { return handle_; }
  uint32_t capacity() const override { return ring_.size(); }
  uint32_t generation() const { return gen_; }

 private:
  RnicContext& ctx_;
  uint32_t gen_;
  uint32_t handle_;
  Ring<sr::Cqe> ring_;
  uint32_t consumed_ = 0;
};

// Free-running producer count and the consumer count learnt from completions.
struct WorkQueue {
  uint32_t produced = 0;
  uint32_t completed = 0;
  uint32_t log = 0;
  uint32_t max_sge = 0;
  uint32_t free_slots() const { return (1u << log) - (produced - completed); }
  // A completion's 16-bit WQE counter: everything up to it has been taken by the device
  // (which copies a WQE when it takes it, so the slot is free). SRQ completions come back
  // in any order across QPs: an older counter than one seen already changes nothing.
  void complete_through(uint16_t counter) {
    const auto ahead = static_cast<uint16_t>(counter - static_cast<uint16_t>(completed));
    if (ahead >= 0x8000) return;
    completed += ahead + 1u;
  }
};

class RnicSrq final : public Srq {
 public:
  RnicSrq(RnicContext& ctx, uint32_t handle, Ring<sr::RecvWqe> ring, uint32_t max_sge);
  ~RnicSrq() override;
  int post_recv(const RecvWr& wr, const RecvWr** bad_wr) override;
  uint32_t handle() const override { return handle_; }
  WorkQueue& queue() { return rq_; }
  uint32_t generation() const { return gen_; }

 private:
  RnicContext& ctx_;
  uint32_t gen_;
  uint32_t handle_;
  Ring<sr::RecvWqe> ring_;
  WorkQueue rq_;
  volatile uint32_t* doorbell_;
};

class RnicQp final : public Qp {
 public:
  RnicQp(RnicContext& ctx, uint32_t qpn, const QpInitAttr& init, Ring<sr::SendWqe> sq,
         Ring<sr::RecvWqe> rq);
  ~RnicQp() override;
  uint32_t qp_num() const override { return qpn_; }
  int modify(const QpAttr& attr, uint32_t mask) override;
  int query(QpAttr* attr) override;
  int post_send(const SendWr& wr, const SendWr** bad_wr) override;
  int post_recv(const RecvWr& wr, const RecvWr** bad_wr) override;
  WorkQueue& sq() { return sq_; }
  WorkQueue& rq() { return rq_; }
  RnicSrq* srq() const { return srq_; }
  void clean_cqs();

 private:
  RnicContext& ctx_;
  uint32_t gen_;
  uint32_t qpn_;
  bool sig_all_;
  RnicSrq* srq_;  // nullptr: the QP's own receive queue
  uint32_t send_cqn_, recv_cqn_;
  Ring<sr::SendWqe> sq_ring_;
  Ring<sr::RecvWqe> rq_ring_;
  WorkQueue sq_, rq_;
  volatile uint32_t* sq_doorbell_;
  volatile uint32_t* rq_doorbell_;
  volatile uint8_t* push_slots_;  // nullptr: no push window
  // The state as of the last modify/query: what post_send/post_recv check.
  std::atomic<QpState> state_{QpState::kReset};
};

}  // namespace pollux::rdma::rnic
