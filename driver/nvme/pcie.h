// The PCIe transport: a controller behind an env::PciDevice (vfio-user or vfio-pci).
// Registers are BAR0 MMIO; a queue pair is an SQ and a CQ in host DMA memory, one PRP-list /
// SGL-segment page per request, and two doorbells (stores into the mapped doorbell page when
// the backend maps it, else register writes). Completions are found by their phase tag.
#pragma once

#include <memory>

#include "driver/env/clock.h"
#include "driver/env/dma_memory.h"
#include "driver/env/memory_registry.h"
#include "driver/env/pci_device.h"
#include "driver/nvme/qpair.h"
#include "driver/nvme/transport.h"

namespace pollux::nvme {

class PcieQueue final : public QueueTransport {
 public:
  PcieQueue(env::PciDevice& device, env::MemoryRegistry& registry, const QueueParams& params,
            uint32_t doorbell_stride);

  int init_requests(uint32_t n) override;
  int map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
               uint32_t len) override;
  sn::SubmissionEntry* submission_queue() override { return sq_; }
  void flush(uint32_t tail) override;
  int poll(sn::CompletionEntry* out, uint32_t max) override;
  void reset() override;

  uint16_t qid() const { return params_.qid; }
  uint32_t entries() const { return params_.entries; }
  uint64_t sq_iova() const { return sq_iova_; }
  uint64_t cq_iova() const { return cq_iova_; }

 private:
  int build_prp(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                uint32_t len);
  int build_sgl(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                uint32_t len);
  uint64_t* list(uint16_t index) const { return lists_ + std::size_t{index} * 512; }
  uint64_t list_iova(uint16_t index) const { return lists_iova_ + std::size_t{index} * 4096; }

  env::PciDevice& device_;
  env::MemoryRegistry& registry_;
  env::TranslateCache translations_;
  QueueParams params_;
  uint32_t doorbell_stride_;
  bool use_sgl_ = false;
  std::unique_ptr<env::DmaRegion> memory_;  // SQ, CQ, then one list page per request
  sn::SubmissionEntry* sq_ = nullptr;
  sn::CompletionEntry* cq_ = nullptr;
  uint64_t* lists_ = nullptr;
  uint64_t sq_iova_ = 0, cq_iova_ = 0, lists_iova_ = 0;
  volatile uint32_t* sq_doorbell_ = nullptr;  // null: ring through register writes
  volatile uint32_t* cq_doorbell_ = nullptr;
  uint32_t cq_head_ = 0;
  uint16_t phase_ = 1;
};

class PcieTransport final : public Transport {
 public:
  // The device is owned from here on; queue memory comes from `registry` (the one the
  // device's backend follows).
  PcieTransport(std::unique_ptr<env::PciDevice> device, env::MemoryRegistry& registry);

  std::string address() const override { return device_->address(); }
  bool probe_gone() override { return device_->probe_removed(); }
  bool removal_requested() const override { return device_->removal_requested(); }
  void finish_removal() override { device_->finish_removal(); }
  int prepare() override;
  uint32_t read32(uint32_t offset) override { return device_->read32(0, offset); }  // BAR0
  uint64_t read64(uint32_t offset) override { return device_->read64(0, offset); }
  int write32(uint32_t offset, uint32_t v) override { return device_->write32(0, offset, v); }
  int write64(uint32_t offset, uint64_t v) override { return device_->write64(0, offset, v); }
  // One list page per request: 512 PRP entries.
  uint32_t max_transfer() const override { return 512u * 4096; }
  Result<std::unique_ptr<QueueTransport>> create_queue(const QueueParams& params) override;
  void program_admin_queue(QueueTransport& admin) override;
  std::string start_io_queue(QueueTransport& queue, const AdminCommand& admin) override;
  std::string stop_io_queue(QueueTransport& queue, const AdminCommand& admin) override;

  env::PciDevice& device() { return *device_; }

 private:
  std::unique_ptr<env::PciDevice> device_;
  env::MemoryRegistry& registry_;
  uint32_t doorbell_stride_ = 0;  // CAP.DSTRD, read by prepare()
};

// A queue pair straight on a PciDevice, without a controller (tests and benchmarks play the
// controller's part).
struct PcieQueueContext {
  env::PciDevice* device = nullptr;
  env::MemoryRegistry* registry = nullptr;
  const env::Clock* clock = nullptr;
  uint32_t doorbell_stride = 0;  // CAP.DSTRD
  uint32_t page_size = 4096;     // CC.MPS
  uint32_t max_transfer = 0;     // bytes; 0 = unlimited
  bool sgl_supported = false;
};
Result<std::unique_ptr<Qpair>> make_pcie_qpair(const PcieQueueContext& ctx, uint16_t qid,
                                               const QpairOptions& options);
// The PCIe side of a queue pair made by the PCIe transport (its rings, for tests).
inline PcieQueue& pcie_queue(Qpair& qp) { return static_cast<PcieQueue&>(qp.transport()); }

}  // namespace pollux::nvme
