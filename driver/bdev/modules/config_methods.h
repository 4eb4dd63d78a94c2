// JSON configuration methods of the modules that reach outside the process (nvme, uring):
// kept apart from config.h so the core config has no dependency on the NVMe driver.
//   bdev_nvme_attach_controller {name, trtype, traddr, ..., hostnqn?, dhchap_key?,
//                                dhchap_ctrlr_key?}
//   bdev_uring_create {name, filename, block_size?, num_blocks?, queue_depth?}
#pragma once

#include "driver/bdev/config.h"

namespace pollux::bdev {

void register_nvme_config_methods(ConfigMethods& methods);
void register_uring_config_methods(ConfigMethods& methods);
// The "keyring" subsystem (SPDK's): keyring_file_add_key {name, path} and
// keyring_file_remove_key {name} (driver/nvme/keyring.h). Applied before "bdev" and "nvmf",
// whose dhchap_key parameters may name its keys.
void register_keyring_config_methods(ConfigMethods& methods);

}  // namespace pollux::bdev
