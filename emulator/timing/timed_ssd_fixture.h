// What the timed SSD's tests share (timed_ssd_test.cc, timed_ssd_models_test.cc,
// timed_ssd_queue_test.cc): the timed SSD (SystemC models over the functional controller),
// driven as a host would — host memory, queues, SQEs, doorbells, CQEs with phase tags, and
// simulated time advanced by the test.
//
// The host below is a small one of its own: nvme::testing::TestHost polls the controller
// itself (its admin()/run() call Controller::poll), which would bypass the timing model, and
// //emulator/nvme:test_host is private to its package.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "emulator/nvme/controller.h"
#include "emulator/nvme/dma_space.h"
#include "emulator/timing/profile.h"
#include "emulator/timing/simulation.h"
#include "emulator/timing/timed_ssd.h"
#include "spec/nvme.h"

namespace pollux::emu::timing::timed_ssd_testing {

namespace sp = ::pollux::spec::nvme;

// ---------------------------------------------------------------------------- the host ---

struct Queue {
  uint16_t qid = 0;
  uint32_t sq_size = 0, cq_size = 0;
  sp::SubmissionEntry* sq = nullptr;
  sp::CompletionEntry* cq = nullptr;
  uint32_t sq_tail = 0, cq_head = 0;
  bool phase = true;
  std::deque<std::pair<sp::CompletionEntry, SimTime>> stash;  // reaped, not yet asked for
};

inline bool ok(const sp::CompletionEntry& c) {
  return (c.status >> 1) == 0;
}

// A host, one timed device and its simulation. The controller outlives the simulation.
class Rig {
 public:
  Rig(const Profile& p, uint64_t seed) : profile_(p) {
    auto c = nvme::Controller::create(p.controller, dma_);
    if (!c) {
      ADD_FAILURE() << "Controller::create: " << c.error();
      std::abort();
    }
    ctrl_ = std::move(c).value();
    sim_ = std::make_unique<Simulation>(seed);
    auto d = sim_->add_device(p, *ctrl_);
    if (!d) {
      ADD_FAILURE() << "add_device: " << d.error();
      std::abort();
    }
    device_ = d.value();
    io_.resize(p.controller.max_io_queue_pairs + 1);
  }
  ~Rig() {
    sim_.reset();
    ctrl_.reset();
    for (void* p : memory_) std::free(p);
  }

  Simulation& sim() { return *sim_; }
  const Profile& profile() const { return profile_; }
  TimedSsd& ssd() { return sim_->device(device_); }
  nvme::Controller& ctrl() { return *ctrl_; }
  TimedSsdStats stats() { return ssd().stats(); }
  Queue& admin_q() { return admin_; }
  Queue& io(uint16_t qid) { return io_.at(qid); }
  SimTime now() { return sim_->now(); }

  uint8_t* alloc(size_t bytes) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    std::memset(p, 0, rounded);
    memory_.push_back(p);
    dma_.add_host_buffer(p, rounded);
    return static_cast<uint8_t*>(p);
  }

  // Admin queue, CC.EN = 1 (with CC.AMS = `ams`), then the device notices the new queues.
  bool enable(uint32_t ams = sp::cc::kAmsRoundRobin, uint32_t entries = 32) {
    admin_ = Queue{};
    admin_.sq_size = admin_.cq_size = entries;
    admin_.sq = reinterpret_cast<sp::SubmissionEntry*>(alloc(entries * 64));
    admin_.cq = reinterpret_cast<sp::CompletionEntry*>(alloc(entries * 16));
    ctrl_->write32(sp::reg::kAqa, sp::aqa::make(entries - 1, entries - 1));
    ctrl_->write64(sp::reg::kAsq, iova(admin_.sq));
    ctrl_->write64(sp::reg::kAcq, iova(admin_.cq));
    ctrl_->write32(sp::reg::kCc, sp::cc::make(true, 0, 0, ams, 0, 6, 4));
    for (int i = 0; i < 100 && !(ctrl_->read32(sp::reg::kCsts) & sp::csts::kRdy); ++i) {
      sim_->scan();
      sim_->run_until(now() + 100 * kNs);
    }
    sim_->scan();
    return (ctrl_->read32(sp::reg::kCsts) & (sp::csts::kRdy | sp::csts::kCfs)) == sp::csts::kRdy;
  }
  void disable() {
    ctrl_->write32(sp::reg::kCc, ctrl_->read32(sp::reg::kCc) & ~sp::cc::kEn);
    sim_->scan();
  }

  // Writes the SQE (with a fresh CID) and rings the SQ doorbell unless ring = false. The
  // device notices at the next scan().
  uint16_t submit(Queue& q, sp::SubmissionEntry cmd, bool ring = true) {
    cmd.cid = next_cid_++;
    if (next_cid_ == 0xffff) next_cid_ = 1;
    q.sq[q.sq_tail] = cmd;
    q.sq_tail = (q.sq_tail + 1) % q.sq_size;
    if (ring) ring_sq(q);
    return cmd.cid;
  }
  void ring_sq(Queue& q) { ctrl_->write32(sp::reg::sq_tail_doorbell(q.qid, 0), q.sq_tail); }

  // An entry is in the CQ at the head (not consumed).
  static bool visible(const Queue& q) {
    return sp::status::phase(q.cq[q.cq_head].status) == q.phase;
  }

  // Consumes every visible entry into the stash; rings the CQ head doorbell and lets the
  // device notice it.
  void drain(Queue& q) {
    bool any = false;
    while (visible(q)) {
      q.stash.emplace_back(q.cq[q.cq_head], now());
      if (++q.cq_head == q.cq_size) {
        q.cq_head = 0;
        q.phase = !q.phase;
      }
      any = true;
    }
    if (any) {
      ctrl_->write32(sp::reg::cq_head_doorbell(q.qid, 0), q.cq_head);
      sim_->scan();
    }
  }
  std::optional<sp::CompletionEntry> take(Queue& q, uint16_t cid) {
    drain(q);
    for (auto it = q.stash.begin(); it != q.stash.end(); ++it) {
      if (it->first.cid == cid) {
        const sp::CompletionEntry c = it->first;
        q.stash.erase(it);
        return c;
      }
    }
    return std::nullopt;
  }
  // Advances simulated time until `cid` completes on `q` (stopping at every completion the
  // device posts) or `timeout` has passed.
  std::optional<sp::CompletionEntry> await(Queue& q, uint16_t cid, SimTime timeout = 10 * kMs) {
    sim_->scan();
    const SimTime end = now() + timeout;
    while (true) {
      if (auto c = take(q, cid)) return c;
      if (now() >= end) return std::nullopt;
      sim_->run_until(end, /*stop_at_completion=*/true);
    }
  }
  std::optional<sp::CompletionEntry> admin(const sp::SubmissionEntry& cmd) {
    const uint16_t cid = submit(admin_, cmd);
    sim_->scan();
    return await(admin_, cid);
  }
  // Runs until the device has `n` commands in flight (fetched, not completed).
  bool run_until_in_flight(uint64_t n, SimTime timeout = 100 * kUs) {
    sim_->scan();
    const SimTime end = now() + timeout;
    while (stats().in_flight < n && now() < end) sim_->run_until(now() + 10 * kNs);
    return stats().in_flight >= n;
  }

  // Create I/O CQ `qid` and SQ `qid` (bound to it) through the timed admin queue.
  bool create_io_queue_pair(uint16_t qid, uint32_t sq_entries, uint8_t prio = 0,
                            uint32_t cq_entries = 0) {
    if (cq_entries == 0) cq_entries = sq_entries;
    Queue& q = io_.at(qid);
    q = Queue{};
    q.qid = qid;
    q.sq_size = sq_entries;
    q.cq_size = cq_entries;
    q.sq = reinterpret_cast<sp::SubmissionEntry*>(alloc(sq_entries * 64));
    q.cq = reinterpret_cast<sp::CompletionEntry*>(alloc(cq_entries * 16));
    sp::SubmissionEntry cq{};
    cq.opcode = sp::admin::kCreateIoCq;
    cq.dptr.prp.prp1 = iova(q.cq);
    cq.cdw10 = (cq_entries - 1) << 16 | qid;
    cq.cdw11 = 1u;  // physically contiguous, no interrupts
    auto c = admin(cq);
    if (!c || !ok(*c)) return false;
    sp::SubmissionEntry sq{};
    sq.opcode = sp::admin::kCreateIoSq;
    sq.dptr.prp.prp1 = iova(q.sq);
    sq.cdw10 = (sq_entries - 1) << 16 | qid;
    sq.cdw11 = 1u | uint32_t{prio} << 1 | uint32_t{qid} << 16;
    c = admin(sq);
    return c && ok(*c);
  }

  static uint64_t iova(const void* p) { return reinterpret_cast<uintptr_t>(p); }

 private:
  Profile profile_;
  nvme::RegionDmaSpace dma_;
  std::unique_ptr<nvme::Controller> ctrl_;
  std::unique_ptr<Simulation> sim_;
  uint32_t device_ = 0;
  std::vector<void*> memory_;
  Queue admin_;
  std::vector<Queue> io_;
  uint16_t next_cid_ = 1;
};

// PRP1 only: the data must not cross a 4 KiB page unless prp2 is given.
inline sp::SubmissionEntry rw(uint8_t opcode, uint64_t slba, uint32_t nlb, const void* buf,
                              const void* prp2 = nullptr) {
  sp::SubmissionEntry c{};
  c.opcode = opcode;
  c.nsid = 1;
  c.dptr.prp.prp1 = Rig::iova(buf);
  c.dptr.prp.prp2 = prp2 ? Rig::iova(prp2) : 0;
  c.cdw10 = static_cast<uint32_t>(slba);
  c.cdw11 = static_cast<uint32_t>(slba >> 32);
  c.cdw12 = nlb - 1;
  return c;
}

inline sp::SubmissionEntry flush() {
  sp::SubmissionEntry c{};
  c.opcode = sp::nvm::kFlush;
  c.nsid = 1;
  return c;
}

inline sp::SubmissionEntry set_features(uint8_t fid, uint32_t cdw11) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kSetFeatures;
  c.cdw10 = fid;
  c.cdw11 = cdw11;
  return c;
}

inline sp::SubmissionEntry get_features(uint8_t fid) {
  sp::SubmissionEntry c{};
  c.opcode = sp::admin::kGetFeatures;
  c.cdw10 = fid;
  return c;
}

inline void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 9));
}

// p4800x figures on a small namespace (64 MiB of 512-byte blocks).
inline Profile small_p4800x() {
  auto r = load_profile("p4800x");
  EXPECT_TRUE(r.ok()) << r.error();
  Profile p = r.value();
  p.controller.namespaces.at(0).size_bytes = 64u << 20;
  p.controller.max_io_queue_pairs = 8;
  p.controller.max_queue_entries = 1024;
  return p;
}

inline Profile small_null() {
  auto r = load_profile("null");
  EXPECT_TRUE(r.ok()) << r.error();
  Profile p = r.value();
  p.controller.namespaces.at(0).size_bytes = 16u << 20;
  p.controller.max_io_queue_pairs = 8;
  p.controller.max_queue_entries = 1024;
  return p;
}

// A small NAND drive with the gen4-tlc timings: 2 channels x 2 dies x 1 plane x 64 blocks x
// 16 pages of 16 KiB (64 MiB raw), a 32 MiB namespace, a 1 MiB volatile write cache.
inline Profile small_nand() {
  auto r = load_profile("gen4-tlc");
  EXPECT_TRUE(r.ok()) << r.error();
  Profile p = r.value();
  p.nand_geometry = NandGeometry{2, 2, 1, 64, 16, 16384};
  p.ftl.precondition = Precondition::kNone;
  p.controller.namespaces.at(0).size_bytes = 32u << 20;
  p.ftl.logical_bytes = 32u << 20;
  p.cache.bytes = 1u << 20;
  p.controller.max_io_queue_pairs = 8;
  p.controller.max_queue_entries = 1024;
  p.max_outstanding = 256;
  const auto v = validate(p);
  EXPECT_TRUE(v.ok()) << v.error();
  return p;
}

// Every test's device must end with the engine and the controller in agreement.
class TimedSsdTest : public ::testing::Test {
 protected:
  // One simulation at a time: the previous rig (if any) is checked and destroyed first.
  Rig& make(const Profile& p, uint64_t seed = 1) {
    finish();
    rig_ = std::make_unique<Rig>(p, seed);
    return *rig_;
  }
  void TearDown() override { finish(); }
  void finish() {
    if (rig_) {
      EXPECT_EQ(rig_->stats().engine_mismatches, 0u);
      EXPECT_FALSE(rig_->ctrl().fatal());
      // The engine is a clocked block: at most one edge per clock period.
      const SimTime period = kUs / rig_->profile().frontend_clock_mhz;
      EXPECT_LE(rig_->stats().engine_cycles, rig_->now() / period + 1)
          << "more engine cycles than clock periods in " << rig_->now() << " ps";
    }
    rig_.reset();
  }
  std::unique_ptr<Rig> rig_;
};

}  // namespace pollux::emu::timing::timed_ssd_testing
