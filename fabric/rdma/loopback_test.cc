// Pollux's NVMe/RDMA host (the driver's controller through fabric/rdma's host transport)
// against Pollux's NVMe/RDMA target, in one process and in virtual time (testing/rdma_world.h):
// connect and identify; verified writes and reads of many sizes, in the capsule and by keyed
// SGL (RDMA READ / WRITE), up to the largest transfer; several I/O queues; a lossy wire (the
// NICs' retransmission keeps the data right; the same seed gives the same run); a queue the
// target ends: the host resets and goes on.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fabric/rdma/queue.h"
#include "fabric/rdma/testing/rdma_world.h"

namespace pollux::fabric::rdma::testing {
namespace {

namespace sn = spec::nvme;

struct Done {
  bool done = false;
  uint16_t status = 0;
  static void cb(void* ctx, const sn::CompletionEntry& c) {
    auto* d = static_cast<Done*>(ctx);
    d->done = true;
    d->status = c.status & 0xfffe;
  }
};

// Pumps the world and polls the queue pairs until every Done is set (a virtual minute at most);
// a queue that broke makes the controller reset, as its health check would.
bool wait(World& w, std::vector<nvme::Qpair*> qps, Done* ds, std::size_t n) {
  const uint64_t end = w.clock().now() + 60'000'000'000ull;
  for (;;) {
    std::size_t left = 0;
    for (std::size_t i = 0; i < n; ++i) left += ds[i].done ? 0 : 1;
    if (left == 0) return true;
    if (w.clock().now() > end) return false;
    for (nvme::Qpair* q : qps) q->process_completions();
    w.ctrl().process_admin_completions();
    if (!w.ctrl().healthy() && !w.ctrl().failed()) (void)w.ctrl().reset();
    w.pump();
  }
}

uint16_t io(World& w, nvme::Qpair& qp, bool write, void* buf, uint64_t lba, uint32_t nlb) {
  const nvme::Namespace& ns = *w.ctrl().ns(1);
  Done d;
  const int rc =
      write ? qp.write(ns, buf, lba, nlb, Done::cb, &d) : qp.read(ns, buf, lba, nlb, Done::cb, &d);
  if (rc != 0) return 0xffff;
  return wait(w, {&qp}, &d, 1) ? d.status : 0xffff;
}

void fill(uint8_t* p, std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng());
}

std::unique_ptr<nvme::Qpair> io_qpair(World& w, uint32_t queue_size = 64) {
  nvme::QpairOptions qo;
  qo.queue_size = queue_size;
  auto q = w.ctrl().alloc_io_qpair(qo);
  EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().message);
  return q.ok() ? std::move(q).value() : nullptr;
}

// n I/O queue pairs of 32 entries.
std::vector<std::unique_ptr<nvme::Qpair>> io_qpairs(World& w, int n) {
  std::vector<std::unique_ptr<nvme::Qpair>> qps;
  for (int i = 0; i < n; ++i) qps.push_back(io_qpair(w, 32));
  return qps;
}

// Writes then reads back each size at its own LBA range; returns the bytes verified.
uint64_t verified_sizes(World& w, nvme::Qpair& qp, uint8_t* out, uint8_t* in, uint64_t lba0) {
  uint64_t lba = lba0, verified = 0;
  for (uint32_t bytes : {512u, 1024u, 4096u, 4608u, 8192u, 65536u, 131072u}) {
    const uint32_t nlb = bytes / 512;
    fill(out, bytes, bytes + static_cast<uint32_t>(lba0));
    EXPECT_EQ(io(w, qp, true, out, lba, nlb), 0) << bytes << " bytes";
    std::memset(in, 0xee, bytes);
    EXPECT_EQ(io(w, qp, false, in, lba, nlb), 0) << bytes << " bytes";
    EXPECT_EQ(std::memcmp(out, in, bytes), 0) << bytes << " bytes read back differ";
    if (std::memcmp(out, in, bytes) == 0) verified += bytes;
    lba += nlb + 8;
  }
  return verified;
}

TEST(RdmaLoopback, ConnectIdentifyAndVerifiedIoInCapsuleAndKeyed) {
  World w;
  ASSERT_EQ(w.attach(), "");
  const sn::IdentifyController& id = w.ctrl().identify();
  EXPECT_EQ(std::string(id.subnqn), kNqn);
  EXPECT_NE(id.sgls & sn::sgls::kKeyed, 0u) << "an RDMA controller takes keyed SGLs";
  EXPECT_EQ(id.mdts, 5);  // 128 KiB
  ASSERT_NE(w.ctrl().ns(1), nullptr);
  EXPECT_EQ(w.ctrl().ns(1)->num_blocks, 16384u);
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* out = static_cast<uint8_t*>(mem->data());
  const auto before = w.group().stats();
  const uint64_t reads0 = before.rdma_reads, writes0 = before.rdma_writes, icd0 = before.in_capsule;
  EXPECT_EQ(verified_sizes(w, *qp, out, out + (512 << 10), 0),
            512u + 1024 + 4096 + 4608 + 8192 + 65536 + 131072);
  // 512 B, 1 KiB and 4 KiB writes travel in the capsule (IOCCSZ: 4 KiB of data); the others
  // are fetched with RDMA READ; every read comes back by RDMA WRITE.
  const auto& s = w.group().stats();
  EXPECT_EQ(s.in_capsule - icd0, 3u);
  EXPECT_EQ(s.rdma_reads - reads0, 4u);
  EXPECT_EQ(s.rdma_writes - writes0, 7u);
  // An LBA beyond the namespace: the target's status reaches the host.
  EXPECT_EQ(sn::status::sc(io(w, *qp, false, out, 16384, 1)), sn::sc::kLbaOutOfRange);
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

TEST(RdmaLoopback, SeveralIoQueuesInterleaved) {
  World w;
  ASSERT_EQ(w.attach(), "");
  auto qps = io_qpairs(w, 3);
  for (auto& q : qps) ASSERT_NE(q, nullptr);
  EXPECT_EQ(w.group().connections(), 4u);  // admin + 3 I/O
  auto mem = w.host_memory(4 << 20);
  auto* base = static_cast<uint8_t*>(mem->data());
  const nvme::Namespace& ns = *w.ctrl().ns(1);
  // 16 commands on each queue at once, each its own 8 KiB block range.
  constexpr uint32_t kPerQueue = 16, kNlb = 16;
  std::vector<Done> ds(3 * kPerQueue);
  std::vector<nvme::Qpair*> raw;
  for (auto& q : qps) raw.push_back(q.get());
  for (uint32_t i = 0; i < 3 * kPerQueue; ++i) {
    fill(base + i * 8192, 8192, i);
    ASSERT_EQ(qps[i % 3]->write(ns, base + i * 8192, i * kNlb, kNlb, Done::cb, &ds[i]), 0);
  }
  ASSERT_TRUE(wait(w, raw, ds.data(), ds.size()));
  for (const Done& d : ds) EXPECT_EQ(d.status, 0);
  uint8_t* in = base + (2 << 20);
  ds.assign(ds.size(), Done{});
  for (uint32_t i = 0; i < 3 * kPerQueue; ++i)
    ASSERT_EQ(qps[(i + 1) % 3]->read(ns, in + i * 8192, i * kNlb, kNlb, Done::cb, &ds[i]), 0);
  ASSERT_TRUE(wait(w, raw, ds.data(), ds.size()));
  for (const Done& d : ds) EXPECT_EQ(d.status, 0);
  EXPECT_EQ(std::memcmp(base, in, 3 * kPerQueue * 8192), 0);
  for (auto& q : qps) ASSERT_EQ(w.ctrl().free_io_qpair(std::move(q)), 0);
}

// Interleaved verified I/O: `per_queue` 8 KiB writes on each queue at once, then reads of
// them through other queues; true when every status is 0 and the data came back.
bool interleaved_io(World& w, std::vector<std::unique_ptr<nvme::Qpair>>& qps, uint32_t per_queue) {
  auto mem = w.host_memory(8 << 20);
  auto* base = static_cast<uint8_t*>(mem->data());
  const nvme::Namespace& ns = *w.ctrl().ns(1);
  const uint32_t n = static_cast<uint32_t>(qps.size()) * per_queue, nlb = 16;
  std::vector<Done> ds(n);
  std::vector<nvme::Qpair*> raw;
  for (auto& q : qps) raw.push_back(q.get());
  for (uint32_t i = 0; i < n; ++i) {
    fill(base + i * 8192, 8192, i + 77);
    EXPECT_EQ(qps[i % qps.size()]->write(ns, base + i * 8192, i * nlb, nlb, Done::cb, &ds[i]), 0);
  }
  if (!wait(w, raw, ds.data(), ds.size())) return false;
  bool ok = true;
  for (const Done& d : ds) ok &= d.status == 0;
  uint8_t* in = base + (4 << 20);
  ds.assign(ds.size(), Done{});
  for (uint32_t i = 0; i < n; ++i)
    EXPECT_EQ(qps[(i + 1) % qps.size()]->read(ns, in + i * 8192, i * nlb, nlb, Done::cb, &ds[i]),
              0);
  if (!wait(w, raw, ds.data(), ds.size())) return false;
  for (const Done& d : ds) ok &= d.status == 0;
  return ok && std::memcmp(base, in, std::size_t{n} * 8192) == 0;
}

// SPDK's default: the poll group's shared receive queue takes every connection's capsules.
// After the I/O, and after the queues are gone, every buffer is back in it (none leaks with a
// connection).
TEST(RdmaLoopback, EveryConnectionReceivesIntoThePollGroupsSharedReceiveQueue) {
  World w;
  ASSERT_EQ(w.attach(), "");
  ASSERT_NE(w.group().srq(), nullptr);
  const uint64_t depth = w.transport().options().max_srq_depth;
  auto qps = io_qpairs(w, 3);
  for (auto& q : qps) ASSERT_NE(q, nullptr);
  EXPECT_TRUE(interleaved_io(w, qps, 16));
  EXPECT_EQ(w.group().stats().srq_posted, depth);
  const auto stats = w.transport().group_stats(*w.target().groups().at(0));
  EXPECT_EQ(stats["srq"], true);
  for (auto& q : qps) ASSERT_EQ(w.ctrl().free_io_qpair(std::move(q)), 0);
  for (int i = 0; i < 1000 && w.group().connections() > 1; ++i) w.pump();
  EXPECT_EQ(w.group().connections(), 1u);  // the admin queue's
  EXPECT_EQ(w.group().stats().srq_posted, depth);
}

// no_srq: each connection posts receives of its own; the same I/O works.
TEST(RdmaLoopback, WithoutAnSrqEachConnectionPostsItsOwnReceives) {
  WorldOptions o;
  o.target.no_srq = true;
  World w(o);
  ASSERT_EQ(w.attach(), "");
  EXPECT_EQ(w.group().srq(), nullptr);
  auto qps = io_qpairs(w, 2);
  for (auto& q : qps) ASSERT_NE(q, nullptr);
  EXPECT_TRUE(interleaved_io(w, qps, 16));
  EXPECT_EQ(w.group().stats().srq_posted, 0u);
  for (auto& q : qps) ASSERT_EQ(w.ctrl().free_io_qpair(std::move(q)), 0);
}

// An SRQ smaller than the capsules in flight runs dry: the target's NIC answers RNR NAK, the
// host's NIC sends again after the RNR timer (rnr_retry 7: forever), and nothing is lost.
TEST(RdmaLoopback, ASharedReceiveQueueThatRunsDryCostsRnrRetriesNotIo) {
  WorldOptions o;
  o.target.max_srq_depth = 16;
  World w(o);
  ASSERT_EQ(w.attach(), "");
  ASSERT_NE(w.group().srq(), nullptr);
  auto qps = io_qpairs(w, 3);
  for (auto& q : qps) ASSERT_NE(q, nullptr);
  const uint64_t rnr0 = w.target_machine().device->nic().counters().rnr_naks_sent;
  EXPECT_TRUE(interleaved_io(w, qps, 24));  // 72 capsules at once, 16 buffers
  EXPECT_GT(w.target_machine().device->nic().counters().rnr_naks_sent, rnr0);
  EXPECT_EQ(w.group().stats().srq_posted, 16u);
  for (auto& q : qps) ASSERT_EQ(w.ctrl().free_io_qpair(std::move(q)), 0);
}

// Buffers in pieces: a keyed descriptor per piece, listed in the capsule behind a Last Segment
// (the target reads and writes each), up to the controller's MSDBD (4).
TEST(RdmaLoopback, ScatteredBuffersGoAsKeyedSegments) {
  World w;
  ASSERT_EQ(w.attach(), "");
  EXPECT_EQ(static_cast<const uint8_t*>(w.ctrl().identify().nvmeof)[11], 4) << "MSDBD";
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* p = static_cast<uint8_t*>(mem->data());
  const nvme::Namespace& ns = *w.ctrl().ns(1);
  // 24 KiB written from three pieces far apart, read back into two other pieces.
  const iovec wv[3] = {{p + 0, 8192}, {p + 65536, 4096}, {p + 200000, 12288}};
  for (const iovec& v : wv)
    fill(static_cast<uint8_t*>(v.iov_base), v.iov_len, static_cast<uint32_t>(v.iov_len));
  const uint64_t reads = w.group().stats().rdma_reads;
  Done d;
  ASSERT_EQ(qp->writev(ns, wv, 3, 1000, 48, Done::cb, &d), 0);
  ASSERT_TRUE(wait(w, {qp.get()}, &d, 1));
  ASSERT_EQ(d.status, 0);
  EXPECT_EQ(w.group().stats().rdma_reads - reads, 3u) << "one READ per piece";
  const iovec rv[2] = {{p + 400000, 10000}, {p + 500000, 14576}};
  const uint64_t writes = w.group().stats().rdma_writes;
  d = Done{};
  ASSERT_EQ(qp->readv(ns, rv, 2, 1000, 48, Done::cb, &d), 0);
  ASSERT_TRUE(wait(w, {qp.get()}, &d, 1));
  ASSERT_EQ(d.status, 0);
  EXPECT_EQ(w.group().stats().rdma_writes - writes, 2u) << "one WRITE per piece";
  std::vector<uint8_t> wrote, got;
  for (const iovec& v : wv)
    wrote.insert(wrote.end(), static_cast<uint8_t*>(v.iov_base),
                 static_cast<uint8_t*>(v.iov_base) + v.iov_len);
  for (const iovec& v : rv)
    got.insert(got.end(), static_cast<uint8_t*>(v.iov_base),
               static_cast<uint8_t*>(v.iov_base) + v.iov_len);
  EXPECT_EQ(wrote, got);
  // Five pieces apart: more than MSDBD, refused before anything is sent.
  iovec five[5];
  for (int i = 0; i < 5; ++i) five[i] = iovec{p + 600000 + i * 8192, 4096};
  EXPECT_NE(qp->writev(ns, five, 5, 0, 40, Done::cb, &d), 0);
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

// Buffers in regions that come and go: each region is registered on first use, and an MR
// whose region left the registry goes before the next command (a region re-made at the same
// address must not be reached through the old one's key).
TEST(RdmaLoopback, RegionsThatComeAndGoAreRegisteredAndDropped) {
  World w;
  ASSERT_EQ(w.attach(), "");
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto* rq = dynamic_cast<RdmaQueue*>(&qp->transport());
  ASSERT_NE(rq, nullptr);
  for (int round = 0; round < 4; ++round) {
    auto mem = w.host_memory((256 << 10) + round * 4096);
    auto* out = static_cast<uint8_t*>(mem->data());
    uint8_t* in = out + (128 << 10);
    fill(out, 65536, 100 + round);
    ASSERT_EQ(io(w, *qp, true, out, 512, 128), 0) << "round " << round;
    std::memset(in, 0, 65536);
    ASSERT_EQ(io(w, *qp, false, in, 512, 128), 0) << "round " << round;
    EXPECT_EQ(std::memcmp(out, in, 65536), 0) << "round " << round;
    EXPECT_EQ(rq->registered_regions(), 1u) << "only the live region keeps an MR";
  }
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

// What a lossy run did, independent of where its buffers happened to be mapped (the packets
// carry virtual addresses, so the wire's byte hash differs between two runs of one process):
// every transmit decision (time, ports, opcode, PSN, length, fate), the CM stream's deliveries,
// the end time.
struct LossyOutcome {
  uint64_t decisions_hash = 0, cm_hash = 0, end_ns = 0, verified = 0, dropped = 0;
};

LossyOutcome lossy_run(uint64_t seed) {
  WorldOptions o;
  o.seed = seed;
  o.faults.loss = 0.02;
  o.faults.reorder = 0.01;
  o.faults.duplicate = 0.01;
  o.host_qp.timeout = 8;  // 1 ms ACK timeout: losses cost little virtual time
  o.target.qp.timeout = 8;
  LossyOutcome out;
  World w(o);
  w.cluster().wire().record_trace(true);
  EXPECT_EQ(w.attach(), "");
  if (!w.ctrl_ptr()) return out;
  auto qp = io_qpair(w);
  if (!qp) return out;
  auto mem = w.host_memory(1 << 20);
  auto* p = static_cast<uint8_t*>(mem->data());
  out.verified = verified_sizes(w, *qp, p, p + (512 << 10), 100);
  EXPECT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
  uint64_t h = 1469598103934665603ull;
  for (const std::string& line : w.cluster().wire().trace())
    h = (h ^ std::hash<std::string>{}(line)) * 1099511628211ull;
  out.decisions_hash = h;
  out.cm_hash = w.network().trace_hash();
  out.dropped = w.cluster().wire().stats().dropped;
  out.end_ns = w.clock().now();
  return out;
}

TEST(RdmaLoopback, LossyWireKeepsDataRightAndReplaysBySeed) {
  const LossyOutcome a = lossy_run(7);
  const uint64_t all = 512u + 1024 + 4096 + 4608 + 8192 + 65536 + 131072;
  EXPECT_EQ(a.verified, all);
  EXPECT_GT(a.dropped, 10u) << "the wire lost packets: the NICs retransmitted";
  const LossyOutcome b = lossy_run(7);
  EXPECT_EQ(b.verified, all);
  EXPECT_EQ(a.decisions_hash, b.decisions_hash) << "same seed, same packets and fates";
  EXPECT_EQ(a.cm_hash, b.cm_hash);
  EXPECT_EQ(a.end_ns, b.end_ns);
  const LossyOutcome c = lossy_run(8);
  EXPECT_EQ(c.verified, all);
  EXPECT_NE(a.decisions_hash, c.decisions_hash) << "another seed, other losses";
}

// The target ends an I/O queue (as on a target-side failure): the host's next command finds
// the QP broken, the controller resets (every queue set up again with the CM and Connect), and
// I/O goes on with the data intact.
TEST(RdmaLoopback, QueueEndedByTargetHostResetsAndRecovers) {
  WorldOptions o;
  o.host_qp.timeout = 8;
  o.host_qp.retry_cnt = 2;
  World w(o);
  ASSERT_EQ(w.attach(), "");
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* out = static_cast<uint8_t*>(mem->data());
  fill(out, 65536, 3);
  ASSERT_EQ(io(w, *qp, true, out, 0, 128), 0);
  const uint64_t accepted = w.group().stats().accepted;
  {
    event::CurrentThreadScope scope(w.target_thread());
    for (target::Qpair* q : w.target().groups().at(0)->qpairs())
      if (!q->is_admin()) q->disconnect();
  }
  uint8_t* in = out + (512 << 10);
  std::memset(in, 0, 65536);
  // The command may end with a retriable status (the reset aborts it); then again.
  uint16_t st = io(w, *qp, false, in, 0, 128);
  if (st != 0) {
    EXPECT_FALSE(sn::status::dnr(st)) << "a reset ends I/O retriably";
    st = io(w, *qp, false, in, 0, 128);
  }
  ASSERT_EQ(st, 0);
  EXPECT_EQ(std::memcmp(out, in, 65536), 0);
  EXPECT_GT(w.group().stats().accepted, accepted) << "the queues were connected again";
  EXPECT_EQ(w.group().connections(), 2u);  // the old ones are gone
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

// A target-side error completion: the target's RDMA READ of a write's data is lost with the
// host's link (its retries run out), so the target ends the queue without a response. The
// host's queue sees the CM disconnect while the write waits, the controller resets, and the
// write, ended retriably, goes through again.
TEST(RdmaLoopback, TargetErrorCompletionEndsQueueHostSeesItAndResets) {
  WorldOptions o;
  o.target.qp.timeout = 8;  // 1 ms
  o.target.qp.retry_cnt = 2;
  World w(o);
  ASSERT_EQ(w.attach(), "");
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* out = static_cast<uint8_t*>(mem->data());
  fill(out, 131072, 11);
  const uint64_t reads = w.group().stats().rdma_reads;
  const uint64_t host_port = 2;  // the host's NIC: the second on the wire
  Done d;
  ASSERT_EQ(qp->write(*w.ctrl().ns(1), out, 64, 256, Done::cb, &d), 0);
  for (int i = 0; i < 100000 && w.group().stats().rdma_reads == reads; ++i) {
    qp->process_completions();
    w.pump();
  }
  ASSERT_GT(w.group().stats().rdma_reads, reads) << "the target asked for the data";
  w.cluster().wire().set_link_up(host_port, false);  // its READ responses are lost
  for (int i = 0; i < 1'000'000 && w.group().stats().error_completions == 0; ++i) {
    qp->process_completions();
    w.pump();
  }
  EXPECT_GE(w.group().stats().error_completions, 1u) << "the READ's retries ran out";
  EXPECT_FALSE(d.done) << "no response: the target's QP is in error";
  w.cluster().wire().set_link_up(host_port, true);
  ASSERT_TRUE(wait(w, {qp.get()}, &d, 1)) << "the host noticed, reset, and ended the write";
  if (d.status != 0) {
    EXPECT_FALSE(sn::status::dnr(d.status)) << "a reset ends I/O retriably";
    ASSERT_EQ(io(w, *qp, true, out, 64, 256), 0);
  }
  uint8_t* in = out + (512 << 10);
  ASSERT_EQ(io(w, *qp, false, in, 64, 256), 0);
  EXPECT_EQ(std::memcmp(out, in, 131072), 0);
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

// A command whose keyed SGL carries a wrong rkey (injected on the host's side): the target's
// RDMA WRITE of the read data fails with a remote access error at the host's NIC, both QPs go
// to Error, the target ends that connection and no response comes; the host's queue breaks,
// the controller resets and the read, ended retriably, goes through with the right data.
TEST(RdmaLoopback, ABadRkeyEndsTheConnectionAndTheHostRecovers) {
  WorldOptions o;
  o.host_faults = std::make_shared<RdmaHostFaults>();
  World w(o);
  ASSERT_EQ(w.attach(), "");
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* out = static_cast<uint8_t*>(mem->data());
  fill(out, 16384, 21);
  ASSERT_EQ(io(w, *qp, true, out, 256, 32), 0);
  const auto before = w.group().stats();
  const uint64_t accepted = before.accepted, errors = before.error_completions;
  o.host_faults->bad_rkeys = 1;
  uint8_t* in = out + (512 << 10);
  std::memset(in, 0, 16384);
  uint16_t st = io(w, *qp, false, in, 256, 32);
  EXPECT_EQ(o.host_faults->bad_rkeys_sent.load(), 1u);
  EXPECT_EQ(o.host_faults->bad_rkeys.load(), 0u);
  EXPECT_GT(w.group().stats().error_completions, errors) << "the target's WRITE was refused";
  if (st != 0) {
    EXPECT_FALSE(sn::status::dnr(st)) << "a reset ends I/O retriably";
    st = io(w, *qp, false, in, 256, 32);
  }
  ASSERT_EQ(st, 0);
  EXPECT_EQ(std::memcmp(out, in, 16384), 0);
  EXPECT_GT(w.group().stats().accepted, accepted) << "the queues were connected again";
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

// The host's NIC is reset (a function-level reset: every QP, CQ, MR and PD on it is gone).
// Commands go unanswered; the queue finds the device failed, the controller resets, and the
// reconnect brings the NIC up again, makes the PD and MRs anew and goes on with the data intact.
TEST(RdmaLoopback, AHostNicResetIsRecoveredByTheControllerReset) {
  WorldOptions o;
  o.target.qp.timeout = 8;  // the target's QPs toward the dead NIC give up in ~9 ms
  o.target.qp.retry_cnt = 2;
  World w(o);
  ASSERT_EQ(w.attach(), "");
  auto qp = io_qpair(w);
  ASSERT_NE(qp, nullptr);
  auto mem = w.host_memory(1 << 20);
  auto* out = static_cast<uint8_t*>(mem->data());
  fill(out, 65536, 31);
  ASSERT_EQ(io(w, *qp, true, out, 512, 128), 0);
  verbs::Context& ctx = *w.host_machine().ctx;
  const uint32_t generation = ctx.generation();
  const uint64_t accepted = w.group().stats().accepted;
  w.host_machine().device->on_reset();
  uint8_t* in = out + (512 << 10);
  std::memset(in, 0, 65536);
  uint16_t st = io(w, *qp, false, in, 512, 128);
  if (st != 0) {
    EXPECT_FALSE(sn::status::dnr(st)) << "a reset ends I/O retriably";
    st = io(w, *qp, false, in, 512, 128);
  }
  ASSERT_EQ(st, 0);
  EXPECT_EQ(std::memcmp(out, in, 65536), 0);
  EXPECT_EQ(ctx.generation(), generation + 1) << "the device was brought up once";
  EXPECT_GT(w.group().stats().accepted, accepted);
  // Writes and reads on the recovered device, keyed and in the capsule.
  EXPECT_EQ(verified_sizes(w, *qp, out, in, 2048),
            512u + 1024 + 4096 + 4608 + 8192 + 65536 + 131072);
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp)), 0);
}

}  // namespace
}  // namespace pollux::fabric::rdma::testing
