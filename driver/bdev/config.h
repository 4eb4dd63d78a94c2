// JSON configuration of the bdev layer, in SPDK's shape:
//
//   {"subsystems": [{"subsystem": "bdev", "config": [
//       {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 262144,
//                                                   "block_size": 512}}, ...]}]}
//
// Entries run in order; the first failure stops and is reported with where it is, e.g.
// "subsystems[0].config[2] (bdev_delay_create): 'avg_read_latency': missing". Only the
// subsystem asked for ("bdev" by default) is applied; the others belong to other layers, which
// apply their own section with their own method table through the same parser (the NVMe-oF
// target: subsystem "nvmf", fabric/tgt/nvmf_config.h — driver/ never includes fabric/).
//
// Methods are looked up in a ConfigMethods table: the built-in ones below, plus whatever
// other modules add (bdev_nvme_attach_controller, bdev_uring_create, ...) without touching
// this parser:
//
//   bdev_malloc_create    name, num_blocks, block_size
//   bdev_null_create      name, num_blocks, block_size
//   bdev_error_create     base_name, [name]                       ("<base>_err" by default)
//   bdev_delay_create     name, base_bdev_name, avg_read_latency, p99_read_latency,
//                         avg_write_latency, p99_write_latency (µs, numbers), [seed]
//   bdev_passthru_create  name, base_bdev_name
//   bdev_split_create     base_bdev, split_count, [split_size_mb]
//   bdev_set_qos_limit    name, [rw_ios_per_sec], [rw_mbytes_per_sec]  (0: unlimited)
//   bdev_wait_for_examine (no parameters; examine is synchronous here, so a no-op)
//
// Unknown parameters are refused, as SPDK's strict decoders do. Virtual bdevs on a base that
// does not exist yet are stored and built when it appears. Apply on a framework thread (QoS
// pollers run on the calling thread).
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/delay.h"
#include "driver/bdev/modules/error.h"
#include "driver/bdev/modules/passthru.h"
#include "driver/bdev/modules/split.h"

namespace pollux::bdev {

using Status = Result<std::monostate>;
inline Status ok_status() { return std::monostate{}; }

// The parameters of one entry, with typed accessors whose errors name the entry and field.
class ConfigParams {
 public:
  ConfigParams(const nlohmann::json& params, std::string where)
      : j_(params), where_(std::move(where)) {}
  const nlohmann::json& json() const { return j_; }
  const std::string& where() const { return where_; }  // "subsystems[0].config[3] (method)"
  bool has(const char* field) const { return j_.contains(field); }

  Result<std::string> string(const char* field) const;  // required, non-empty
  Result<std::string> string_or(const char* field, std::string dflt) const;
  Result<uint64_t> u64(const char* field) const;  // required unsigned integer
  Result<uint64_t> u64_or(const char* field, uint64_t dflt) const;
  Result<bool> bool_or(const char* field, bool dflt) const;  // true or false
  Result<double> number(const char* field) const;  // required, integer or real, >= 0
  // Refuses any parameter not listed.
  Status allow_only(std::initializer_list<const char*> fields) const;

  Error error(const std::string& field, const std::string& what) const;  // -EINVAL
  Error error(const std::string& what) const;

 private:
  const nlohmann::json& j_;
  std::string where_;
};

// What handlers act on. A null module makes its methods fail ("module not loaded").
struct ConfigContext {
  Manager& mgr;
  PassthruModule* passthru = nullptr;
  ErrorModule* error = nullptr;
  DelayModule* delay = nullptr;
  SplitModule* split = nullptr;
};

using ConfigHandler = std::function<Status(ConfigContext& ctx, const ConfigParams& params)>;

class ConfigMethods {
 public:
  static ConfigMethods builtin();  // the methods listed above
  // -EEXIST if taken (replace() overrides).
  int add(const std::string& method, ConfigHandler handler);
  void replace(const std::string& method, ConfigHandler handler);
  const ConfigHandler* find(const std::string& method) const;
  std::vector<std::string> methods() const;

 private:
  std::map<std::string, ConfigHandler> handlers_;
};

// The process-wide table: built-in methods, plus what other modules add at start-up (e.g.
// register_nvme_config_methods(global_config_methods())). Not locked: add before applying.
ConfigMethods& global_config_methods();

Status apply_config(const nlohmann::json& config, ConfigContext& ctx,
                    const ConfigMethods& methods = global_config_methods(),
                    const std::string& subsystem = "bdev");
// Parse errors name the byte position.
Status apply_config_text(const std::string& text, ConfigContext& ctx,
                         const ConfigMethods& methods = global_config_methods(),
                         const std::string& subsystem = "bdev");
Status apply_config_file(const std::string& path, ConfigContext& ctx,
                         const ConfigMethods& methods = global_config_methods(),
                         const std::string& subsystem = "bdev");
// The file's JSON (a parse error names the byte position), for callers that apply several
// subsystems' sections of one file.
Result<nlohmann::json> read_config_file(const std::string& path);

// The four virtual modules, registered with one manager; context() for apply_config.
// Destroy after the bdevs they built are gone, or after the manager.
struct StandardModules {
  explicit StandardModules(Manager& m) : mgr(m), passthru(m), error(m), delay(m), split(m) {}
  ConfigContext context() { return {mgr, &passthru, &error, &delay, &split}; }
  // One line per configured virtual bdev that is not built, naming its base and why:
  // "passthru PT0: base bdev 'Nope' does not exist".
  std::vector<std::string> unbuilt();
  Manager& mgr;
  PassthruModule passthru;
  ErrorModule error;
  DelayModule delay;
  SplitModule split;
};

}  // namespace pollux::bdev
