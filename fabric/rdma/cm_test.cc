// The RDMA CM exchange over a SimNetwork in virtual time: request with private data, accept
// with private data and the QP information both ways, RTU, disconnect seen by the peer;
// reject with private data; an address nobody listens on.
#include "fabric/rdma/cm.h"

#include <gtest/gtest.h>

#include <cstring>

#include "driver/env/clock.h"
#include "fabric/net/sim_network.h"

namespace pollux::fabric::rdma {
namespace {

class Cm : public ::testing::Test {
 protected:
  Cm() : net_(clock_, 42) {
    auto l = CmListener::listen(net_, "ipv4", "10.0.0.1", "4420");
    EXPECT_TRUE(l.ok());
    listener_ = std::move(l).value();
  }
  // Advances virtual time until `done` holds (at most a simulated second).
  template <typename F>
  bool until(F done) {
    for (int i = 0; i < 100000; ++i) {
      if (done()) return true;
      clock_.advance(1000);
    }
    return done();
  }
  // Polls id until it reports an event; `other` (the peer, whose sends may still be pending)
  // is polled too and must have nothing to report meanwhile.
  CmEvent next(CmId& id, CmId* other = nullptr) {
    CmEvent e;
    until([&] {
      if (other != nullptr) {
        EXPECT_EQ(other->poll().type, CmEventType::kNone);
      }
      return (e = id.poll()).type != CmEventType::kNone;
    });
    return e;
  }
  env::VirtualClock clock_;
  net::SimNetwork net_;
  std::unique_ptr<CmListener> listener_;
};

TEST_F(Cm, RequestAcceptEstablishDisconnect) {
  const char req_pd[] = "hello target";
  auto a = CmId::connect(net_, "10.0.0.1", "4420", CmQpInfo{7, 1, 1000}, req_pd, sizeof req_pd);
  ASSERT_TRUE(a.ok());
  CmId& active = *a.value();
  std::unique_ptr<CmId> passive;
  ASSERT_TRUE(until([&] {
    active.poll();
    return (passive = listener_->get_request()) != nullptr;
  }));
  const CmEvent req = next(*passive, &active);
  ASSERT_EQ(req.type, CmEventType::kConnectRequest);
  EXPECT_EQ(req.peer.qp_num, 7u);
  EXPECT_EQ(req.peer.port_address, 1u);
  EXPECT_EQ(req.peer.start_psn, 1000u);
  ASSERT_EQ(req.private_data_len, sizeof req_pd);
  EXPECT_STREQ(reinterpret_cast<const char*>(req.private_data), req_pd);
  EXPECT_EQ(active.poll().type, CmEventType::kNone);  // no answer yet

  const uint16_t rep_pd = 0xbeef;
  ASSERT_EQ(passive->accept(CmQpInfo{9, 2, 2000}, &rep_pd, sizeof rep_pd), 0);
  EXPECT_EQ(passive->accept(CmQpInfo{}, nullptr, 0), -EINVAL);  // only once
  const CmEvent rep = next(active);
  ASSERT_EQ(rep.type, CmEventType::kConnectResponse);
  EXPECT_EQ(rep.peer.qp_num, 9u);
  EXPECT_EQ(rep.peer.port_address, 2u);
  EXPECT_EQ(rep.peer.start_psn, 2000u);
  ASSERT_EQ(rep.private_data_len, 2);
  EXPECT_EQ(rep.private_data[0], 0xef);
  EXPECT_EQ(passive->poll().type, CmEventType::kNone);  // not established before the RTU
  ASSERT_EQ(active.establish(), 0);
  EXPECT_EQ(active.state(), CmId::State::kEstablished);
  EXPECT_EQ(next(*passive).type, CmEventType::kEstablished);

  active.disconnect();
  EXPECT_EQ(active.state(), CmId::State::kClosed);
  EXPECT_EQ(next(*passive, &active).type, CmEventType::kDisconnected);
  EXPECT_EQ(passive->state(), CmId::State::kClosed);
}

TEST_F(Cm, RejectCarriesPrivateData) {
  auto a = CmId::connect(net_, "10.0.0.1", "4420", CmQpInfo{3, 1, 5}, nullptr, 0);
  ASSERT_TRUE(a.ok());
  std::unique_ptr<CmId> passive;
  ASSERT_TRUE(until([&] {
    a.value()->poll();
    return (passive = listener_->get_request()) != nullptr;
  }));
  ASSERT_EQ(next(*passive, a.value().get()).type, CmEventType::kConnectRequest);
  const uint8_t why[4] = {0, 0, 4, 0};
  ASSERT_EQ(passive->reject(why, sizeof why), 0);
  const CmEvent e = next(*a.value());
  ASSERT_EQ(e.type, CmEventType::kRejected);
  ASSERT_EQ(e.private_data_len, 4);
  EXPECT_EQ(std::memcmp(e.private_data, why, 4), 0);
  EXPECT_EQ(a.value()->state(), CmId::State::kClosed);
}

TEST_F(Cm, NobodyListeningIsUnreachable) {
  auto a = CmId::connect(net_, "10.0.0.9", "4420", CmQpInfo{}, nullptr, 0);
  if (!a.ok()) return;  // refused at once is as good
  EXPECT_EQ(next(*a.value()).type, CmEventType::kUnreachable);
}

TEST_F(Cm, TooMuchPrivateDataIsRefused) {
  uint8_t big[kCmPrivateDataMax + 1] = {};
  EXPECT_FALSE(CmId::connect(net_, "10.0.0.1", "4420", CmQpInfo{}, big, sizeof big).ok());
}

}  // namespace
}  // namespace pollux::fabric::rdma
