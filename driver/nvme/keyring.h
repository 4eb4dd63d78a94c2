// Named keys in the manner of SPDK's keyring (keyring_file_add_key): a key is read from a file
// that only its owner may read (mode 0600 or stricter, as SPDK's keyring_file demands), kept
// in memory under its name, and configurations refer to it by that name — SPDK's
// bdev_nvme_attach_controller and nvmf_subsystem_add_host take only names for dhchap_key and
// dhchap_ctrlr_key. Pollux also takes the secret itself there ("DHHC-1:..."): resolve() tells
// the two apart. Process-wide, thread-safe; set-up paths only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "driver/env/result.h"

namespace pollux::nvme::keyring {

// Reads the key at `path` (absolute; a regular file no one but its owner may read or write;
// the text, surrounding white space dropped) under `name`. Errors name the fault, never the
// key.
Result<std::monostate> add_file_key(const std::string& name, const std::string& path);
Result<std::monostate> remove_key(const std::string& name);
// name -> path, sorted by name.
std::vector<std::pair<std::string, std::string>> list();
// A dhchap_key parameter: "DHHC-1:..." is the secret itself; anything else names a keyring key.
// The secret's text, or why not.
Result<std::string> resolve(const std::string& value);
bool is_inline_secret(const std::string& value);

}  // namespace pollux::nvme::keyring
