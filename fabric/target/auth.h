// NVMe in-band authentication on the target (DH-HMAC-CHAP, NVMe Base 2.0 8.13; the messages are
// spec/nvme_auth.h, the cryptography driver/nvme/dhchap.h): what a subsystem knows of a host's
// keys, the target-wide choices (which hash functions and DH groups a controller may pick), and
// what one queue authenticates with.
//
// A host with a key on a subsystem (nvmf_subsystem_add_host's dhchap_key) gets AUTHREQ.ATR in
// its Connect response on every queue; until the queue has authenticated, only Authentication
// Send/Receive are taken there (anything else: Authentication Required). A failure is answered
// with AUTH_Failure1 and ends the association, as Linux's nvmet does; a failure is logged with
// the host, subsystem, queue and reason, never a key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driver/nvme/dhchap.h"

namespace pollux::fabric::target {

namespace dhchap = nvme::dhchap;

// A host's keys on a subsystem. key: the host proves itself with it; ctrlr_key: the controller
// proves itself with it when the host asks (bidirectional). *_name: the keyring name it was
// given by (keyring_file_add_key), "" when given as the secret itself.
struct HostKeys {
  std::optional<dhchap::Key> key;
  std::optional<dhchap::Key> ctrlr_key;
  std::string key_name;
  std::string ctrlr_key_name;
};

// Target-wide (SPDK's nvmf_set_config dhchap_digests / dhchap_dhgroups): what a controller may
// choose from, the strongest the host offers first.
struct AuthOptions {
  std::vector<uint8_t> digests = dhchap::all_hashes();
  std::vector<uint8_t> dhgroups = dhchap::all_dhgroups();
  // A queue that has not finished authenticating this long after its Connect (or after a
  // re-authentication's AUTH_Negotiate) ends its association.
  uint32_t timeout_ms = 30'000;
};

// What one Connect hands its queue: the host's keys and the options, as of the Connect.
struct AuthConfig {
  dhchap::Key host_key;
  std::optional<dhchap::Key> ctrlr_key;
  AuthOptions options;
  std::string hostnqn;
  std::string subnqn;
};

}  // namespace pollux::fabric::target
