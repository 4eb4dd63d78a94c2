// The JSON configuration: a full good config (built in order, virtual bdevs before their
// bases), the registration hook, and bad configs naming entry, method and field.
#include "driver/bdev/config.h"

#include "driver/bdev/modules/config_methods.h"
#include "driver/bdev/modules/nvme.h"
#include "driver/bdev/modules/vbdev_test_util.h"

namespace pollux::bdev {
namespace {

class ConfigTest : public testing::VbdevFixture {
 protected:
  void SetUp() override {
    VbdevFixture::SetUp();
    mods = std::make_unique<StandardModules>(*mgr);
  }
  Status apply(const std::string& text, const ConfigMethods& m = global_config_methods()) {
    Status st = ok_status();
    on(t0, [&] {
      ConfigContext ctx = mods->context();
      st = apply_config_text(text, ctx, m);
    });
    return st;
  }
  // The error message of a config that must fail.
  std::string fails(const std::string& bdev_config) {
    Status st = apply(R"({"subsystems":[{"subsystem":"bdev","config":)" + bdev_config + "}]}");
    EXPECT_FALSE(st.ok()) << bdev_config;
    return st.ok() ? "" : st.error().message;
  }
  std::unique_ptr<StandardModules> mods;
};

TEST_F(ConfigTest, GoodConfigBuildsEverything) {
  const char* text = R"({"subsystems": [
    {"subsystem": "accel", "config": []},
    {"subsystem": "bdev", "config": [
      {"method": "bdev_passthru_create", "params": {"name": "PT0", "base_bdev_name": "Malloc0"}},
      {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 8192, "block_size": 512}},
      {"method": "bdev_malloc_create", "params": {"name": "Malloc1", "num_blocks": 4096, "block_size": 4096}},
      {"method": "bdev_null_create", "params": {"name": "Null0", "num_blocks": 1048576, "block_size": 512}},
      {"method": "bdev_error_create", "params": {"base_name": "Malloc1"}},
      {"method": "bdev_delay_create", "params": {"name": "Delay0", "base_bdev_name": "Null0",
         "avg_read_latency": 100, "p99_read_latency": 400.5, "avg_write_latency": 50, "p99_write_latency": 50}},
      {"method": "bdev_split_create", "params": {"base_bdev": "PT0", "split_count": 4}},
      {"method": "bdev_split_create", "params": {"base_bdev": "Malloc1_err", "split_count": 2, "split_size_mb": 4}},
      {"method": "bdev_set_qos_limit", "params": {"name": "PT0p1", "rw_ios_per_sec": 10000, "rw_mbytes_per_sec": 100}},
      {"method": "bdev_wait_for_examine"}
    ]}]})";
  Status st = apply(text);
  ASSERT_TRUE(st.ok()) << st.error().message;
  for (const char* n : {"Malloc0", "Malloc1", "Null0", "PT0", "Malloc1_err", "Delay0", "PT0p0",
                        "PT0p3", "Malloc1_errp0", "Malloc1_errp1"})
    EXPECT_NE(mgr->find(n), nullptr) << n;
  EXPECT_EQ(mgr->find("PT0p0")->num_blocks(), 2048u);
  EXPECT_EQ(mgr->find("Malloc1_errp1")->num_blocks(), 1024u);  // 4 MiB of 4 KiB blocks
  EXPECT_EQ(mgr->find("Delay0")->module(), "delay");
  EXPECT_TRUE(mods->unbuilt().empty());
  // Works end to end: a write through the split of the error bdev.
  Desc* d = open("Malloc1_errp1");
  auto* ch = channel(d, t0);
  testing::Done w;
  ASSERT_EQ(write(d, ch, 0, 0, 1, &w), 0);
  s.settle();
  EXPECT_EQ(w.ok, 1);
  release_all();
  on(t0, [&] { mgr->set_qos(*mgr->find("PT0p1"), 0, 0); });
}

// Stored until their base appears: what has none is named with it (pollux-bdevperf refuses to
// run then; it said "no bdev to test").
TEST_F(ConfigTest, VirtualBdevsWithoutTheirBaseAreNamed) {
  Status st = apply(R"({"subsystems":[{"subsystem":"bdev","config":[
      {"method": "bdev_passthru_create", "params": {"name": "PT0", "base_bdev_name": "Nope"}},
      {"method": "bdev_split_create", "params": {"base_bdev": "Gone", "split_count": 2}}]}]})");
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(mods->unbuilt(), (std::vector<std::string>{
                                 "passthru PT0: base bdev 'Nope' does not exist",
                                 "split Gone: base bdev 'Gone' does not exist"}));
  ASSERT_TRUE(apply(R"({"subsystems":[{"subsystem":"bdev","config":[{"method": "bdev_null_create",
      "params": {"name": "Nope", "num_blocks": 1024, "block_size": 512}}]}]})")
                  .ok());
  EXPECT_EQ(mods->unbuilt(),
            (std::vector<std::string>{"split Gone: base bdev 'Gone' does not exist"}));
  release_all();
}

TEST_F(ConfigTest, OtherModulesPlugInThroughTheTable) {
  ConfigMethods m = ConfigMethods::builtin();
  std::string seen;
  ASSERT_EQ(m.add("bdev_uring_create",
                  [&](ConfigContext& ctx, const ConfigParams& p) -> Status {
                    auto name = p.string("name");
                    if (!name) return name.error();
                    auto file = p.string("filename");
                    if (!file) return file.error();
                    seen = file.value();
                    auto r = create_null_bdev(ctx.mgr, {name.value(), 1024, 512});
                    if (!r) return r.error();
                    return ok_status();
                  }),
            0);
  EXPECT_EQ(m.add("bdev_malloc_create", nullptr), -EEXIST);
  Status st = apply(R"({"subsystems":[{"subsystem":"bdev","config":[
      {"method":"bdev_uring_create","params":{"name":"U0","filename":"/dev/nvme0n1"}},
      {"method":"bdev_passthru_create","params":{"name":"P","base_bdev_name":"U0"}}]}]})", m);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(seen, "/dev/nvme0n1");
  EXPECT_NE(mgr->find("P"), nullptr);
  Status bad = apply(R"({"subsystems":[{"subsystem":"bdev","config":[
      {"method":"bdev_uring_create","params":{"name":"U1"}}]}]})", m);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "subsystems[0].config[0] (bdev_uring_create): 'filename': missing");
  // The global table does not know it.
  EXPECT_EQ(global_config_methods().find("bdev_uring_create"), nullptr);
}

TEST_F(ConfigTest, BadConfigsNameEntryMethodAndField) {
  EXPECT_EQ(fails(R"([{"method":"bdev_malloc_create","params":{"name":"M","num_blocks":8,"block_size":512}},
                      {"method":"bdev_frobnicate","params":{}}])"),
            "subsystems[0].config[1] (bdev_frobnicate): unknown method");
  EXPECT_EQ(fails(R"([{"method":"bdev_malloc_create","params":{"name":"M2","block_size":512}}])"),
            "subsystems[0].config[0] (bdev_malloc_create): 'num_blocks': missing");
  EXPECT_EQ(fails(R"([{"method":"bdev_null_create","params":{"name":"N","num_blocks":"8","block_size":512}}])"),
            "subsystems[0].config[0] (bdev_null_create): 'num_blocks': expected an unsigned integer, got string");
  EXPECT_EQ(fails(R"([{"method":"bdev_null_create","params":{"name":"N","num_blocks":-8,"block_size":512}}])"),
            "subsystems[0].config[0] (bdev_null_create): 'num_blocks': expected an unsigned integer, got negative integer");
  EXPECT_EQ(fails(R"([{"method":"bdev_null_create","params":{"name":"N","num_blocks":8,"block_size":500}}])"),
            "subsystems[0].config[0] (bdev_null_create): 'block_size': must be a multiple of 512 up to 1 MiB");
  EXPECT_EQ(fails(R"([{"method":"bdev_passthru_create","params":{"name":"P","base_bdev_name":"M","extra":1}}])"),
            "subsystems[0].config[0] (bdev_passthru_create): 'extra': unknown parameter");
  EXPECT_EQ(fails(R"([{"method":"bdev_delay_create","params":{"name":"D","base_bdev_name":"M",
                        "avg_read_latency":"fast","p99_read_latency":1,"avg_write_latency":1,"p99_write_latency":1}}])"),
            "subsystems[0].config[0] (bdev_delay_create): 'avg_read_latency': expected a number, got string");
  EXPECT_EQ(fails(R"([{"method":"bdev_split_create","params":{"base_bdev":"M","split_count":0}}])"),
            "subsystems[0].config[0] (bdev_split_create): 'split_count': must be 1..1024");
  EXPECT_EQ(fails(R"([{"method":"bdev_set_qos_limit","params":{"name":"nope","rw_ios_per_sec":1}}])"),
            "subsystems[0].config[0] (bdev_set_qos_limit): 'name': no bdev named 'nope'");
  EXPECT_EQ(fails(R"([{"params":{}}])"),
            "subsystems[0].config[0]: expected an object with a string 'method'");
  EXPECT_EQ(fails(R"([{"method":"bdev_error_create","params":[1]}])"),
            "subsystems[0].config[0] (bdev_error_create): 'params': must be an object");
  // A module-level failure keeps the entry's location.
  std::string dup = fails(R"([{"method":"bdev_malloc_create","params":{"name":"M","num_blocks":8,"block_size":512}}])");
  EXPECT_EQ(dup.rfind("subsystems[0].config[0] (bdev_malloc_create): ", 0), 0u) << dup;
  EXPECT_NE(dup.find("already taken"), std::string::npos) << dup;
  std::string lat = fails(R"([{"method":"bdev_delay_create","params":{"name":"D","base_bdev_name":"M",
                      "avg_read_latency":100,"p99_read_latency":10,"avg_write_latency":1,"p99_write_latency":1}}])");
  EXPECT_NE(lat.find("read latency"), std::string::npos) << lat;

  // Shape errors.
  EXPECT_FALSE(apply("[]").ok());
  EXPECT_FALSE(apply(R"({"subsystems":{}})").ok());
  Status parse = apply(R"({"subsystems":[)");
  ASSERT_FALSE(parse.ok());
  EXPECT_NE(parse.error().message.find("parse error"), std::string::npos);
  Status file = [&] {
    ConfigContext ctx = mods->context();
    return apply_config_file("/nonexistent/pollux.json", ctx);
  }();
  EXPECT_FALSE(file.ok());
}

TEST_F(ConfigTest, MissingModuleIsReported) {
  ConfigContext ctx{*mgr};
  Status st = ok_status();
  on(t0, [&] {
    st = apply_config_text(R"({"subsystems":[{"subsystem":"bdev","config":[
        {"method":"bdev_split_create","params":{"base_bdev":"M","split_count":2}}]}]})", ctx);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "subsystems[0].config[0] (bdev_split_create): the split module is not loaded");
}

TEST_F(ConfigTest, HotplugSlotsAreCheckedBeforeAnythingStarts) {
  ConfigMethods m = global_config_methods();
  register_nvme_config_methods(m);
  auto bad = [&](const std::string& params) {
    Status st = apply(R"({"subsystems":[{"subsystem":"bdev","config":[
        {"method":"bdev_nvme_set_hotplug","params":)" + params + "}]}]}", m);
    EXPECT_FALSE(st.ok()) << params;
    return st.ok() ? "" : st.error().message;
  };
  EXPECT_NE(bad(R"({"slots": []})").find("a non-empty array"), std::string::npos);
  EXPECT_NE(bad(R"({"period_us": 0, "slots": [{"name": "N", "trtype": "pcie", "traddr": "0000:01:00.0"}]})")
                .find("period_us"), std::string::npos);
  EXPECT_NE(bad(R"({"slots": [{"name": "N", "trtype": "pcie", "traddr": "zz"}]})")
                .find("slots[0]"), std::string::npos);
  EXPECT_NE(bad(R"({"slots": [{"name": "N", "trtype": "tcp", "traddr": "10.0.0.1"}]})")
                .find("pcie or vfio-user"), std::string::npos);
  EXPECT_NE(bad(R"({"slots": [{"name": "N", "trtype": "pcie"}]})").find("traddr"), std::string::npos);
  EXPECT_EQ(nvme_hotplug_stats(*mgr).polls, 0u) << "nothing started";
}

}  // namespace
}  // namespace pollux::bdev
