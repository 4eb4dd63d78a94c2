#include "emulator/nvme/test_host.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace pollux::emu::nvme::testing {

ControllerConfig small_config() {
  ControllerConfig c;
  c.max_queue_entries = 256;
  c.max_io_queue_pairs = 16;
  c.mdts = 5;
  c.namespaces.push_back(NamespaceConfig{16u << 20, 512, "memory"});
  c.namespaces.push_back(NamespaceConfig{16u << 20, 4096, "memory"});
  return c;
}

TestHost::TestHost(ControllerConfig config) : config_(std::move(config)) {
  auto c = Controller::create(config_, dma_);
  if (!c) throw std::runtime_error("Controller::create: " + c.error());
  ctrl_ = std::move(c).value();
  io_qs_.resize(size_t{config_.max_io_queue_pairs} + 1);
}

TestHost::~TestHost() {
  ctrl_.reset();
  for (void* p : allocations_) std::free(p);
}

uint8_t* TestHost::alloc(size_t bytes, size_t align, bool map) {
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  allocations_.push_back(p);
  if (map) dma_.add_host_buffer(p, rounded);
  return static_cast<uint8_t*>(p);
}

bool TestHost::enable(uint32_t admin_entries, uint32_t mps) {
  admin_q_ = HostQueue{};
  admin_q_.sq_size = admin_q_.cq_size = admin_entries;
  const size_t page = size_t{4096} << mps;
  admin_q_.sq = reinterpret_cast<sp::SubmissionEntry*>(alloc(admin_entries * 64, page));
  admin_q_.cq = reinterpret_cast<sp::CompletionEntry*>(alloc(admin_entries * 16, page));
  ctrl_->write32(sp::reg::kAqa, sp::aqa::make(admin_entries - 1, admin_entries - 1));
  ctrl_->write64(sp::reg::kAsq, iova(admin_q_.sq));
  ctrl_->write64(sp::reg::kAcq, iova(admin_q_.cq));
  ctrl_->write32(sp::reg::kCc, sp::cc::make(true, 0, mps, 0, 0, 6, 4));
  for (uint32_t i = 0; i < config_.ready_delay_polls + 2; ++i) {
    if (ctrl_->read32(sp::reg::kCsts) & sp::csts::kRdy) return true;
    if (ctrl_->read32(sp::reg::kCsts) & sp::csts::kCfs) return false;
    ctrl_->poll(1);
  }
  return ctrl_->read32(sp::reg::kCsts) & sp::csts::kRdy;
}

void TestHost::disable() {
  ctrl_->write32(sp::reg::kCc, ctrl_->read32(sp::reg::kCc) & ~sp::cc::kEn);
  for (auto& q : io_qs_) q = HostQueue{};
}

void TestHost::write_sq_doorbell(uint16_t qid, uint32_t v) {
  ctrl_->write32(sp::reg::sq_tail_doorbell(qid, config_.doorbell_stride), v);
}

void TestHost::write_cq_doorbell(uint16_t qid, uint32_t v) {
  ctrl_->write32(sp::reg::cq_head_doorbell(qid, config_.doorbell_stride), v);
}

uint16_t TestHost::submit(HostQueue& q, sp::SubmissionEntry cmd, bool ring, bool keep_cid) {
  if (!keep_cid) {
    cmd.cid = next_cid_++;
    if (next_cid_ == 0xffff) next_cid_ = 1;
  }
  q.sq[q.sq_tail] = cmd;
  q.sq_tail = (q.sq_tail + 1) % q.sq_size;
  if (ring) ring_sq(q);
  return cmd.cid;
}

void TestHost::ring_sq(HostQueue& q) { write_sq_doorbell(q.qid, q.sq_tail); }

std::optional<sp::CompletionEntry> TestHost::reap(HostQueue& q, bool ring) {
  if (!q.stash.empty()) {
    const sp::CompletionEntry c = q.stash.front();
    q.stash.pop_front();
    return c;
  }
  const sp::CompletionEntry c = q.cq[q.cq_head];
  if (sp::status::phase(c.status) != q.phase) return std::nullopt;
  if (++q.cq_head == q.cq_size) {
    q.cq_head = 0;
    q.phase = !q.phase;
  }
  if (ring) write_cq_doorbell(q.cqid, q.cq_head);
  return c;
}

std::optional<sp::CompletionEntry> TestHost::run(HostQueue& q, const sp::SubmissionEntry& cmd,
                                                 int polls) {
  const uint16_t cid = submit(q, cmd);
  for (int i = 0; i < polls; ++i) {
    ctrl_->poll(64);
    while (true) {
      const sp::CompletionEntry& next = q.cq[q.cq_head];
      if (sp::status::phase(next.status) != q.phase) break;
      const sp::CompletionEntry c = next;
      if (++q.cq_head == q.cq_size) {
        q.cq_head = 0;
        q.phase = !q.phase;
      }
      write_cq_doorbell(q.cqid, q.cq_head);
      if (c.cid == cid) return c;
      q.stash.push_back(c);
    }
  }
  return std::nullopt;
}

sp::CompletionEntry TestHost::admin(const sp::SubmissionEntry& cmd) {
  auto c = run(admin_q_, cmd);
  if (!c) throw std::runtime_error("admin command got no completion");
  return *c;
}

sp::CompletionEntry TestHost::io(uint16_t qid, const sp::SubmissionEntry& cmd) {
  auto c = run(io_qs_.at(qid), cmd);
  if (!c) throw std::runtime_error("I/O command got no completion");
  return *c;
}

bool TestHost::create_io_queue_pair(uint16_t qid, uint32_t entries) {
  HostQueue& q = io_qs_.at(qid);
  q = HostQueue{};
  q.qid = q.cqid = qid;
  q.sq_size = q.cq_size = entries;
  const size_t page = ctrl_->memory_page_size();
  q.sq = reinterpret_cast<sp::SubmissionEntry*>(alloc(entries * 64, page));
  q.cq = reinterpret_cast<sp::CompletionEntry*>(alloc(entries * 16, page));
  sp::SubmissionEntry cq{};
  cq.opcode = sp::admin::kCreateIoCq;
  cq.dptr.prp.prp1 = iova(q.cq);
  cq.cdw10 = (entries - 1) << 16 | qid;
  cq.cdw11 = 1u | (1u << 1) | uint32_t{qid} << 16;
  if (!ok(admin(cq))) return false;
  sp::SubmissionEntry sq{};
  sq.opcode = sp::admin::kCreateIoSq;
  sq.dptr.prp.prp1 = iova(q.sq);
  sq.cdw10 = (entries - 1) << 16 | qid;
  sq.cdw11 = 1u | uint32_t{qid} << 16;
  return ok(admin(sq));
}

sp::SubmissionEntry TestHost::identify(uint8_t cns, uint32_t nsid, uint64_t prp1, uint64_t prp2) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kIdentify;
  c.nsid = nsid;
  c.dptr.prp.prp1 = prp1;
  c.dptr.prp.prp2 = prp2;
  c.cdw10 = cns;
  return c;
}

sp::SubmissionEntry TestHost::rw(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nlb,
                                 uint64_t prp1, uint64_t prp2) {
  sp::SubmissionEntry c{};
  c.opcode = opcode;
  c.nsid = nsid;
  c.dptr.prp.prp1 = prp1;
  c.dptr.prp.prp2 = prp2;
  c.cdw10 = static_cast<uint32_t>(slba);
  c.cdw11 = static_cast<uint32_t>(slba >> 32);
  c.cdw12 = nlb - 1;
  return c;
}

sp::SubmissionEntry TestHost::get_features(uint8_t fid, uint32_t sel, uint32_t cdw11) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kGetFeatures;
  c.cdw10 = fid | sel << 8;
  c.cdw11 = cdw11;
  return c;
}

sp::SubmissionEntry TestHost::set_features(uint8_t fid, uint32_t cdw11) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kSetFeatures;
  c.cdw10 = fid;
  c.cdw11 = cdw11;
  return c;
}

sp::SubmissionEntry TestHost::get_log(uint8_t lid, uint32_t bytes, uint64_t prp1, uint32_t nsid,
                                      bool rae, uint64_t offset) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kGetLogPage;
  c.nsid = nsid;
  c.dptr.prp.prp1 = prp1;
  const uint32_t numd = bytes / 4 - 1;
  c.cdw10 = lid | (rae ? 1u << 15 : 0) | (numd & 0xffff) << 16;
  c.cdw11 = numd >> 16;
  c.cdw12 = static_cast<uint32_t>(offset);
  c.cdw13 = static_cast<uint32_t>(offset >> 32);
  return c;
}

}  // namespace pollux::emu::nvme::testing
