// The "nvmf" section of an SPDK-shaped JSON configuration, and the same methods for the JSON-RPC
// server: registered into a bdev::ConfigMethods table (driver/bdev's parser, applied with
// subsystem "nvmf"), so driver/ knows nothing of fabric/.
//
//   nvmf_create_transport          trtype ("TCP"), and TcpTargetOptions' fields by SPDK's names
//   nvmf_create_subsystem          nqn, [serial_number], [model_number], [allow_any_host],
//                                  [max_namespaces], [min_cntlid], [max_cntlid]
//   nvmf_delete_subsystem          nqn
//   nvmf_subsystem_add_ns          nqn, namespace: {bdev_name, [nsid], [uuid], [nguid], [eui64]}
//   nvmf_subsystem_remove_ns       nqn, nsid
//   nvmf_subsystem_add_listener    nqn, listen_address: {trtype, adrfam, traddr, trsvcid}
//   nvmf_subsystem_remove_listener nqn, listen_address
//   nvmf_subsystem_add_host        nqn, host, [dhchap_key], [dhchap_ctrlr_key] (a keyring key's
//                                  name, as SPDK takes them, or the secret "DHHC-1:..." itself)
//   nvmf_subsystem_remove_host     nqn, host
//   nvmf_subsystem_allow_any_host  nqn, allow_any_host
//   nvmf_set_config                [dhchap_digests] (sha256, sha384, sha512), [dhchap_dhgroups]
//                                  (null, ffdhe2048 ... ffdhe8192): what controllers negotiate
//
// Unknown parameters are refused (SPDK's strict decoders do the same); SPDK options that have
// no meaning here are accepted only at their neutral value (dif_insert_or_strip false, ...).
// The handlers run on the target thread; their effects reach the poll groups asynchronously
// (Target::when_settled).
#pragma once

#include <nlohmann/json.hpp>

#include "driver/bdev/config.h"
#include "fabric/net/socket.h"
#include "fabric/target/target.h"

namespace pollux::fabric::tgt {

// What a method returns to an RPC caller besides success (nvmf_subsystem_add_ns: the NSID).
struct NvmfResult {
  nlohmann::json value = true;
};

// tcp_network: where TCP transports listen (nullptr: the kernel's TCP; tests and fuzzing pass
// one of their own).
void register_nvmf_config_methods(bdev::ConfigMethods& methods, target::Target& tgt,
                                  NvmfResult* result = nullptr,
                                  net::Network* tcp_network = nullptr);

// A whole configuration as pollux-tgt reads it (--json): {"subsystems": [...]}; its "keyring"
// section applied with keyring_methods, its "bdev" section with bdev_methods (every virtual bdev
// must then be built), then its "nvmf" section with nvmf_methods. Sections of other layers are
// named on stderr and skipped. The first error stops it (-EINVAL, with where it is).
bdev::Status apply_target_config(const nlohmann::json& config, bdev::StandardModules& modules,
                                 const bdev::ConfigMethods& keyring_methods,
                                 const bdev::ConfigMethods& bdev_methods,
                                 const bdev::ConfigMethods& nvmf_methods);

// The "config" array of the "nvmf" section that creates this target's state again.
nlohmann::json nvmf_config_json(const target::Target& tgt);

// nvmf_get_subsystems' answer.
nlohmann::json nvmf_subsystems_json(const target::Target& tgt);

}  // namespace pollux::fabric::tgt
