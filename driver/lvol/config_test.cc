// The bdev_lvol_* JSON methods, applied on a step-mode framework thread.
#include "driver/lvol/config.h"

#include <gtest/gtest.h>

#include "driver/blob/test_util.h"
#include "driver/lvol/lvol.h"

namespace pollux::lvol {
namespace {

class LvolConfig : public blob::testing::BlobFixture {
 protected:
  void SetUp() override {
    BlobFixture::SetUp();
    methods = bdev::ConfigMethods::builtin();
    register_lvol_config_methods(methods);
  }
  void TearDown() override {
    for (const char* n : {"lvs0", "lvs1"})
      if (LvolStore* l = LvolStore::find(n)) {
        bool done = false;
        on(t0, [&] { l->unload([](void* d, int) { *static_cast<bool*>(d) = true; }, &done); });
        for (int i = 0; i < 100000 && !done; ++i) s.fw->step();
      }
    BlobFixture::TearDown();
  }
  bdev::Status apply(const std::string& entries) {
    const std::string text = R"({"subsystems":[{"subsystem":"bdev","config":[)" + entries + "]}]}";
    bdev::ConfigContext ctx{*mgr};
    bdev::Status st = bdev::ok_status();
    on(t0, [&] { st = bdev::apply_config_text(text, ctx, methods); });
    return st;
  }
  bdev::ConfigMethods methods;
};

TEST_F(LvolConfig, TheWholeLifecycle) {
  auto st = apply(R"(
    {"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"m0","lvs_name":"lvs0","cluster_sz":65536}},
    {"method":"bdev_lvol_create","params":{"lvol_name":"thick","size_in_mib":2,"lvs_name":"lvs0"}},
    {"method":"bdev_lvol_create","params":{"lvol_name":"thin","size_in_mib":64,"lvs_name":"lvs0","thin_provision":true}},
    {"method":"bdev_lvol_snapshot","params":{"lvol_name":"lvs0/thick","snapshot_name":"snap"}},
    {"method":"bdev_lvol_clone","params":{"snapshot_name":"lvs0/snap","clone_name":"cl"}},
    {"method":"bdev_lvol_inflate","params":{"name":"lvs0/cl"}},
    {"method":"bdev_lvol_decouple_parent","params":{"name":"lvs0/thick"}},
    {"method":"bdev_lvol_delete","params":{"name":"lvs0/snap"}},
    {"method":"bdev_lvol_resize","params":{"name":"lvs0/thick","size_in_mib":4}},
    {"method":"bdev_lvol_rename","params":{"old_name":"lvs0/cl","new_name":"copy"}}
  )");
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(mgr->find("lvs0/thick")->num_blocks(), (4u << 20) / 512);
  EXPECT_EQ(mgr->find("lvs0/thin")->num_blocks(), (64u << 20) / 512);
  EXPECT_NE(mgr->find("lvs0/copy"), nullptr);
  EXPECT_EQ(mgr->find("lvs0/snap"), nullptr);
  EXPECT_EQ(mgr->find("lvs0/cl"), nullptr);
}

TEST_F(LvolConfig, ErrorsNameTheEntryAndField) {
  auto st = apply(R"({"method":"bdev_lvol_create","params":{"lvol_name":"a","size_in_mib":1,"lvs_name":"nope"}})");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("no lvstore 'nope'"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("config[0]"), std::string::npos) << st.error().message;
  st = apply(R"({"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"m0","lvs_name":"lvs0","cluster_sz":1000}})");
  EXPECT_FALSE(st.ok());
  st = apply(R"({"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"m0","lvs_name":"lvs0","bogus":1}})");
  EXPECT_FALSE(st.ok());
  st = apply(R"({"method":"bdev_lvol_snapshot","params":{"lvol_name":"noslash","snapshot_name":"s"}})");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("<lvstore>/<lvol>"), std::string::npos);
  st = apply(R"({"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"missing","lvs_name":"lvs1"}})");
  EXPECT_FALSE(st.ok());
}

TEST_F(LvolConfig, LoadBringsTheLvolsBack) {
  ASSERT_TRUE(apply(R"(
    {"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"m0","lvs_name":"lvs0","cluster_sz":65536}},
    {"method":"bdev_lvol_create","params":{"lvol_name":"v","size_in_mib":1,"lvs_name":"lvs0"}})").ok());
  bool done = false;
  on(t0, [&] { LvolStore::find("lvs0")->unload([](void* d, int rc) { EXPECT_EQ(rc, 0); *static_cast<bool*>(d) = true; }, &done); });
  for (int i = 0; i < 100000 && !done; ++i) s.fw->step();
  ASSERT_TRUE(done);
  EXPECT_EQ(mgr->find("lvs0/v"), nullptr);
  auto st = apply(R"({"method":"bdev_lvol_load_lvstore","params":{"bdev_name":"m0"}})");
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_NE(mgr->find("lvs0/v"), nullptr);
}

}  // namespace
}  // namespace pollux::lvol
