// The NVMe/RDMA target transport (trtype "RDMA") for the target's core (fabric/target): CM
// listeners (cm.h) polled on the target thread; a connect request is handed by message to one
// poll group (round robin), which validates its private data, sets the queue pair up on its
// own CQ and accepts or rejects. Each group polls its CQ from one poller; CM events of its
// connections (disconnects) from a slower one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver/env/dma_pool.h"
#include "driver/env/owner_counter.h"
#include "driver/rdma/verbs.h"
#include "fabric/net/socket.h"
#include "fabric/rdma/cm.h"
#include "fabric/rdma/target_connection.h"
#include "fabric/target/target.h"
#include "fabric/target/transport_options.h"

namespace pollux::fabric::rdma {

// nvmf_create_transport's parameters for RDMA (SPDK's names and defaults where they exist).
struct RdmaTargetOptions : target::CommonTransportOptions {
  // Each poll group's CQ: a queue of N entries reserves 7N + 4 (every receive and send WQE
  // it may hold, for the flush of a QP in error); the device allows up to 32,768.
  uint32_t num_cqe = 16384;
  // SPDK's: one shared receive queue per poll group, max_srq_depth capsule buffers, which
  // every connection of the group receives into (when the device has SRQs); no_srq: each
  // connection posts receive buffers of its own (twice its queue depth).
  uint32_t max_srq_depth = 4096;
  bool no_srq = false;
  QpTiming qp;
  std::string rdma_device;  // Pollux's: the device create_on_device() opened (save_config)
};

// "" or what is wrong with the options.
std::string validate(const RdmaTargetOptions& o);

class RdmaTargetGroup;

class RdmaTargetTransport final : public target::Transport {
 public:
  // On the target thread. ctx: the RDMA device (its memory must be reachable: registry).
  // Connections: rdma_cm for a libibverbs device; else the stream CM over cm_network (default:
  // the kernel's TCP).
  static Result<std::unique_ptr<RdmaTargetTransport>> create(
      target::Target& tgt, const RdmaTargetOptions& o, verbs::Context& ctx,
      net::Network* cm_network = nullptr, env::MemoryRegistry* registry = nullptr);
  // The same on a device it opens and owns (device.h: "vfio-user:/path.sock", "ibverbs:rxe0"):
  // pollux-tgt's nvmf_create_transport with "rdma_device".
  static Result<std::unique_ptr<RdmaTargetTransport>> create_on_device(target::Target& tgt,
                                                                       RdmaTargetOptions o,
                                                                       const std::string& device);
  ~RdmaTargetTransport() override;

  const char* trtype() const override { return "RDMA"; }
  const target::TransportLimits& limits() const override { return limits_; }
  target::Status listen(const target::ListenAddress& a) override;
  void stop_listening(const target::ListenAddress& a) override;
  uint16_t bound_port(const target::ListenAddress& a) const override;
  void add_group(target::PollGroup& g) override;
  void remove_group(target::PollGroup& g) override;
  nlohmann::json options_json() const override;
  nlohmann::json group_stats(target::PollGroup& g) const override;

  const RdmaTargetOptions& options() const { return opts_; }
  target::Target& target() const { return tgt_; }
  verbs::Context& context() const { return ctx_; }
  const char* cm_kind() const { return cm_->kind(); }
  verbs::Pd& pd() const { return *pd_; }
  env::DmaBufferPool& pool() const { return *pool_; }
  uint32_t pool_lkey() const { return pool_mr_->lkey(); }
  env::MemoryRegistry& registry() const { return registry_; }
  RdmaTargetGroup* group_of(target::PollGroup& g) const;

 private:
  RdmaTargetTransport(target::Target& tgt, const RdmaTargetOptions& o, verbs::Context& ctx,
                      env::MemoryRegistry& registry);
  struct Listener;
  static event::PollStatus accept_poll(void* arg);

  target::Target& tgt_;
  RdmaTargetOptions opts_;
  std::unique_ptr<verbs::Context> owned_ctx_;  // create_on_device(); goes last
  verbs::Context& ctx_;
  std::unique_ptr<ConnectionManager> cm_;
  env::MemoryRegistry& registry_;
  target::TransportLimits limits_;
  std::unique_ptr<verbs::Pd> pd_;
  std::unique_ptr<env::DmaBufferPool> pool_;
  std::unique_ptr<verbs::Mr> pool_mr_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::unique_ptr<RdmaTargetGroup>> groups_;  // by PollGroup index
};

class RdmaTargetGroup {
 public:
  RdmaTargetGroup(RdmaTargetTransport& t, target::PollGroup& g);
  ~RdmaTargetGroup();
  RdmaTargetTransport& transport() const { return t_; }
  target::PollGroup& group() const { return g_; }
  verbs::Cq* cq() const { return cq_.get(); }

  // The group's thread.
  void start();
  void stop();
  // A connect request (its REQ already read: `request`): accepted or rejected here.
  void adopt(std::unique_ptr<CmId> cm, CmEvent request, target::ListenAddress listen);
  // Room in the CQ for a queue's completions (false: none; the request is rejected).
  bool reserve_cq(uint32_t n);
  void release_cq(uint32_t n) { cq_used_ -= n; }
  void* get_buffer() { return cache_.get(); }
  void put_buffer(void* b) { cache_.put(b); }
  void wait_for_buffer(RdmaRequest& r);
  void forget_waits(RdmaConnection& c);
  // The group's shared receive queue (nullptr: none, each connection posts its own receives),
  // its buffers' size (the capsule's: SQE and in-capsule data) and their key.
  verbs::Srq* srq() const { return srq_.get(); }
  // A capsule buffer back to the SRQ (a slot the SRQ lent: its command is done with it).
  void repost(RecvSlot& s);
  // The connections whose QPs take from the SRQ, by QP number (a receive's completion names
  // the QP, not the connection).
  void add_qp(uint32_t qp_num, RdmaConnection* c) { by_qpn_[qp_num] = c; }
  void remove_qp(uint32_t qp_num) { by_qpn_.erase(qp_num); }

  struct Stats {
    env::OwnerCounter polls = 0, busy_polls = 0, accepted = 0, rejected = 0, closed = 0;
    env::OwnerCounter completions = 0, buffer_waits = 0;
    // Commands by where their data was: fetched by RDMA READ, written by RDMA WRITE, in the
    // capsule; commands failed for a malformed SGL; work completions in error.
    env::OwnerCounter rdma_reads = 0, rdma_writes = 0, in_capsule = 0, bad_sgls = 0;
    env::OwnerCounter error_completions = 0;
    env::OwnerCounter srq_posted = 0;  // SRQ buffers posted to it now
  };
  Stats& mutable_stats() { return stats_; }
  const Stats& stats() const { return stats_; }
  std::size_t connections() const { return conns_.size(); }
  std::size_t cached_buffers() const { return cache_.cached(); }

 private:
  static event::PollStatus poll(void* arg);
  static event::PollStatus cm_poll(void* arg);
  void finalize(RdmaConnection* c);

  RdmaTargetTransport& t_;
  target::PollGroup& g_;
  std::unique_ptr<verbs::Cq> cq_;
  uint32_t cq_used_ = 0;
  event::Poller* poller_ = nullptr;
  event::Poller* cm_poller_ = nullptr;
  env::DmaBufferCache cache_;
  std::vector<RdmaConnection*> conns_;
  std::vector<RdmaRequest*> waits_;  // FIFO (rare, and short)
  // The shared receive queue and its buffers (start(); released with the group).
  std::unique_ptr<verbs::Srq> srq_;
  std::unique_ptr<env::DmaRegion> srq_region_;
  std::unique_ptr<verbs::Mr> srq_mr_;
  std::vector<RecvSlot> srq_slots_;
  std::unordered_map<uint32_t, RdmaConnection*> by_qpn_;  // sized once: no rehash per connect
  bool start_srq();
  Stats stats_;
};

}  // namespace pollux::fabric::rdma
