#include "driver/bdev/modules/config_methods.h"

#include "driver/bdev/modules/nvme.h"
#include "driver/bdev/modules/uring.h"

namespace pollux::bdev {

void register_nvme_config_methods(ConfigMethods& methods) {
  methods.replace("bdev_nvme_attach_controller",
                  [](ConfigContext& ctx, const ConfigParams& p) -> Status {
                    if (auto st = p.allow_only({"name", "trtype", "traddr", "adrfam",
                                                "trsvcid", "subnqn"});
                        !st)
                      return st.error();
                    auto name = p.string("name");
                    if (!name) return name.error();
                    auto trtype = p.string("trtype");
                    if (!trtype) return trtype.error();
                    auto traddr = p.string("traddr");
                    if (!traddr) return traddr.error();
                    auto r = nvme_attach_controller_by_address(ctx.mgr, *name, *trtype, *traddr);
                    if (!r) return p.error("attach " + *name + ": " + r.error().message);
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

}  // namespace pollux::bdev
