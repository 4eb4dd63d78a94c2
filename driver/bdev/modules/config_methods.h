// JSON configuration methods of the modules that reach outside the process (nvme, uring):
// kept apart from config.h so the core config has no dependency on the NVMe driver.
//   bdev_nvme_attach_controller {name, trtype, traddr}
//   bdev_uring_create {name, filename, block_size?, num_blocks?, queue_depth?}
#pragma once

#include "driver/bdev/config.h"

namespace pollux::bdev {

void register_nvme_config_methods(ConfigMethods& methods);
void register_uring_config_methods(ConfigMethods& methods);

}  // namespace pollux::bdev
