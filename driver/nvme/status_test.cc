#include "driver/nvme/status.h"

#include <gtest/gtest.h>

#include "driver/nvme/transport_id.h"

namespace pollux::nvme {
namespace {
namespace sn = spec::nvme;

TEST(Status, DecodesAndNamesStatusFields) {
  const uint16_t field = sn::status::make(sn::sct::kMediaError,
                                          sn::sc_media::kUnrecoveredReadError, true) | 1;
  const Status s = Status::from_cqe(field);
  EXPECT_EQ(s.sct, 2);
  EXPECT_EQ(s.sc, 0x81);
  EXPECT_TRUE(s.dnr);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.retriable());
  EXPECT_EQ(describe(s), "MEDIA/UNRECOVERED READ ERROR (02/81) DNR");
  EXPECT_EQ(describe(Status::from_cqe(sn::status::make(1, sn::sc_cmd::kInvalidQueueSize))),
            "COMMAND SPECIFIC/INVALID QUEUE SIZE (01/02)");
  EXPECT_EQ(describe(Status::from_cqe(sn::status::make(7, 0x12))), "VENDOR/0x12 (07/12)");
  EXPECT_TRUE(Status::from_cqe(sn::status::make(0, sn::sc::kNamespaceNotReady)).retriable());
  EXPECT_TRUE(Status::from_cqe(1).ok());  // phase bit alone is success
}

TEST(TransportId, ParsesSpdkNotation) {
  auto a = parse_transport_id("trtype:vfio-user traddr:/tmp/emu.sock");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->trtype, TransportType::kVfioUser);
  EXPECT_EQ(a->traddr, "/tmp/emu.sock");
  auto b = parse_transport_id("TRTYPE:PCIe traddr:0000:01:00.0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->trtype, TransportType::kPcie);
  EXPECT_EQ(b->traddr, "0000:01:00.0");  // colons inside the value survive
  EXPECT_EQ(b->to_string(), "trtype:pcie traddr:0000:01:00.0");
  for (const char* bad : {"", "traddr:/x", "trtype:vfio-user", "trtype:foo traddr:x",
                          "trtype:pcie traddr:", "bogus"})
    EXPECT_FALSE(parse_transport_id(bad).ok()) << bad;
}

TEST(TransportId, RefusesAKeyGivenTwice) {
  // The last value silently won: "traddr:/a traddr:/b" attached /b.
  for (const char* twice : {"trtype:vfio-user traddr:/a traddr:/b",
                            "trtype:pcie trtype:vfio-user traddr:/a",
                            "trtype:tcp traddr:x TRSVCID:1 trsvcid:2"}) {
    auto r = parse_transport_id(twice);
    ASSERT_FALSE(r.ok()) << twice;
    EXPECT_NE(r.error().message.find("given twice"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace pollux::nvme
