// SPDK-shaped JSON configuration methods for logical volumes (added to a ConfigMethods table;
// pollux-bdevperf registers them):
//
//   bdev_lvol_create_lvstore   bdev_name, lvs_name, [cluster_sz] (bytes, default 4 MiB)
//   bdev_lvol_create           lvol_name, size_in_mib, lvs_name, [thin_provision]
//   bdev_lvol_snapshot         lvol_name ("lvs/lvol"), snapshot_name
//   bdev_lvol_clone            snapshot_name ("lvs/snap"), clone_name
//   bdev_lvol_inflate          name
//   bdev_lvol_decouple_parent  name
//   bdev_lvol_resize           name, size_in_mib
//   bdev_lvol_rename           old_name ("lvs/lvol"), new_name
//   bdev_lvol_delete           name
//   bdev_lvol_load_lvstore     bdev_name   (SPDK examines bases; here a load is explicit)
//
// The blobstore is asynchronous and a configuration step is not: each method waits for its
// operation by polling the calling thread (which must be the framework thread that applies
// the configuration, and becomes the lvstore's metadata thread).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "driver/bdev/config.h"

namespace pollux::lvol {

// The methods as asynchronous operations: each checks its parameters (an error is returned
// at once, and `done` is not called) and starts the operation; `done` gets its outcome on the
// calling thread. For callers that must not block their thread (an RPC server).
using AsyncDone = std::function<void(bdev::Status)>;
using AsyncMethod =
    std::function<bdev::Status(bdev::ConfigContext&, const bdev::ConfigParams&, AsyncDone)>;
std::vector<std::pair<std::string, AsyncMethod>> lvol_async_methods();

// The same as synchronous configuration methods (they poll the calling thread until done).
void register_lvol_config_methods(bdev::ConfigMethods& methods);

}  // namespace pollux::lvol
