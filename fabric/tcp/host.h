// The NVMe/TCP host transport (NVMe/TCP transport specification 1.0): a Transport for the
// driver's transport-neutral controller (driver/nvme/transport.h). One TCP connection per
// queue, opened with ICReq/ICResp; commands go as CapsuleCmd PDUs (write data in-capsule up to
// the controller's capsule size, else sent in H2CData PDUs when the controller asks with an
// R2T), read data comes in C2HData PDUs straight into the caller's buffers, completions as
// CapsuleResp (or a C2HData's SUCCESS flag). Header and data digests (CRC32C) on request.
//
// The hot path (map_data, flush, poll) allocates nothing and takes no lock: every PDU header
// is built in a per-queue arena, data is sent from and received into the caller's iovecs;
// flush makes one send, poll one recv (plus a send while PDUs are waiting to go) on the
// socket seam (fabric/net): one sendmsg / recv each on the kernel's TCP.
// A broken connection or a protocol error (answered with an H2CTermReq) marks the queue
// broken(): the controller's health check sees it and resets, which connects again.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/nvme/transport.h"
#include "driver/nvme/transport_id.h"
#include "fabric/tcp/paths.h"
#include "spec/nvme_tcp.h"

namespace pollux::fabric::net {
class Network;
}

namespace pollux::fabric::tcp {

namespace sn = spec::nvme;

struct TcpOptions {
  bool header_digest = false;  // asked for in ICReq; the controller decides (ICResp)
  bool data_digest = false;
  uint32_t connect_timeout_ms = 5000;  // TCP connect and the ICReq/ICResp exchange, in the
                                       // network's time
  net::Network* network = nullptr;     // default: the kernel's TCP (net::posix_network())
};

class TcpQueue;

class TcpTransport final : public nvme::Transport {
 public:
  // trtype tcp, traddr (IPv4/IPv6 address or host name), trsvcid (default 4420), subnqn.
  static Result<std::unique_ptr<TcpTransport>> create(const nvme::TransportId& trid,
                                                      TcpOptions options = {});

  std::string address() const override;
  bool fabrics() const override { return true; }
  std::string subsystem_nqn() const override { return subnqn_; }
  void identified(const sn::IdentifyController& id) override;
  Result<std::unique_ptr<nvme::QueueTransport>> create_queue(const nvme::QueueParams& p) override;
  void program_admin_queue(nvme::QueueTransport&) override {}
  // Multipath, failover: other addresses of subnqn (trtype tcp); the queues follow paths_.
  std::string add_path(const nvme::TransportId& trid) override;
  void path_failed() override { paths_->fail_over(); }
  PathInfo paths() const override;
  // Fabrics queues are connected by the controller's Connect; stopping one is closing it.
  std::string start_io_queue(nvme::QueueTransport&, const nvme::AdminCommand&) override {
    return "";
  }
  std::string stop_io_queue(nvme::QueueTransport&, const nvme::AdminCommand&) override {
    return "";
  }

 private:
  TcpTransport(Endpoint endpoint, std::string subnqn, TcpOptions options)
      : paths_(std::make_shared<Paths>(std::move(endpoint))),
        subnqn_(std::move(subnqn)),
        options_(options) {}
  std::shared_ptr<Paths> paths_;
  std::string subnqn_;
  TcpOptions options_;
  uint32_t io_in_capsule_ = 0;  // bytes of in-capsule data an I/O command may carry (IOCCSZ)
};

// Registers the tcp transport with nvme::connect (driver/nvme/connect.h). Linking
// //fabric/tcp:host does it at start-up; calling it again is harmless.
void register_tcp_transport();

}  // namespace pollux::fabric::tcp
