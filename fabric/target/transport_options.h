// nvmf_create_transport's options every transport shares, with SPDK's names and defaults;
// each transport's own options extend them (TcpTargetOptions, RdmaTargetOptions).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace pollux::fabric::target {

struct CommonTransportOptions {
  uint32_t max_queue_depth = 128;
  uint32_t max_io_qpairs_per_ctrlr = 127;
  uint32_t in_capsule_data_size = 4096;
  uint32_t max_io_size = 131072;
  uint32_t io_unit_size = 131072;  // one data buffer per command: at least max_io_size
  uint32_t max_aq_depth = 128;
  uint32_t num_shared_buffers = 511;
  uint32_t buf_cache_size = 32;
};

// "" or what is wrong. max_io_size must be a power of two from 4096 up to max_io_size_limit
// (the largest this transport's data descriptors can carry); `limit_why` says why in the error.
std::string validate_common(const CommonTransportOptions& o, uint32_t max_io_size_limit,
                            const std::string& limit_why);

// {"trtype": trtype, and the common options by SPDK's names} (save_config, nvmf_get_transports).
nlohmann::json common_options_json(const CommonTransportOptions& o, const char* trtype);

}  // namespace pollux::fabric::target
