// The NVMe/RDMA host transport (NVMe over Fabrics RDMA transport binding): a Transport for the
// driver's transport-neutral controller (driver/nvme/transport.h). Each queue is an RC QP set
// up by a CM exchange (cm.h) whose private data says the queue's ID and sizes, then the
// controller's own Fabrics Connect. Commands go as SENDs of one capsule (the SQE, and write
// data in the capsule up to IOCCSZ on I/O queues); other data is described by one Keyed SGL
// Data Block over the caller's buffer, which the controller reads (RDMA READ) or writes (RDMA
// WRITE) directly; responses arrive as SENDs into receive buffers of 16 bytes.
//
// Memory: the caller's data must lie in a region of the MemoryRegistry the transport was given
// (as with every Pollux transport: DMA memory). Each queue registers such a region as an MR
// the first time a command uses it (one mailbox command, off the steady state), as SPDK
// registers its memory map. Buffers of several pieces go as a Last Segment of keyed
// descriptors in the capsule, up to the controller's MSDBD (I/O queues).
//
// Hot path (map_data, flush, poll): no lock, no allocation, no system call — WQEs and
// doorbells through the verbs provider. A work completion in error (the QP broke: the target
// went away, a retry count ran out, a remote access error) marks the queue broken(): the
// controller's health check resets it, which sets up the QP and the CM exchange again.
// The CM stream is not read in the steady state: only when commands wait and thousands of
// polls in a row found nothing does the queue look for the target's DREQ (queue.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "driver/env/memory_registry.h"
#include "driver/nvme/transport.h"
#include "driver/nvme/transport_id.h"
#include "driver/rdma/verbs.h"
#include "fabric/net/socket.h"
#include "fabric/rdma/cm.h"
#include "spec/nvme_fabrics.h"

namespace pollux::fabric::rdma {

namespace sn = spec::nvme;

// Error injection on the host's side (scenarios, tests), shared by every transport made with
// the options that carry it: the next `bad_rkeys` commands whose data travels by keyed SGL
// name their buffer with a wrong rkey (a stale key of the same MR slot). The target's RDMA
// READ or WRITE of it then fails with a remote access error at the host's NIC: both QPs go to
// Error, the command gets no response, the queue breaks and the controller resets.
struct RdmaHostFaults {
  std::atomic<uint32_t> bad_rkeys{0};
  std::atomic<uint64_t> bad_rkeys_sent{0};  // commands that carried one
};

struct RdmaHostOptions {
  verbs::Context* context = nullptr;  // the RDMA device (required)
  // The stream CM's network, for a Pollux RNIC (default: the kernel's TCP). A libibverbs device
  // connects through rdma_cm instead (device.h: connection_manager_for).
  net::Network* cm_network = nullptr;
  env::MemoryRegistry* registry = nullptr;  // data buffers (default: the factory's registry)
  uint32_t connect_timeout_ms = 5000;       // the CM exchange, in the network's time
  QpTiming qp;
  std::shared_ptr<RdmaHostFaults> faults;  // none: the hot path never looks
};

class RdmaTransport final : public nvme::Transport {
 public:
  // trtype rdma, traddr (the CM address), trsvcid (default 4420), subnqn.
  static Result<std::unique_ptr<RdmaTransport>> create(const nvme::TransportId& trid,
                                                       RdmaHostOptions options);
  ~RdmaTransport() override;

  std::string address() const override;
  bool fabrics() const override { return true; }
  std::string subsystem_nqn() const override { return subnqn_; }
  void identified(const sn::IdentifyController& id) override;
  uint32_t max_transfer() const override { return spec::nvmf::kKeyedSglMaxLength & ~4095u; }
  Result<std::unique_ptr<nvme::QueueTransport>> create_queue(const nvme::QueueParams& p) override;
  void program_admin_queue(nvme::QueueTransport&) override {}
  std::string start_io_queue(nvme::QueueTransport&, const nvme::AdminCommand&) override {
    return "";
  }
  std::string stop_io_queue(nvme::QueueTransport&, const nvme::AdminCommand&) override {
    return "";
  }

  // Shared by the queues (read-only once created).
  struct Shared : env::RegionListener {
    ~Shared() override;
    RdmaHostOptions options;
    std::string traddr, trsvcid;
    std::unique_ptr<verbs::Pd> pd;
    std::unique_ptr<ConnectionManager> cm;  // the device's (stream CM or rdma_cm)
    uint32_t pd_generation = 0;  // the device's generation the PD belongs to
    std::mutex device_mu;        // queues of several threads may reconnect at once
    // Bumped when a region leaves the registry: a queue's MR over it must go before another
    // region can take its addresses (the queue checks it with one load per keyed command).
    std::atomic<uint64_t> regions_removed{0};
    bool listening = false;
    // Set-up path (a queue connecting): a device that failed or was reset (a NIC reset) is
    // brought up again, and the PD made anew on it. "" or why the device is unusable.
    std::string ensure_device();
    std::string on_region_added(const env::MemoryRegion&) override { return ""; }
    void on_region_removed(const env::MemoryRegion&) override {
      regions_removed.fetch_add(1, std::memory_order_release);
    }
  };

 private:
  RdmaTransport(std::shared_ptr<Shared> s, std::string subnqn)
      : shared_(std::move(s)), subnqn_(std::move(subnqn)) {}
  std::shared_ptr<Shared> shared_;
  std::string subnqn_;
  uint32_t io_in_capsule_ = 0;  // IOCCSZ minus the SQE
  uint32_t io_msdbd_ = 1;       // keyed descriptors an I/O command may carry (MSDBD)
};

// For nvme::connect (trtype:rdma): the device and networks a transport ID alone cannot name.
// Until this is called, connecting to trtype:rdma fails with a message saying so.
void set_default_rdma_host(const RdmaHostOptions& options);

// Registers the rdma transport with nvme::connect; linking //fabric/rdma:host does it.
void register_rdma_transport();

}  // namespace pollux::fabric::rdma
