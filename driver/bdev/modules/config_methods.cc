#include "driver/bdev/modules/config_methods.h"

#include "driver/bdev/modules/nvme.h"
#include "driver/bdev/modules/uring.h"
#include "driver/nvme/keyring.h"

namespace pollux::bdev {

void register_nvme_config_methods(ConfigMethods& methods) {
  methods.replace("bdev_nvme_attach_controller",
                  [](ConfigContext& ctx, const ConfigParams& p) -> Status {
                    if (auto st = p.allow_only({"name", "trtype", "traddr", "adrfam", "trsvcid",
                                                "subnqn", "hdgst", "ddgst",
                                                "ctrlr_loss_timeout_sec", "reconnect_delay_sec",
                                                "fast_io_fail_timeout_sec", "multipath",
                                                "hostnqn", "dhchap_key", "dhchap_ctrlr_key"});
                        !st)
                      return st.error();
                    auto name = p.string("name");
                    if (!name) return name.error();
                    NvmeAddress a;
                    for (auto [key, out] : {std::pair{"trtype", &a.trtype}, {"traddr", &a.traddr}}) {
                      auto v = p.string(key);
                      if (!v) return v.error();
                      *out = *v;
                    }
                    for (auto [key, out] : {std::pair{"trsvcid", &a.trsvcid}, {"subnqn", &a.subnqn},
                                            {"multipath", &a.multipath}, {"hostnqn", &a.hostnqn},
                                            {"dhchap_key", &a.dhchap_key},
                                            {"dhchap_ctrlr_key", &a.dhchap_ctrlr_key}}) {
                      auto v = p.string_or(key, "");
                      if (!v) return v.error();
                      *out = *v;
                    }
                    for (auto [key, out] : {std::pair{"hdgst", &a.hdgst}, {"ddgst", &a.ddgst}}) {
                      auto v = p.bool_or(key, false);
                      if (!v) return v.error();
                      *out = *v;
                    }
                    // SPDK's recovery knobs, in seconds; ctrlr_loss_timeout_sec -1: forever.
                    int64_t loss = 0;
                    if (p.has("ctrlr_loss_timeout_sec")) {
                      const auto& v = p.json().at("ctrlr_loss_timeout_sec");
                      if (!v.is_number_integer() || v.get<int64_t>() < -1)
                        return p.error("ctrlr_loss_timeout_sec", "expected an integer >= -1");
                      loss = v.get<int64_t>();
                    }
                    auto delay = p.u64_or("reconnect_delay_sec", 0);
                    if (!delay) return delay.error();
                    auto fast = p.u64_or("fast_io_fail_timeout_sec", 0);
                    if (!fast) return fast.error();
                    if (loss > 0 && *fast > static_cast<uint64_t>(loss))
                      return p.error("fast_io_fail_timeout_sec",
                                     "must not exceed ctrlr_loss_timeout_sec");
                    if (*delay > 86400 || *fast > 86400 || loss > 86400)
                      return p.error("recovery timeouts are at most a day (86400 s)");
                    auto r = nvme_attach_controller_by_address(
                        ctx.mgr, *name, a, [&](NvmeBdevOptions& o) {
                          o.ctrlr_loss_timeout_us = loss < 0 ? NvmeBdevOptions::kRetryForever
                                                             : static_cast<uint64_t>(loss) * 1'000'000;
                          o.reconnect_delay_us = *delay * 1'000'000;
                          o.fast_io_fail_timeout_us = *fast * 1'000'000;
                        });
                    if (!r) return p.error("attach " + *name + ": " + r.error().message);
                    return ok_status();
                  });
  // {"period_us": 100000, "slots": [{"name", "trtype", "traddr"}, ...]}: the hot-plug poller
  // (on the configuring thread) attaches each slot's controller whenever its device is
  // present and it is not attached (again after a removal), with the default options.
  methods.replace("bdev_nvme_set_hotplug",
                  [](ConfigContext& ctx, const ConfigParams& p) -> Status {
                    if (auto st = p.allow_only({"period_us", "slots"}); !st) return st.error();
                    auto period = p.u64_or("period_us", 100'000);
                    if (!period) return period.error();
                    if (*period == 0) return p.error("period_us", "must be > 0");
                    const auto& list = p.json().value("slots", nlohmann::json::array());
                    if (!list.is_array() || list.empty())
                      return p.error("slots", "a non-empty array of {name, trtype, traddr}");
                    std::vector<NvmeHotplugSlot> slots;
                    for (std::size_t i = 0; i < list.size(); ++i) {
                      const ConfigParams s(list[i], p.where() + ".slots[" + std::to_string(i) + "]");
                      if (!list[i].is_object()) return s.error("expected {name, trtype, traddr}");
                      if (auto st = s.allow_only({"name", "trtype", "traddr"}); !st) return st.error();
                      auto name = s.string("name");
                      if (!name) return name.error();
                      auto trtype = s.string("trtype");
                      if (!trtype) return trtype.error();
                      auto traddr = s.string("traddr");
                      if (!traddr) return traddr.error();
                      auto slot = nvme_hotplug_slot(*name, *trtype, *traddr);
                      if (!slot) return s.error(slot.error().message);
                      slots.push_back(std::move(slot).value());
                    }
                    const int rc = nvme_hotplug_start(ctx.mgr, std::move(slots), *period,
                                                      nvme_default_options(ctx.mgr));
                    if (rc == -EEXIST) return p.error("the hot-plug poller is already running");
                    if (rc != 0) return p.error("cannot start the hot-plug poller");
                    return ok_status();
                  });
}

void register_uring_config_methods(ConfigMethods& methods) {
  methods.replace("bdev_uring_create", [](ConfigContext& ctx, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"name", "filename", "block_size", "num_blocks", "queue_depth"});
        !st)
      return st.error();
    UringOptions o;
    auto name = p.string("name");
    if (!name) return name.error();
    auto file = p.string("filename");
    if (!file) return file.error();
    auto bs = p.u64_or("block_size", 0);
    if (!bs) return bs.error();
    auto blocks = p.u64_or("num_blocks", 0);
    if (!blocks) return blocks.error();
    auto qd = p.u64_or("queue_depth", 128);
    if (!qd) return qd.error();
    o.name = *name;
    o.filename = *file;
    o.block_size = static_cast<uint32_t>(*bs);
    o.num_blocks = *blocks;
    o.queue_depth = static_cast<uint32_t>(*qd);
    auto r = create_uring_bdev(ctx.mgr, o);
    if (!r) return p.error("create " + *name + ": " + r.error().message);
    return ok_status();
  });
}

void register_keyring_config_methods(ConfigMethods& methods) {
  methods.replace("keyring_file_add_key", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"name", "path"}); !st) return st.error();
    auto name = p.string("name");
    if (!name) return name.error();
    auto path = p.string("path");
    if (!path) return path.error();
    if (auto r = nvme::keyring::add_file_key(*name, *path); !r) return p.error(r.error().message);
    return ok_status();
  });
  methods.replace("keyring_file_remove_key", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto st = p.allow_only({"name"}); !st) return st.error();
    auto name = p.string("name");
    if (!name) return name.error();
    if (auto r = nvme::keyring::remove_key(*name); !r) return p.error(r.error().message);
    return ok_status();
  });
}

}  // namespace pollux::bdev
