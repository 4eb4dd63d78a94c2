// libibverbs and librdmacm link and answer. The machines that run CI have no RDMA device (the
// QEMU guest's soft-RoCE covers devices: tests/hil), so this checks the libraries themselves:
// their names for statuses and events, and a clear error where there is no device.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <string>

TEST(Ibverbs, NamesCompletionStatuses) {
  EXPECT_EQ(std::string(ibv_wc_status_str(IBV_WC_SUCCESS)), "success");
  EXPECT_EQ(std::string(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)), "remote access error");
  EXPECT_EQ(std::string(ibv_port_state_str(IBV_PORT_ACTIVE)), "active");
}

TEST(Ibverbs, DeviceListIsEmptyOrNamed) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    // No RDMA subsystem in this kernel (ENOSYS) or none allowed: an error, not a crash.
    EXPECT_NE(errno, 0);
    return;
  }
  ASSERT_GE(n, 0);
  for (int i = 0; i < n; ++i) EXPECT_NE(std::string(ibv_get_device_name(list[i])), "");
  EXPECT_EQ(list[n], nullptr);
  ibv_free_device_list(list);
}

TEST(Rdmacm, NamesEvents) {
  EXPECT_EQ(std::string(rdma_event_str(RDMA_CM_EVENT_CONNECT_REQUEST)),
            "RDMA_CM_EVENT_CONNECT_REQUEST");
  EXPECT_EQ(std::string(rdma_event_str(RDMA_CM_EVENT_DISCONNECTED)), "RDMA_CM_EVENT_DISCONNECTED");
}

TEST(Rdmacm, EventChannelOpensOrSaysWhyNot) {
  errno = 0;
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) {
    EXPECT_NE(errno, 0);  // no /dev/infiniband/rdma_cm (rdma_ucm not loaded): ENODEV
    return;
  }
  EXPECT_GE(ch->fd, 0);
  rdma_destroy_event_channel(ch);
}
