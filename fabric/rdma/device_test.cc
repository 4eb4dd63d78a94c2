// Device addresses and the connection manager each device gets: a libibverbs device connects
// through rdma_cm, any other (the Pollux RNIC) through the stream CM. The machines that build
// have no RDMA device: an ibverbs address fails here with a message that says why (the guest's
// rxe covers the working path: tests/hil, *rdma*).
#include "fabric/rdma/device.h"

#include <gtest/gtest.h>

#include "driver/env/memory_registry.h"
#include "driver/rdma/ibverbs_provider.h"
#include "fabric/rdma/rdma_cm.h"

namespace pollux::fabric::rdma {
namespace {

// A provider that is not libibverbs (what the Pollux RNIC is to this code).
class OtherContext final : public verbs::Context {
 public:
  const verbs::DeviceAttr& attr() const override { return attr_; }
  Result<std::unique_ptr<verbs::Pd>> alloc_pd() override { return make_error(ENOSYS, "-"); }
  Result<std::unique_ptr<verbs::Mr>> reg_mr(verbs::Pd&, void*, std::size_t, uint32_t) override {
    return make_error(ENOSYS, "-");
  }
  Result<std::unique_ptr<verbs::Cq>> create_cq(uint32_t) override {
    return make_error(ENOSYS, "-");
  }
  Result<std::unique_ptr<verbs::Srq>> create_srq(verbs::Pd&, uint32_t, uint32_t) override {
    return make_error(ENOSYS, "-");
  }
  Result<std::unique_ptr<verbs::Qp>> create_qp(verbs::Pd&, const verbs::QpInitAttr&) override {
    return make_error(ENOSYS, "-");
  }
  bool get_async_event(verbs::AsyncEvent*) override { return false; }
  bool probe_removed() override { return false; }

 private:
  verbs::DeviceAttr attr_;
};

TEST(RdmaDevice, AnUnknownAddressFormNamesTheKnownOnes) {
  env::MemoryRegistry registry;
  auto d = open_rdma_device("rxe0", registry);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, -EINVAL);
  EXPECT_NE(d.error().message.find("vfio-user:"), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find("ibverbs:NAME"), std::string::npos) << d.error().message;
}

TEST(RdmaDevice, AnIbverbsDeviceThatIsNotThereIsAnErrorThatSaysWhich) {
  env::MemoryRegistry registry;
  auto d = open_rdma_device("ibverbs:pollux-no-such-device", registry);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, -ENODEV);
  EXPECT_NE(d.error().message.find("ibverbs:pollux-no-such-device"), std::string::npos)
      << d.error().message;
  auto names = pollux::rdma::open_ibverbs("pollux-no-such-device");
  ASSERT_FALSE(names.ok());
  EXPECT_NE(names.error().message.find("pollux-no-such-device"), std::string::npos);
}

TEST(RdmaDevice, ANonIbverbsDeviceGetsTheStreamCm) {
  OtherContext ctx;
  EXPECT_EQ(pollux::rdma::ibverbs_context(ctx), nullptr);
  auto cm = connection_manager_for(ctx, nullptr, QpTiming{});
  ASSERT_TRUE(cm.ok()) << cm.error().message;
  EXPECT_STREQ(cm.value()->kind(), "stream");
  auto rcm = make_rdma_cm(ctx, QpTiming{});
  ASSERT_FALSE(rcm.ok());
  EXPECT_EQ(rcm.error().code, -EINVAL);
}

}  // namespace
}  // namespace pollux::fabric::rdma
