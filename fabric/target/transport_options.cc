#include "fabric/target/transport_options.h"

#include <fmt/format.h>

#include "driver/env/dma_pool.h"

namespace pollux::fabric::target {

std::string validate_common(const CommonTransportOptions& o, uint32_t max_io_size_limit,
                            const std::string& limit_why) {
  if (o.max_queue_depth < 2 || o.max_queue_depth > 4096) return "max_queue_depth: 2 to 4096";
  if (o.max_aq_depth < 2 || o.max_aq_depth > 4096) return "max_aq_depth: 2 to 4096";
  if (o.max_io_qpairs_per_ctrlr < 1 || o.max_io_qpairs_per_ctrlr > 0xffff)
    return "max_io_qpairs_per_ctrlr: 1 to 65535";
  if (o.in_capsule_data_size % 16 != 0 || o.in_capsule_data_size > 128 * 1024)
    return "in_capsule_data_size: a multiple of 16 up to 131072";
  if (o.max_io_size < 4096 || o.max_io_size > max_io_size_limit ||
      (o.max_io_size & (o.max_io_size - 1)))
    return "max_io_size: " + limit_why;
  if (o.io_unit_size < o.max_io_size)
    return "io_unit_size: at least max_io_size (one data buffer per command)";
  if (o.num_shared_buffers < 1) return "num_shared_buffers: at least 1";
  if (o.buf_cache_size > env::DmaBufferCache::kMaxCache)
    return fmt::format("buf_cache_size: at most {}", env::DmaBufferCache::kMaxCache);
  return "";
}

nlohmann::json common_options_json(const CommonTransportOptions& o, const char* trtype) {
  return {{"trtype", trtype},
          {"max_queue_depth", o.max_queue_depth},
          {"max_io_qpairs_per_ctrlr", o.max_io_qpairs_per_ctrlr},
          {"in_capsule_data_size", o.in_capsule_data_size},
          {"max_io_size", o.max_io_size},
          {"io_unit_size", o.io_unit_size},
          {"max_aq_depth", o.max_aq_depth},
          {"num_shared_buffers", o.num_shared_buffers},
          {"buf_cache_size", o.buf_cache_size}};
}

}  // namespace pollux::fabric::target
