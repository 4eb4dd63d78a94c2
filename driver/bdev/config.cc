#include "driver/bdev/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "driver/bdev/modules/malloc.h"
#include "driver/bdev/modules/null.h"

namespace pollux::bdev {

namespace {

const char* type_name(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return "unsigned integer";
  if (v.is_number_integer()) return "negative integer";
  return v.type_name();
}

}  // namespace

// ------------------------------------------------------------------- ConfigParams ----

Error ConfigParams::error(const std::string& field, const std::string& what) const {
  return make_error(EINVAL, where_ + ": '" + field + "': " + what);
}
Error ConfigParams::error(const std::string& what) const {
  return make_error(EINVAL, where_ + ": " + what);
}

Result<std::string> ConfigParams::string(const char* field) const {
  if (!j_.contains(field)) return error(field, "missing");
  const auto& v = j_.at(field);
  if (!v.is_string()) return error(field, std::string("expected a string, got ") + type_name(v));
  if (v.get<std::string>().empty()) return error(field, "must not be empty");
  return v.get<std::string>();
}

Result<std::string> ConfigParams::string_or(const char* field, std::string dflt) const {
  if (!j_.contains(field)) return dflt;
  return string(field);
}

Result<bool> ConfigParams::bool_or(const char* field, bool dflt) const {
  if (!j_.contains(field)) return dflt;
  const auto& v = j_.at(field);
  if (!v.is_boolean()) return error(field, std::string("expected true or false, got ") + type_name(v));
  return v.get<bool>();
}

Result<uint64_t> ConfigParams::u64(const char* field) const {
  if (!j_.contains(field)) return error(field, "missing");
  const auto& v = j_.at(field);
  if (!v.is_number_unsigned())
    return error(field, std::string("expected an unsigned integer, got ") + type_name(v));
  return v.get<uint64_t>();
}

Result<uint64_t> ConfigParams::u64_or(const char* field, uint64_t dflt) const {
  if (!j_.contains(field)) return dflt;
  return u64(field);
}

Result<double> ConfigParams::number(const char* field) const {
  if (!j_.contains(field)) return error(field, "missing");
  const auto& v = j_.at(field);
  if (!v.is_number()) return error(field, std::string("expected a number, got ") + type_name(v));
  const double d = v.get<double>();
  if (d < 0) return error(field, "must be >= 0");
  return d;
}

Status ConfigParams::allow_only(std::initializer_list<const char*> fields) const {
  for (const auto& item : j_.items()) {
    // Not a structured binding: clang before 16 (the fuzz toolchain) cannot capture one.
    const std::string& key = item.key();
    if (std::none_of(fields.begin(), fields.end(), [&](const char* f) { return key == f; }))
      return error(key, "unknown parameter");
  }
  return ok_status();
}

// ---------------------------------------------------------------- built-in methods ----

namespace {

#define TRY(var, expr)                \
  auto var = (expr);                  \
  if (!var) return var.error()

Status wrap(const ConfigParams& p, const Error& e) { return p.error(e.message); }

template <typename M>
Result<M*> need(M* m, const ConfigParams& p, const char* what) {
  if (m == nullptr) return p.error(std::string("the ") + what + " module is not loaded");
  return m;
}

Status malloc_or_null(ConfigContext& ctx, const ConfigParams& p, bool is_malloc) {
  TRY(ok, p.allow_only({"name", "num_blocks", "block_size"}));
  TRY(name, p.string("name"));
  TRY(blocks, p.u64("num_blocks"));
  TRY(bs, p.u64("block_size"));
  if (blocks.value() == 0) return p.error("num_blocks", "must be > 0");
  if (bs.value() == 0 || bs.value() % 512 != 0 || bs.value() > (1u << 20))
    return p.error("block_size", "must be a multiple of 512 up to 1 MiB");
  const auto b32 = static_cast<uint32_t>(bs.value());
  Result<Bdev*> r = is_malloc
                        ? create_malloc_bdev(ctx.mgr, {name.value(), blocks.value(), b32, nullptr, nullptr})
                        : create_null_bdev(ctx.mgr, {name.value(), blocks.value(), b32});
  if (!r) return wrap(p, r.error());
  return ok_status();
}

Status error_create(ConfigContext& ctx, const ConfigParams& p) {
  TRY(m, need(ctx.error, p, "error"));
  TRY(ok, p.allow_only({"base_name", "name"}));
  TRY(base, p.string("base_name"));
  TRY(name, p.string_or("name", ""));
  auto r = m.value()->create({base.value(), name.value()});
  if (!r) return wrap(p, r.error());
  return ok_status();
}

Status delay_create(ConfigContext& ctx, const ConfigParams& p) {
  TRY(m, need(ctx.delay, p, "delay"));
  TRY(ok, p.allow_only({"name", "base_bdev_name", "avg_read_latency", "p99_read_latency",
                        "avg_write_latency", "p99_write_latency", "seed"}));
  DelayOptions o;
  TRY(name, p.string("name"));
  TRY(base, p.string("base_bdev_name"));
  TRY(ar, p.number("avg_read_latency"));
  TRY(pr, p.number("p99_read_latency"));
  TRY(aw, p.number("avg_write_latency"));
  TRY(pw, p.number("p99_write_latency"));
  TRY(seed, p.u64_or("seed", 1));
  o.name = name.value();
  o.base_name = base.value();
  o.avg_read_us = ar.value();
  o.p99_read_us = pr.value();
  o.avg_write_us = aw.value();
  o.p99_write_us = pw.value();
  o.seed = seed.value();
  auto r = m.value()->create(o);
  if (!r) return wrap(p, r.error());
  return ok_status();
}

Status passthru_create(ConfigContext& ctx, const ConfigParams& p) {
  TRY(m, need(ctx.passthru, p, "passthru"));
  TRY(ok, p.allow_only({"name", "base_bdev_name"}));
  TRY(name, p.string("name"));
  TRY(base, p.string("base_bdev_name"));
  auto r = m.value()->create({name.value(), base.value()});
  if (!r) return wrap(p, r.error());
  return ok_status();
}

Status split_create(ConfigContext& ctx, const ConfigParams& p) {
  TRY(m, need(ctx.split, p, "split"));
  TRY(ok, p.allow_only({"base_bdev", "split_count", "split_size_mb"}));
  TRY(base, p.string("base_bdev"));
  TRY(count, p.u64("split_count"));
  TRY(mb, p.u64_or("split_size_mb", 0));
  if (count.value() == 0 || count.value() > 1024) return p.error("split_count", "must be 1..1024");
  if (mb.value() > (uint64_t{1} << 40)) return p.error("split_size_mb", "too large");
  SplitOptions o;
  o.base_name = base.value();
  o.split_count = static_cast<uint32_t>(count.value());
  o.split_size_mb = mb.value();
  auto r = m.value()->create(o);
  if (!r) return wrap(p, r.error());
  return ok_status();
}

Status set_qos_limit(ConfigContext& ctx, const ConfigParams& p) {
  TRY(ok, p.allow_only({"name", "rw_ios_per_sec", "rw_mbytes_per_sec", "r_mbytes_per_sec",
                         "w_mbytes_per_sec"}));
  TRY(name, p.string("name"));
  TRY(iops, p.u64_or("rw_ios_per_sec", 0));
  TRY(mbps, p.u64_or("rw_mbytes_per_sec", 0));
  TRY(rmbps, p.u64_or("r_mbytes_per_sec", 0));
  TRY(wmbps, p.u64_or("w_mbytes_per_sec", 0));
  for (auto [field, v] : {std::pair{"rw_mbytes_per_sec", mbps.value()},
                          std::pair{"r_mbytes_per_sec", rmbps.value()},
                          std::pair{"w_mbytes_per_sec", wmbps.value()}})
    if (v > (uint64_t{1} << 40)) return p.error(field, "too large");
  Bdev* b = ctx.mgr.find(name.value());
  if (b == nullptr) return p.error("name", "no bdev named '" + name.value() + "'");
  const QosLimits limits{iops.value(), mbps.value() << 20, rmbps.value() << 20,
                         wmbps.value() << 20};
  if (int rc = ctx.mgr.set_qos(*b, limits); rc != 0)
    return p.error("set_qos failed (" + std::to_string(rc) + "): apply on a framework thread");
  return ok_status();
}

#undef TRY

}  // namespace

// ---------------------------------------------------------------- ConfigMethods ----

ConfigMethods ConfigMethods::builtin() {
  ConfigMethods m;
  m.add("bdev_malloc_create",
        [](ConfigContext& c, const ConfigParams& p) { return malloc_or_null(c, p, true); });
  m.add("bdev_null_create",
        [](ConfigContext& c, const ConfigParams& p) { return malloc_or_null(c, p, false); });
  m.add("bdev_error_create", error_create);
  m.add("bdev_delay_create", delay_create);
  m.add("bdev_passthru_create", passthru_create);
  m.add("bdev_split_create", split_create);
  m.add("bdev_set_qos_limit", set_qos_limit);
  m.add("bdev_wait_for_examine", [](ConfigContext&, const ConfigParams& p) -> Status {
    if (auto ok = p.allow_only({}); !ok) return ok.error();
    return ok_status();
  });
  return m;
}

int ConfigMethods::add(const std::string& method, ConfigHandler handler) {
  if (handlers_.count(method)) return -EEXIST;
  handlers_[method] = std::move(handler);
  return 0;
}

void ConfigMethods::replace(const std::string& method, ConfigHandler handler) {
  handlers_[method] = std::move(handler);
}

const ConfigHandler* ConfigMethods::find(const std::string& method) const {
  auto it = handlers_.find(method);
  return it == handlers_.end() ? nullptr : &it->second;
}

std::vector<std::string> ConfigMethods::methods() const {
  std::vector<std::string> out;
  for (const auto& [name, h] : handlers_) out.push_back(name);
  return out;
}

ConfigMethods& global_config_methods() {
  static ConfigMethods m = ConfigMethods::builtin();
  return m;
}

// ------------------------------------------------------------------------ apply ----

Status apply_config(const nlohmann::json& config, ConfigContext& ctx,
                    const ConfigMethods& methods, const std::string& subsystem) {
  if (!config.is_object()) return make_error(EINVAL, "config: expected a JSON object");
  if (!config.contains("subsystems") || !config.at("subsystems").is_array())
    return make_error(EINVAL, "config: 'subsystems' must be an array");
  const auto& subs = config.at("subsystems");
  for (std::size_t s = 0; s < subs.size(); ++s) {
    const std::string sw = "subsystems[" + std::to_string(s) + "]";
    const auto& sub = subs[s];
    if (!sub.is_object() || !sub.contains("subsystem") || !sub.at("subsystem").is_string())
      return make_error(EINVAL, sw + ": expected an object with a string 'subsystem'");
    if (sub.at("subsystem").get<std::string>() != subsystem) continue;
    if (!sub.contains("config") || sub.at("config").is_null()) continue;
    if (!sub.at("config").is_array()) return make_error(EINVAL, sw + ": 'config' must be an array");
    const auto& entries = sub.at("config");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      std::string where = sw + ".config[" + std::to_string(i) + "]";
      const auto& e = entries[i];
      if (!e.is_object() || !e.contains("method") || !e.at("method").is_string())
        return make_error(EINVAL, where + ": expected an object with a string 'method'");
      const std::string method = e.at("method").get<std::string>();
      where += " (" + method + ")";
      static const nlohmann::json kEmpty = nlohmann::json::object();
      const nlohmann::json* params = &kEmpty;
      if (e.contains("params") && !e.at("params").is_null()) {
        if (!e.at("params").is_object()) return make_error(EINVAL, where + ": 'params': must be an object");
        params = &e.at("params");
      }
      const ConfigHandler* h = methods.find(method);
      if (h == nullptr) return make_error(EINVAL, where + ": unknown method");
      Status st = (*h)(ctx, ConfigParams(*params, where));
      if (!st) return st;
    }
  }
  return ok_status();
}

namespace {
Result<nlohmann::json> parse_config(const std::string& text) {
  try {  // set-up path: nlohmann reports the position only through its exception
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(EINVAL, std::string("config: JSON parse error: ") + e.what());
  }
}
}  // namespace

Status apply_config_text(const std::string& text, ConfigContext& ctx,
                         const ConfigMethods& methods, const std::string& subsystem) {
  auto j = parse_config(text);
  if (!j) return j.error();
  return apply_config(*j, ctx, methods, subsystem);
}

Result<nlohmann::json> read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ENOENT, "config: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str());
}

Status apply_config_file(const std::string& path, ConfigContext& ctx,
                         const ConfigMethods& methods, const std::string& subsystem) {
  auto j = read_config_file(path);
  if (!j) return j.error();
  return apply_config(*j, ctx, methods, subsystem);
}

std::vector<std::string> StandardModules::unbuilt() {
  std::vector<std::string> out;
  for (VbdevModule* m : std::initializer_list<VbdevModule*>{&passthru, &error, &delay, &split}) {
    for (const auto& [id, base] : m->unbuilt()) {
      out.push_back(std::string(m->name()) + " " + id + ": base bdev '" + base + "' " +
                    (mgr.find(base) ? "could not take it" : "does not exist"));
    }
  }
  return out;
}

}  // namespace pollux::bdev
