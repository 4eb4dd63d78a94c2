// A test "host" for the controller model: page-aligned host memory registered in a
// RegionDmaSpace (IOVA = address), register writes, queue pairs, doorbells, CQEs with phase.
#pragma once

#include <cstdint>
#include <memory>
#include <deque>
#include <optional>
#include <vector>

#include "emulator/nvme/config.h"
#include "emulator/nvme/controller.h"
#include "emulator/nvme/dma_space.h"
#include "spec/nvme.h"

namespace pollux::emu::nvme::testing {

namespace sp = ::pollux::spec::nvme;

// 16 MiB / 512 B and 16 MiB / 4 KiB namespaces in memory, 256-entry queues, 16 pairs, MDTS 5.
ControllerConfig small_config();

struct HostQueue {
  uint16_t qid = 0;
  uint16_t cqid = 0;
  uint32_t sq_size = 0, cq_size = 0;
  sp::SubmissionEntry* sq = nullptr;
  sp::CompletionEntry* cq = nullptr;
  uint32_t sq_tail = 0;
  uint32_t cq_head = 0;
  bool phase = true;
  std::deque<sp::CompletionEntry> stash;  // reaped by run() while waiting for another CID
};

class TestHost {
 public:
  explicit TestHost(ControllerConfig config = small_config());
  ~TestHost();

  Controller& ctrl() { return *ctrl_; }
  RegionDmaSpace& dma() { return dma_; }

  // Zeroed, `align`-aligned host memory, mapped in the DMA space unless map = false.
  uint8_t* alloc(size_t bytes, size_t align = 4096, bool map = true);
  static uint64_t iova(const void* p) { return reinterpret_cast<uintptr_t>(p); }

  // Sets AQA/ASQ/ACQ and CC (EN=1, IOSQES 6, IOCQES 4, MPS `mps`), polls until RDY.
  // Returns false if RDY never came (or CFS was set).
  bool enable(uint32_t admin_entries = 32, uint32_t mps = 0);
  void disable();  // CC.EN = 0

  // Submits to the queue's SQ (rings the doorbell unless ring = false). Sets a fresh CID
  // unless keep_cid. Returns the CID.
  uint16_t submit(HostQueue& q, sp::SubmissionEntry cmd, bool ring = true, bool keep_cid = false);
  void ring_sq(HostQueue& q);
  // Takes the next CQE (stashed ones first, then the CQ if its phase matches); rings the CQ
  // head doorbell if ring.
  std::optional<sp::CompletionEntry> reap(HostQueue& q, bool ring = true);
  // Submit + poll until the completion arrives (at most `polls` polls).
  std::optional<sp::CompletionEntry> run(HostQueue& q, const sp::SubmissionEntry& cmd,
                                         int polls = 16);
  sp::CompletionEntry admin(const sp::SubmissionEntry& cmd);  // fails the test on no CQE
  sp::CompletionEntry io(uint16_t qid, const sp::SubmissionEntry& cmd);

  HostQueue& admin_queue() { return admin_q_; }
  HostQueue& queue(uint16_t qid) { return io_qs_.at(qid); }

  // Create I/O CQ qid + SQ qid (bound to it). Returns the two statuses (0 = success).
  bool create_io_queue_pair(uint16_t qid, uint32_t entries);

  // Command builders.
  static sp::SubmissionEntry identify(uint8_t cns, uint32_t nsid, uint64_t prp1, uint64_t prp2 = 0);
  static sp::SubmissionEntry rw(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nlb,
                                uint64_t prp1, uint64_t prp2 = 0);
  static sp::SubmissionEntry get_features(uint8_t fid, uint32_t sel = 0, uint32_t cdw11 = 0);
  static sp::SubmissionEntry set_features(uint8_t fid, uint32_t cdw11);
  static sp::SubmissionEntry get_log(uint8_t lid, uint32_t bytes, uint64_t prp1, uint32_t nsid = 0xffffffff,
                                     bool rae = false, uint64_t offset = 0);

  // Doorbell helpers (through BAR0 writes).
  void write_sq_doorbell(uint16_t qid, uint32_t v);
  void write_cq_doorbell(uint16_t qid, uint32_t v);

 private:
  ControllerConfig config_;
  RegionDmaSpace dma_;
  std::unique_ptr<Controller> ctrl_;
  std::vector<void*> allocations_;
  HostQueue admin_q_;
  std::vector<HostQueue> io_qs_;
  uint16_t next_cid_ = 1;
};

// Status helpers.
inline uint8_t sct_of(const sp::CompletionEntry& c) { return sp::status::sct(c.status); }
inline uint8_t sc_of(const sp::CompletionEntry& c) { return sp::status::sc(c.status); }
inline bool ok(const sp::CompletionEntry& c) { return (c.status >> 1) == 0; }

}  // namespace pollux::emu::nvme::testing
