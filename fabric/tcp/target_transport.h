// The NVMe/TCP target transport: listeners polled on the target thread; each accepted
// connection is handed by message to one poll group (round robin), which owns it from then on.
// A group polls its connections with one readiness poll per iteration (epoll_wait on the
// kernel's TCP: fabric/net), sends what each has queued with one send, and hands requests that wait
// for a data buffer the next one that frees.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/dma_pool.h"
#include "driver/env/owner_counter.h"
#include "fabric/net/socket.h"
#include "fabric/target/target.h"
#include "fabric/target/transport_options.h"
#include "fabric/tcp/target_connection.h"

namespace pollux::fabric::tcp {

// nvmf_create_transport's parameters (SPDK's names and defaults, plus max_h2c_data_size).
struct TcpTargetOptions : target::CommonTransportOptions {
  bool c2h_success = true;              // SUCCESS flag on C2HData (queues without SQ flow control)
  uint32_t max_h2c_data_size = 131072;  // ICResp MAXH2CDATA, and the length of each R2T
  uint32_t sock_priority = 0;           // accepted for SPDK configs; must stay 0
};

// "" or what is wrong with the options.
std::string validate(const TcpTargetOptions& o);

class TcpTargetGroup;

class TcpTargetTransport final : public target::Transport {
 public:
  // On the target thread (listener pollers run there).
  // network: where it listens (default: the kernel's TCP; a SimNetwork in virtual time).
  // registry: where data buffers come from (default: the global one; a simulation's devices
  // reach only the memory of their rig's registry).
  static Result<std::unique_ptr<TcpTargetTransport>> create(
      target::Target& tgt, const TcpTargetOptions& o, net::Network* network = nullptr,
      env::MemoryRegistry* registry = nullptr);
  ~TcpTargetTransport() override;

  const char* trtype() const override { return "TCP"; }
  const target::TransportLimits& limits() const override { return limits_; }
  target::Status listen(const target::ListenAddress& a) override;
  void stop_listening(const target::ListenAddress& a) override;
  void add_group(target::PollGroup& g) override;
  void remove_group(target::PollGroup& g) override;
  nlohmann::json options_json() const override;
  nlohmann::json group_stats(target::PollGroup& g) const override;

  const TcpTargetOptions& options() const { return opts_; }
  target::Target& target() const { return tgt_; }
  env::DmaBufferPool& pool() const { return *pool_; }
  net::Network& network() const { return net_; }
  env::MemoryRegistry& registry() const { return registry_; }
  TcpTargetGroup* group_of(target::PollGroup& g) const;
  // The port a listener is bound to (its trsvcid may have been "0": any).
  uint16_t bound_port(const target::ListenAddress& a) const override;

 private:
  TcpTargetTransport(target::Target& tgt, const TcpTargetOptions& o, net::Network& network,
                     env::MemoryRegistry& registry);
  struct Listener;
  static event::PollStatus accept_poll(void* arg);

  target::Target& tgt_;
  TcpTargetOptions opts_;
  net::Network& net_;
  env::MemoryRegistry& registry_;
  target::TransportLimits limits_;
  std::unique_ptr<env::DmaBufferPool> pool_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::unique_ptr<TcpTargetGroup>> groups_;  // by PollGroup index
};

class TcpTargetGroup {
 public:
  TcpTargetGroup(TcpTargetTransport& t, target::PollGroup& g);
  ~TcpTargetGroup();
  TcpTargetTransport& transport() const { return t_; }
  target::PollGroup& group() const { return g_; }

  // The group's thread.
  void start();
  void stop();
  void adopt(std::unique_ptr<net::Socket> socket, target::ListenAddress listen);
  // A data buffer, or nullptr (then wait_for_buffer()).
  void* get_buffer() { return cache_.get(); }
  void put_buffer(void* b);
  void wait_for_buffer(TcpRequest& r, TcpConnection& c);
  void forget_waits(TcpConnection& c);

  // Written by the group's thread, readable from any (metrics).
  struct Stats {
    env::OwnerCounter polls = 0, busy_polls = 0, accepted = 0, closed = 0, buffer_waits = 0;
    // sendmsgs that may hold a partial segment back (TCP_CORK); pushes after a quiet poll.
    env::OwnerCounter corked_sends = 0, pushes = 0;
  };
  Stats& mutable_stats() { return stats_; }
  const Stats& stats() const { return stats_; }
  std::size_t connections() const { return conns_.size(); }
  // Data buffers in this group's cache (the group's thread, or a quiet target).
  std::size_t cached_buffers() const { return cache_.cached(); }

 private:
  static event::PollStatus poll(void* arg);
  void finalize(TcpConnection* c);

  TcpTargetTransport& t_;
  target::PollGroup& g_;
  std::unique_ptr<net::ReadinessGroup> ready_;
  event::Poller* poller_ = nullptr;
  env::DmaBufferCache cache_;
  std::vector<TcpConnection*> conns_;
  struct Wait {
    TcpRequest* r;
    TcpConnection* c;
  };
  std::vector<Wait> waits_;  // FIFO (a vector: rare, and short)
  Stats stats_;
};

}  // namespace pollux::fabric::tcp
