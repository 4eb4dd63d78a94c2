// The NVMe/RDMA target against a raw RDMA host (the CM and verbs, no NVMe driver): connect
// requests with bad private data rejected with the status the specification names; malformed
// capsules and SGLs failing their command with the right NVMe status (a short capsule's buffer
// back in the SRQ); a bad remote key ending
// only that connection, with every data buffer back in the pool while the driver's host keeps
// working; a host queue larger than the target allows refused at attach.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric/rdma/testing/rdma_world.h"
#include "spec/nvme_rdma.h"

namespace pollux::fabric::rdma::testing {
namespace {

namespace sn = spec::nvme;
namespace nf = spec::nvmf;
namespace nr = spec::nvme_rdma;

// A host that speaks only RDMA: one QP, a buffer with an MR, capsules built by hand.
class RawHost {
 public:
  explicit RawHost(World& w) : w_(w), m_(w.host_machine()) {
    verbs::Context& ctx = *m_.ctx;
    pd_ = ctx.alloc_pd().value();
    cq_ = ctx.create_cq(256).value();
    verbs::QpInitAttr init;
    init.send_cq = init.recv_cq = cq_.get();
    init.cap = verbs::QpCap{64, 64, 1, 1};
    qp_ = ctx.create_qp(*pd_, init).value();
    mem_ = w.host_memory(1 << 20);
    mr_ = ctx.reg_mr(*pd_, mem_->data(), 1 << 20,
                     verbs::access::kLocalWrite | verbs::access::kRemoteRead |
                         verbs::access::kRemoteWrite)
              .value();
  }

  // The CM exchange with `pd` as the request's private data: the answer's event.
  CmEvent connect(const void* pd, std::size_t len) {
    const CmQpInfo me{qp_->qp_num(), m_.ctx->port_address(), 500};
    cm_ = CmId::connect(w_.network(), kTargetAddress, "4420", me, pd, len).value();
    CmEvent e;
    for (int i = 0; i < 1'000'000 && e.type == CmEventType::kNone; ++i) {
      e = cm_->poll();
      w_.pump();
    }
    if (e.type == CmEventType::kConnectResponse) {
      EXPECT_EQ(connect_qp(*qp_, e.peer, 500, QpTiming{}), 0);
      for (uint32_t i = 0; i < 32; ++i) post_recv(i);
      EXPECT_EQ(cm_->establish(), 0);
    }
    return e;
  }
  CmEvent connect_queue(uint16_t qid, uint16_t entries) {
    nr::CmRequest req{};
    req.qid = qid;
    req.hrqsize = entries;
    req.hsqsize = static_cast<uint16_t>(entries - 1);
    req.cntlid = 0xffff;
    return connect(&req, sizeof req);
  }

  uint8_t* at(std::size_t off) { return static_cast<uint8_t*>(mem_->data()) + off; }
  uint64_t addr(std::size_t off) { return reinterpret_cast<uintptr_t>(at(off)); }
  uint32_t rkey() const { return mr_->rkey(); }

  // Sends a capsule of `bytes` from offset 0 of the buffer (the SQE, then in-capsule data);
  // the response, or a CQE with status 0xffff when none came (the connection ended).
  sn::CompletionEntry send(const sn::SubmissionEntry& sqe, uint32_t icd = 0, uint32_t bytes = 64) {
    std::memcpy(at(0), &sqe, 64);
    const verbs::Sge sge{addr(0), bytes + icd, mr_->lkey()};
    verbs::SendWr wr;
    wr.wr_id = 1000;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = verbs::WrOpcode::kSend;
    wr.send_flags = verbs::send_flag::kSignaled;
    const verbs::SendWr* bad = nullptr;
    EXPECT_EQ(qp_->post_send(wr, &bad), 0);
    const uint64_t end = w_.clock().now() + 2'000'000'000;
    while (w_.clock().now() < end) {
      verbs::WorkCompletion wc;
      if (cq_->poll(&wc, 1) == 1) {
        if (wc.status != verbs::WcStatus::kSuccess) broken_ = true;
        if (wc.status == verbs::WcStatus::kSuccess && wc.opcode == verbs::WcOpcode::kRecv) {
          sn::CompletionEntry cqe;
          std::memcpy(&cqe, at(kRsp + 16 * wc.wr_id), sizeof cqe);
          post_recv(static_cast<uint32_t>(wc.wr_id));
          return cqe;
        }
        continue;
      }
      if (broken_) break;
      w_.pump();
    }
    sn::CompletionEntry none{};
    none.status = 0xffff;
    return none;
  }
  CmId& cm() { return *cm_; }

 private:
  static constexpr std::size_t kRsp = 512 * 1024;  // response buffers
  void post_recv(uint32_t i) {
    const verbs::Sge sge{addr(kRsp + 16 * i), 16, mr_->lkey()};
    verbs::RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const verbs::RecvWr* bad = nullptr;
    EXPECT_EQ(qp_->post_recv(wr, &bad), 0);
  }
  World& w_;
  Machine& m_;
  std::unique_ptr<verbs::Pd> pd_;
  std::unique_ptr<verbs::Cq> cq_;
  std::unique_ptr<verbs::Qp> qp_;
  std::unique_ptr<env::DmaRegion> mem_;
  std::unique_ptr<verbs::Mr> mr_;
  std::unique_ptr<CmId> cm_;
  bool broken_ = false;

 public:
  ~RawHost() {
    if (cm_) cm_->disconnect();
    qp_.reset();
    mr_.reset();
    cq_.reset();
  }
};

uint16_t reject_status(const CmEvent& e) {
  EXPECT_EQ(e.type, CmEventType::kRejected);
  nr::CmReject rej{};
  EXPECT_EQ(e.private_data_len, sizeof rej);
  std::memcpy(&rej, e.private_data, sizeof rej);
  EXPECT_EQ(rej.recfmt, nr::kRecfmt10);
  return rej.sts;
}

TEST(RdmaTarget, RejectsBadPrivateDataWithTheSpecStatus) {
  World w;
  ASSERT_TRUE(w.ready());
  auto request = [](uint16_t qid, uint16_t hrq, uint16_t hsq) {
    nr::CmRequest r{};
    r.qid = qid;
    r.hrqsize = hrq;
    r.hsqsize = hsq;
    r.cntlid = 0xffff;
    return r;
  };
  struct Case {
    nr::CmRequest req;
    std::size_t len;
    uint16_t sts;
  };
  nr::CmRequest bad_recfmt = request(0, 32, 31);
  bad_recfmt.recfmt = 1;
  const Case cases[] = {
      {request(0, 32, 31), 8, nr::cm_status::kInvalidLength},
      {bad_recfmt, sizeof(nr::CmRequest), nr::cm_status::kInvalidRecfmt},
      {request(128, 32, 31), sizeof(nr::CmRequest), nr::cm_status::kInvalidQid},  // max 127
      {request(1, 32, 0), sizeof(nr::CmRequest), nr::cm_status::kInvalidHsqsize},
      {request(1, 200, 128), sizeof(nr::CmRequest), nr::cm_status::kInvalidHsqsize},  // > 128
      {request(0, 200, 128), sizeof(nr::CmRequest), nr::cm_status::kInvalidHsqsize},
      {request(1, 31, 31), sizeof(nr::CmRequest), nr::cm_status::kInvalidHrqsize},
  };
  for (const Case& c : cases) {
    RawHost h(w);
    EXPECT_EQ(reject_status(h.connect(&c.req, c.len)), c.sts) << "expected " << c.sts;
  }
  EXPECT_EQ(w.group().stats().rejected, std::size(cases));
  EXPECT_EQ(w.group().connections(), 0u);
  // A good one is accepted, with the controller's receive queue in the accept.
  RawHost h(w);
  const CmEvent e = h.connect_queue(0, 32);
  ASSERT_EQ(e.type, CmEventType::kConnectResponse);
  nr::CmAccept acc{};
  ASSERT_GE(e.private_data_len, 4);
  std::memcpy(&acc, e.private_data, 4);
  EXPECT_EQ(acc.recfmt, nr::kRecfmt10);
  EXPECT_GE(acc.crqsize, 32);
  for (int i = 0; i < 100; ++i) w.pump();
  EXPECT_EQ(w.group().connections(), 1u);
}

TEST(RdmaTarget, DiscoveryLogEntryNamesRdmaAndItsCm) {
  World w;
  ASSERT_TRUE(w.ready());
  std::vector<uint8_t> log;
  {
    event::CurrentThreadScope scope(w.target_thread());
    log = w.target().discovery_log("nqn.2026-11.io.pollux:any");
  }
  nf::DiscoveryLogHeader h;
  ASSERT_GE(log.size(), sizeof h + sizeof(nf::DiscoveryLogEntry));
  std::memcpy(&h, log.data(), sizeof h);
  ASSERT_EQ(h.numrec, 1u);
  nf::DiscoveryLogEntry e;
  std::memcpy(&e, log.data() + sizeof h, sizeof e);
  EXPECT_EQ(e.trtype, nf::trtype::kRdma);
  EXPECT_EQ(e.tsas[0], nf::tsas::kRdmaQptypeConnected);
  EXPECT_EQ(e.tsas[1], nf::tsas::kRdmaPrtypeRoceV2);
  EXPECT_EQ(e.tsas[2], nf::tsas::kRdmaCmsRdmaCm);
  EXPECT_EQ(std::string(e.subnqn), kNqn);
}

TEST(RdmaTarget, HostQueueLargerThanAllowedIsRefusedAtAttach) {
  World w;
  const std::string e = w.attach(/*admin_queue_size=*/256);
  EXPECT_NE(e.find("invalid HSQSIZE"), std::string::npos) << e;
}

sn::SubmissionEntry write_cmd(uint16_t cid) {
  sn::SubmissionEntry c{};
  c.opcode = sn::nvm::kWrite;
  c.cid = cid;
  c.nsid = 1;
  c.set_psdt(sn::kPsdtSglMptrContiguous);
  return c;
}

TEST(RdmaTarget, MalformedSglsFailTheCommandWithTheRightStatus) {
  World w;
  ASSERT_TRUE(w.ready());
  RawHost h(w);
  ASSERT_EQ(h.connect_queue(0, 32).type, CmEventType::kConnectResponse);
  auto sc_of = [](const sn::CompletionEntry& c) { return sn::status::sc(c.status); };
  // Keyed, subtype Fh (invalidate the key, as Linux's host sends every keyed descriptor): the
  // data moves and a plain SEND answers (no remote invalidation: the host invalidates itself).
  sn::SubmissionEntry c = write_cmd(1);
  auto k =
      nf::KeyedSglDescriptor::make(h.addr(4096), 512, h.rkey(), nf::sgl::kSubtypeInvalidateKey);
  std::memcpy(&c.dptr.sgl1, &k, sizeof k);
  const uint64_t reads_before = w.group().stats().rdma_reads;
  sn::CompletionEntry r = h.send(c);
  EXPECT_EQ(r.cid, 1);
  EXPECT_NE(sc_of(r), sn::sc::kSglDescriptorTypeInvalid) << "subtype Fh is a keyed data block too";
  EXPECT_EQ(w.group().stats().rdma_reads, reads_before + 1) << "its data was fetched by READ";
  // Keyed, longer than max_io_size.
  c = write_cmd(2);
  k = nf::KeyedSglDescriptor::make(h.addr(4096), 256 * 1024, h.rkey());
  std::memcpy(&c.dptr.sgl1, &k, sizeof k);
  EXPECT_EQ(sc_of(h.send(c)), sn::sc::kDataSglLengthInvalid);
  // A descriptor type the target does not take (a Segment).
  c = write_cmd(3);
  c.dptr.sgl1 =
      sn::SglDescriptor{h.addr(4096), 16, {}, sn::SglDescriptor::make_id(sn::sgl::kTypeSegment, 0)};
  EXPECT_EQ(sc_of(h.send(c)), sn::sc::kSglDescriptorTypeInvalid);
  // In-capsule: the offset beyond the data that came, then more length than came.
  c = write_cmd(4);
  c.dptr.sgl1 = nf::sgl::in_capsule(512, 1024);
  EXPECT_EQ(sc_of(h.send(c, 512)), sn::sc::kSglOffsetInvalid);
  c = write_cmd(5);
  c.dptr.sgl1 = nf::sgl::in_capsule(1024);
  EXPECT_EQ(sc_of(h.send(c, 512)), sn::sc::kDataSglLengthInvalid);
  // PRPs: fabrics commands describe data by SGL only.
  c = write_cmd(6);
  c.set_psdt(0);
  EXPECT_EQ(sc_of(h.send(c)), sn::sc::kInvalidField);
  // A Last Segment whose length is no whole number of descriptors; one listing more than
  // MSDBD (4); one listing a descriptor that is not keyed.
  c = write_cmd(10);
  c.dptr.sgl1 = sn::SglDescriptor{
      0, 24, {}, sn::SglDescriptor::make_id(sn::sgl::kTypeLastSegment, sn::sgl::kSubtypeOffset)};
  EXPECT_EQ(sc_of(h.send(c, 32)), sn::sc::kInvalidSglSegmentDescriptor);
  const uint8_t last_segment =
      sn::SglDescriptor::make_id(sn::sgl::kTypeLastSegment, sn::sgl::kSubtypeOffset);
  c = write_cmd(11);
  c.dptr.sgl1 = sn::SglDescriptor{0, 5 * 16, {}, last_segment};
  for (int i = 0; i < 5; ++i) {
    const auto d = nf::KeyedSglDescriptor::make(h.addr(8192 + i * 512), 512, h.rkey());
    std::memcpy(h.at(64 + i * 16), &d, 16);
  }
  EXPECT_EQ(sc_of(h.send(c, 80)), sn::sc::kInvalidNumberOfSglDescriptors);
  c = write_cmd(12);
  c.dptr.sgl1 = sn::SglDescriptor{0, 32, {}, last_segment};
  const auto plain = nf::sgl::in_capsule(16);
  std::memcpy(h.at(64 + 16), &plain, 16);
  EXPECT_EQ(sc_of(h.send(c, 32)), sn::sc::kSglDescriptorTypeInvalid);
  EXPECT_EQ(w.group().stats().bad_sgls, 8u);
  EXPECT_EQ(w.group().connections(), 1u) << "bad SGLs fail commands, not the connection";
  // A capsule shorter than a command ends the connection, and its buffer goes back to the
  // group's SRQ (it used to stay out: every short capsule took one for good).
  ASSERT_NE(w.group().srq(), nullptr);
  c = write_cmd(7);
  EXPECT_EQ(h.send(c, 0, 40).status, 0xffff);
  for (int i = 0; i < 10000 && w.group().connections() != 0; ++i) w.pump();
  EXPECT_EQ(w.group().connections(), 0u);
  EXPECT_EQ(w.group().stats().srq_posted, w.transport().options().max_srq_depth);
}

TEST(RdmaTarget, BadRemoteKeyEndsOnlyThatConnectionAndLeaksNoBuffer) {
  World w;
  ASSERT_EQ(w.attach(), "");
  nvme::QpairOptions qo;
  qo.queue_size = 32;
  auto qp = w.ctrl().alloc_io_qpair(qo);
  ASSERT_TRUE(qp.ok());
  const std::size_t connections = w.group().connections();  // the driver's admin + I/O
  {
    RawHost h(w);
    ASSERT_EQ(h.connect_queue(0, 32).type, CmEventType::kConnectResponse);
    sn::SubmissionEntry c = write_cmd(9);
    const auto k = nf::KeyedSglDescriptor::make(h.addr(8192), 4096, h.rkey() ^ 0x5a5a00);
    std::memcpy(&c.dptr.sgl1, &k, sizeof k);
    EXPECT_EQ(h.send(c).status, 0xffff) << "no response: the READ failed, the QP broke";
    for (int i = 0; i < 100000 && w.group().connections() != connections; ++i) w.pump();
    EXPECT_EQ(w.group().connections(), connections);
    EXPECT_GE(w.group().stats().error_completions, 1u);
  }
  // Every data buffer is back (in the pool or the group's cache).
  EXPECT_EQ(w.transport().pool().available_approx() + w.group().cached_buffers(), 64u);
  // The driver's queues were not touched.
  auto mem = w.host_memory(64 * 1024);
  auto* p = static_cast<uint8_t*>(mem->data());
  std::memset(p, 0x3c, 8192);
  struct Done {
    bool done = false;
    uint16_t status = 0;
  } d;
  auto cb = [](void* ctx, const sn::CompletionEntry& e) {
    static_cast<Done*>(ctx)->done = true;
    static_cast<Done*>(ctx)->status = e.status & 0xfffe;
  };
  ASSERT_EQ(qp.value()->write(*w.ctrl().ns(1), p, 0, 16, cb, &d), 0);
  for (int i = 0; i < 100000 && !d.done; ++i) {
    qp.value()->process_completions();
    w.pump();
  }
  ASSERT_TRUE(d.done);
  EXPECT_EQ(d.status, 0);
  EXPECT_TRUE(w.ctrl().healthy());
  ASSERT_EQ(w.ctrl().free_io_qpair(std::move(qp).value()), 0);
}

}  // namespace
}  // namespace pollux::fabric::rdma::testing
