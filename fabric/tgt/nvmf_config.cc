#include "fabric/tgt/nvmf_config.h"

#include <fmt/format.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <tuple>

#include "driver/nvme/keyring.h"
#include "fabric/rdma/target_transport.h"
#include "fabric/tcp/target_transport.h"

namespace pollux::fabric::tgt {

namespace {

using bdev::ConfigContext;
using bdev::ConfigParams;
using bdev::Status;

#define TRY(var, expr) \
  auto var = (expr);   \
  if (!var) return var.error()

Status wrap(const ConfigParams& p, const Error& e) {
  return p.error(e.message);
}

template <typename T>
Result<T> bounded(const ConfigParams& p, const char* field, uint64_t dflt, uint64_t lo,
                  uint64_t hi) {
  TRY(v, p.u64_or(field, dflt));
  if (v.value() < lo || v.value() > hi)
    return p.error(field, fmt::format("must be {} to {}", lo, hi));
  return static_cast<T>(v.value());
}

// A nested object parameter ("namespace", "listen_address").
Result<nlohmann::json> object(const ConfigParams& p, const char* field) {
  if (!p.has(field)) return p.error(field, "missing");
  const auto& v = p.json().at(field);
  if (!v.is_object()) return p.error(field, "expected an object");
  return v;
}

Result<target::ListenAddress> listen_address(const ConfigParams& p) {
  TRY(obj, object(p, "listen_address"));
  const nlohmann::json& j = obj.value();
  ConfigParams a(j, p.where() + ".listen_address");
  TRY(ok, a.allow_only({"trtype", "adrfam", "traddr", "trsvcid"}));
  target::ListenAddress l;
  TRY(trtype, a.string("trtype"));
  TRY(adrfam, a.string_or("adrfam", "IPv4"));
  TRY(traddr, a.string("traddr"));
  TRY(trsvcid, a.string_or("trsvcid", "4420"));
  // Spelled as SPDK accepts them ("tcp", "ipv4"), kept in one form: one address, one listener.
  l.trtype = trtype.value();
  for (char& c : l.trtype) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  l.adrfam = adrfam.value();
  for (const char* f : {"IPv4", "IPv6"})
    if (strcasecmp(l.adrfam.c_str(), f) == 0) l.adrfam = f;
  l.traddr = traddr.value();
  l.trsvcid = trsvcid.value();
  for (char c : l.trsvcid)
    if (c < '0' || c > '9') return a.error("trsvcid", "a port number");
  if (l.trsvcid.size() > 5 || std::stoul(l.trsvcid) > 65535)
    return a.error("trsvcid", "a port number");
  return l;
}

template <std::size_t N>
Result<std::optional<std::array<uint8_t, N>>> hex_id(const ConfigParams& p, const char* field) {
  if (!p.has(field)) return std::optional<std::array<uint8_t, N>>{};
  TRY(s, p.string(field));
  std::array<uint8_t, N> out;
  if (!target::parse_hex_id(s.value(), out.data(), N))
    return p.error(field, fmt::format("expected {} hex digits", 2 * N));
  return std::optional<std::array<uint8_t, N>>(out);
}

// An unsigned option that fits 32 bits, or its default.
Status read_u32(const ConfigParams& p, const char* f, uint32_t& dst) {
  TRY(v, p.u64_or(f, dst));
  if (v.value() > UINT32_MAX) return p.error(f, "too large");
  dst = static_cast<uint32_t>(v.value());
  return bdev::ok_status();
}

// The options every transport shares (SPDK's names), and SPDK's older max_qpairs_per_ctrlr
// (the admin queue included).
Status read_common_options(const ConfigParams& p, target::CommonTransportOptions& o) {
  for (auto [f, dst] :
       {std::pair{"max_queue_depth", &o.max_queue_depth},
        std::pair{"max_io_qpairs_per_ctrlr", &o.max_io_qpairs_per_ctrlr},
        std::pair{"in_capsule_data_size", &o.in_capsule_data_size},
        std::pair{"max_io_size", &o.max_io_size}, std::pair{"io_unit_size", &o.io_unit_size},
        std::pair{"max_aq_depth", &o.max_aq_depth},
        std::pair{"num_shared_buffers", &o.num_shared_buffers},
        std::pair{"buf_cache_size", &o.buf_cache_size}}) {
    if (auto st = read_u32(p, f, *dst); !st) return st;
  }
  if (p.has("max_qpairs_per_ctrlr")) {
    TRY(v, p.u64("max_qpairs_per_ctrlr"));
    if (v.value() < 2 || v.value() > 65536)
      return p.error("max_qpairs_per_ctrlr", "must be 2 to 65536");
    o.max_io_qpairs_per_ctrlr = static_cast<uint32_t>(v.value() - 1);
  }
  return bdev::ok_status();
}

// dhchap_key / dhchap_ctrlr_key: a keyring key's name (SPDK's way), or the secret itself.
Result<target::HostKeys> host_keys(const ConfigParams& p) {
  target::HostKeys k;
  for (auto [field, key, name] :
       {std::tuple{"dhchap_key", &k.key, &k.key_name},
        std::tuple{"dhchap_ctrlr_key", &k.ctrlr_key, &k.ctrlr_key_name}}) {
    if (!p.has(field)) continue;
    TRY(v, p.string(field));
    auto text = nvme::keyring::resolve(v.value());
    if (!text) return p.error(field, text.error().message);
    auto parsed = target::dhchap::parse_key(text.value());
    if (!parsed) return p.error(field, parsed.error().message);
    *key = std::move(parsed).value();
    if (!nvme::keyring::is_inline_secret(v.value())) *name = v.value();
  }
  if (k.ctrlr_key && !k.key)
    return p.error("dhchap_ctrlr_key", "needs dhchap_key (the host authenticates first)");
  return k;
}

// How a key is written back (save_config): its keyring name, or the secret itself.
std::string key_param(const std::optional<target::dhchap::Key>& key, const std::string& name) {
  return name.empty() ? target::dhchap::format_key(*key) : name;
}

// trtype RDMA: SPDK's common options, the CQ size per poll group (SPDK's num_cqe), the shared
// receive queue's depth per poll group (max_srq_depth; no_srq: receives per connection) and
// Pollux's rdma_device: "vfio-user:/path.sock" (a pollux-rnic NIC) or "ibverbs:NAME" (a
// libibverbs device, connected through rdma_cm); absent: the machine's first libibverbs device.
Status create_rdma_transport(target::Target& tgt, const ConfigParams& p) {
  TRY(ok,
      p.allow_only({"trtype", "max_queue_depth", "max_qpairs_per_ctrlr", "max_io_qpairs_per_ctrlr",
                    "in_capsule_data_size", "max_io_size", "io_unit_size", "max_aq_depth",
                    "num_shared_buffers", "buf_cache_size", "num_cqe", "max_srq_depth",
                    "no_srq", "rdma_device"}));
  if (tgt.transport("RDMA") != nullptr) return p.error("transport RDMA exists already");
  rdma::RdmaTargetOptions o;
  if (auto st = read_common_options(p, o); !st) return st;
  if (auto st = read_u32(p, "num_cqe", o.num_cqe); !st) return st;
  if (auto st = read_u32(p, "max_srq_depth", o.max_srq_depth); !st) return st;
  TRY(no_srq, p.bool_or("no_srq", o.no_srq));
  o.no_srq = no_srq.value();
  std::string dev = "ibverbs:";
  if (p.has("rdma_device")) {
    TRY(d, p.string("rdma_device"));
    dev = d.value();
  }
  auto tr = rdma::RdmaTargetTransport::create_on_device(tgt, o, dev);
  if (!tr) return wrap(p, tr.error());
  if (auto st = tgt.add_transport(std::move(tr).value()); !st) return wrap(p, st.error());
  return bdev::ok_status();
}

Status create_transport(target::Target& tgt, const ConfigParams& p, net::Network* network) {
  if (p.has("trtype")) {
    TRY(tt, p.string("trtype"));
    if (strcasecmp(tt.value().c_str(), "RDMA") == 0) return create_rdma_transport(tgt, p);
  }
  TRY(ok, p.allow_only({"trtype",
                        "max_queue_depth",
                        "max_qpairs_per_ctrlr",
                        "max_io_qpairs_per_ctrlr",
                        "in_capsule_data_size",
                        "max_io_size",
                        "io_unit_size",
                        "max_aq_depth",
                        "num_shared_buffers",
                        "buf_cache_size",
                        "c2h_success",
                        "max_h2c_data_size",
                        "sock_priority",
                        "dif_insert_or_strip",
                        "zcopy",
                        "abort_timeout_sec",
                        "acceptor_poll_rate",
                        "ack_timeout",
                        "control_msg_num",
                        "tgt_name"}));
  TRY(trtype, p.string("trtype"));
  std::string t = trtype.value();
  for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (t != "TCP") return p.error("trtype", "'" + trtype.value() + "': TCP or RDMA");
  if (tgt.transport("TCP") != nullptr) return p.error("transport TCP exists already");
  tcp::TcpTargetOptions o;
  if (auto st = read_common_options(p, o); !st) return st;
  for (auto [f, dst] : {std::pair{"max_h2c_data_size", &o.max_h2c_data_size},
                        std::pair{"sock_priority", &o.sock_priority}}) {
    if (auto st = read_u32(p, f, *dst); !st) return st;
  }
  TRY(c2h, p.bool_or("c2h_success", o.c2h_success));
  o.c2h_success = c2h.value();
  TRY(dif, p.bool_or("dif_insert_or_strip", false));
  if (dif.value()) return p.error("dif_insert_or_strip", "not supported (must be false)");
  TRY(zcopy, p.bool_or("zcopy", false));
  if (zcopy.value()) return p.error("zcopy", "not supported (must be false)");
  for (const char* f :
       {"abort_timeout_sec", "acceptor_poll_rate", "ack_timeout", "control_msg_num"}) {
    TRY(v, p.u64_or(f, 0));  // SPDK tuning without a meaning here: checked, not used
    (void)v;
  }
  if (p.has("tgt_name")) return p.error("tgt_name", "one target per process: leave it out");
  auto tr = tcp::TcpTargetTransport::create(tgt, o, network);
  if (!tr) return wrap(p, tr.error());
  if (auto st = tgt.add_transport(std::move(tr).value()); !st) return wrap(p, st.error());
  return bdev::ok_status();
}

Status create_subsystem(target::Target& tgt, const ConfigParams& p) {
  // kas and cqt_ms are Pollux's (SPDK has neither): the controllers' Identify KAS (keep-alive
  // granularity, 100 ms units) and CQT (Command Quiesce Time, ms; 0: not reported).
  TRY(ok, p.allow_only({"nqn", "serial_number", "model_number", "allow_any_host", "max_namespaces",
                        "min_cntlid", "max_cntlid", "ana_reporting", "tgt_name", "kas", "cqt_ms"}));
  target::SubsystemOptions o;
  TRY(nqn, p.string("nqn"));
  TRY(sn, p.string_or("serial_number", o.serial));
  TRY(mn, p.string_or("model_number", o.model));
  TRY(any, p.bool_or("allow_any_host", false));
  TRY(maxns, (bounded<uint32_t>(p, "max_namespaces", 32, 0, 1024)));
  TRY(lo, (bounded<uint16_t>(p, "min_cntlid", 1, 1, spec::nvmf::connect::kCntlidMax)));
  TRY(hi, (bounded<uint16_t>(p, "max_cntlid", spec::nvmf::connect::kCntlidMax, 1,
                             spec::nvmf::connect::kCntlidMax)));
  TRY(kas, (bounded<uint16_t>(p, "kas", o.kas, 1, 0xffff)));
  TRY(cqt, (bounded<uint16_t>(p, "cqt_ms", o.cqt_ms, 0, 0xffff)));
  TRY(ana, p.bool_or("ana_reporting", false));
  if (ana.value()) return p.error("ana_reporting", "not supported (must be false)");
  if (p.has("tgt_name")) return p.error("tgt_name", "one target per process: leave it out");
  o.nqn = nqn.value();
  o.serial = sn.value();
  o.model = mn.value();
  o.allow_any_host = any.value();
  o.max_namespaces = maxns.value() == 0 ? 32 : maxns.value();  // SPDK: 0 means its default
  o.min_cntlid = lo.value();
  o.max_cntlid = hi.value();
  o.kas = kas.value();
  o.cqt_ms = cqt.value();
  if (auto s = tgt.create_subsystem(o); !s) return wrap(p, s.error());
  return bdev::ok_status();
}

Status add_ns(target::Target& tgt, const ConfigParams& p, NvmfResult* result) {
  TRY(ok, p.allow_only({"nqn", "namespace", "tgt_name"}));
  TRY(nqn, p.string("nqn"));
  TRY(obj, object(p, "namespace"));
  const nlohmann::json& j = obj.value();
  ConfigParams n(j, p.where() + ".namespace");
  TRY(nok, n.allow_only({"bdev_name", "nsid", "uuid", "nguid", "eui64"}));
  target::NamespaceOptions o;
  TRY(bdev_name, n.string("bdev_name"));
  TRY(nsid, (bounded<uint32_t>(n, "nsid", 0, 0, 0xfffffffe)));
  TRY(uuid, hex_id<16>(n, "uuid"));
  TRY(nguid, hex_id<16>(n, "nguid"));
  TRY(eui64, hex_id<8>(n, "eui64"));
  o.bdev_name = bdev_name.value();
  o.nsid = nsid.value();
  o.uuid = uuid.value();
  o.nguid = nguid.value();
  o.eui64 = eui64.value();
  auto r = tgt.add_namespace(nqn.value(), o);
  if (!r) return wrap(p, r.error());
  if (result) result->value = r.value();
  return bdev::ok_status();
}

#undef TRY

}  // namespace

void register_nvmf_config_methods(bdev::ConfigMethods& m, target::Target& tgt, NvmfResult* result,
                                  net::Network* tcp_network) {
  target::Target* t = &tgt;
  auto reset = [result] {
    if (result) result->value = true;
  };
  m.replace("nvmf_create_transport",
            [t, reset, tcp_network](ConfigContext&, const ConfigParams& p) {
              reset();
              return create_transport(*t, p, tcp_network);
            });
  m.replace("nvmf_create_subsystem", [t, reset](ConfigContext&, const ConfigParams& p) {
    reset();
    return create_subsystem(*t, p);
  });
  m.replace("nvmf_delete_subsystem", [t, reset](ConfigContext&, const ConfigParams& p) -> Status {
    reset();
    if (auto ok = p.allow_only({"nqn", "tgt_name"}); !ok) return ok.error();
    auto nqn = p.string("nqn");
    if (!nqn) return nqn.error();
    if (auto st = t->delete_subsystem(nqn.value()); !st) return wrap(p, st.error());
    return bdev::ok_status();
  });
  m.replace("nvmf_subsystem_add_ns",
            [t, result](ConfigContext&, const ConfigParams& p) { return add_ns(*t, p, result); });
  m.replace(
      "nvmf_subsystem_remove_ns", [t, reset](ConfigContext&, const ConfigParams& p) -> Status {
        reset();
        if (auto ok = p.allow_only({"nqn", "nsid", "tgt_name"}); !ok) return ok.error();
        auto nqn = p.string("nqn");
        if (!nqn) return nqn.error();
        auto nsid = p.u64("nsid");
        if (!nsid) return nsid.error();
        if (nsid.value() == 0 || nsid.value() > 0xfffffffe)
          return p.error("nsid", "must be 1 to 4294967294");
        if (auto st = t->remove_namespace(nqn.value(), static_cast<uint32_t>(nsid.value())); !st)
          return wrap(p, st.error());
        return bdev::ok_status();
      });
  for (bool add : {true, false}) {
    m.replace(
        add ? "nvmf_subsystem_add_listener" : "nvmf_subsystem_remove_listener",
        [t, reset, add](ConfigContext&, const ConfigParams& p) -> Status {
          reset();
          if (auto ok = p.allow_only({"nqn", "listen_address", "secure_channel", "tgt_name"}); !ok)
            return ok.error();
          auto nqn = p.string("nqn");
          if (!nqn) return nqn.error();
          auto sc = p.bool_or("secure_channel", false);
          if (!sc) return sc.error();
          if (sc.value()) return p.error("secure_channel", "TLS is not supported");
          auto a = listen_address(p);
          if (!a) return a.error();
          auto st = add ? t->add_listener(nqn.value(), a.value())
                        : t->remove_listener(nqn.value(), a.value());
          if (!st) return wrap(p, st.error());
          return bdev::ok_status();
        });
    m.replace(add ? "nvmf_subsystem_add_host" : "nvmf_subsystem_remove_host",
              [t, reset, add](ConfigContext&, const ConfigParams& p) -> Status {
                reset();
                if (auto ok = add ? p.allow_only({"nqn", "host", "tgt_name", "dhchap_key",
                                                  "dhchap_ctrlr_key", "psk"})
                                  : p.allow_only({"nqn", "host", "tgt_name"});
                    !ok)
                  return ok.error();
                auto nqn = p.string("nqn");
                if (!nqn) return nqn.error();
                auto host = p.string("host");
                if (!host) return host.error();
                if (!add) {
                  if (auto st = t->remove_host(nqn.value(), host.value()); !st)
                    return wrap(p, st.error());
                  return bdev::ok_status();
                }
                if (p.has("psk")) return p.error("psk", "TLS is not supported");
                auto keys = host_keys(p);
                if (!keys) return keys.error();
                if (auto st = t->add_host(nqn.value(), host.value(), std::move(keys).value()); !st)
                  return wrap(p, st.error());
                return bdev::ok_status();
              });
  }
  // SPDK's target-wide settings; of them, in-band authentication's.
  m.replace("nvmf_set_config", [t, reset](ConfigContext&, const ConfigParams& p) -> Status {
    reset();
    if (auto ok = p.allow_only({"dhchap_digests", "dhchap_dhgroups"}); !ok)
      return p.error(ok.error().message +
                     " (of nvmf_set_config, Pollux takes dhchap_digests and "
                     "dhchap_dhgroups)");
    target::AuthOptions o = t->auth_options();
    for (auto [field, out, parse] :
         {std::tuple{"dhchap_digests", &o.digests, &target::dhchap::hash_from_name},
          std::tuple{"dhchap_dhgroups", &o.dhgroups, &target::dhchap::dhgroup_from_name}}) {
      if (!p.has(field)) continue;
      const auto& v = p.json().at(field);
      if (!v.is_array() || v.empty()) return p.error(field, "expected a non-empty array of names");
      out->clear();
      for (const auto& e : v) {
        std::optional<uint8_t> id;
        if (e.is_string()) id = parse(e.get<std::string>());
        if (!id)
          return p.error(field, "'" + (e.is_string() ? e.get<std::string>() : e.dump()) +
                                    "' is not one of " +
                                    (out == &o.digests ? "sha256, sha384, sha512"
                                                       : "null, ffdhe2048, ffdhe3072, ffdhe4096, "
                                                         "ffdhe6144, ffdhe8192"));
        out->push_back(*id);
      }
      // Strongest first, as the controller picks.
      const auto& order =
          out == &o.digests ? target::dhchap::all_hashes() : target::dhchap::all_dhgroups();
      std::vector<uint8_t> sorted;
      for (uint8_t x : order)
        if (std::find(out->begin(), out->end(), x) != out->end()) sorted.push_back(x);
      *out = sorted;
    }
    if (auto st = t->set_auth_options(o); !st) return wrap(p, st.error());
    return bdev::ok_status();
  });
  m.replace("nvmf_subsystem_allow_any_host",
            [t, reset](ConfigContext&, const ConfigParams& p) -> Status {
              reset();
              if (auto ok = p.allow_only({"nqn", "allow_any_host", "tgt_name"}); !ok)
                return ok.error();
              auto nqn = p.string("nqn");
              if (!nqn) return nqn.error();
              if (!p.has("allow_any_host")) return p.error("allow_any_host", "missing");
              auto any = p.bool_or("allow_any_host", false);
              if (!any) return any.error();
              if (auto st = t->set_allow_any_host(nqn.value(), any.value()); !st)
                return wrap(p, st.error());
              return bdev::ok_status();
            });
}

bdev::Status apply_target_config(const nlohmann::json& j, bdev::StandardModules& modules,
                                 const bdev::ConfigMethods& keyring_methods,
                                 const bdev::ConfigMethods& bdev_methods,
                                 const bdev::ConfigMethods& nvmf_methods) {
  auto bad = [](const std::string& why) -> bdev::Status { return make_error(EINVAL, why); };
  if (!j.is_object() || !j.contains("subsystems") || !j["subsystems"].is_array())
    return bad("config: 'subsystems' must be an array");
  for (const auto& sub : j["subsystems"]) {
    if (!sub.is_object() || !sub.contains("subsystem") || !sub["subsystem"].is_string()) continue;
    const std::string name = sub["subsystem"];
    const bool has_config =
        sub.contains("config") && sub["config"].is_array() && !sub["config"].empty();
    if (name != "bdev" && name != "nvmf" && name != "keyring" && has_config)
      fmt::print(stderr, "pollux-tgt: config: subsystem '{}' is not Pollux's: {} entries ignored\n",
                 name, sub["config"].size());
  }
  auto ctx = modules.context();
  // The keyring first: nvmf_subsystem_add_host and bdev_nvme_attach_controller name its keys.
  if (auto st = bdev::apply_config(j, ctx, keyring_methods, "keyring"); !st)
    return bad(st.error().message);
  if (auto st = bdev::apply_config(j, ctx, bdev_methods, "bdev"); !st)
    return bad(st.error().message);
  if (const auto unbuilt = modules.unbuilt(); !unbuilt.empty()) return bad(unbuilt.front());
  if (auto st = bdev::apply_config(j, ctx, nvmf_methods, "nvmf"); !st)
    return bad(st.error().message);
  return bdev::ok_status();
}

namespace {

nlohmann::json address_json(const target::ListenAddress& a) {
  return {{"trtype", a.trtype}, {"adrfam", a.adrfam}, {"traddr", a.traddr}, {"trsvcid", a.trsvcid}};
}

bool nonzero(const uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i]) return true;
  return false;
}

nlohmann::json namespace_json(const target::NamespaceInfo& n) {
  nlohmann::json j = {
      {"nsid", n.nsid}, {"bdev_name", n.bdev_name}, {"uuid", target::format_uuid(n.ids.uuid)}};
  if (nonzero(n.ids.nguid.data(), 16)) j["nguid"] = target::format_hex(n.ids.nguid.data(), 16);
  if (nonzero(n.ids.eui64.data(), 8)) j["eui64"] = target::format_hex(n.ids.eui64.data(), 8);
  return j;
}

}  // namespace

nlohmann::json nvmf_config_json(const target::Target& tgt) {
  nlohmann::json out = nlohmann::json::array();
  auto add = [&](const char* method, nlohmann::json params) {
    out.push_back({{"method", method}, {"params", std::move(params)}});
  };
  nlohmann::json digests = nlohmann::json::array(), groups = nlohmann::json::array();
  for (uint8_t h : tgt.auth_options().digests) digests.push_back(target::dhchap::hash_name(h));
  for (uint8_t g : tgt.auth_options().dhgroups) groups.push_back(target::dhchap::dhgroup_name(g));
  add("nvmf_set_config", {{"dhchap_digests", digests}, {"dhchap_dhgroups", groups}});
  for (target::Transport* t : tgt.transports()) add("nvmf_create_transport", t->options_json());
  for (target::Subsystem* s : tgt.subsystems()) {
    if (s->discovery()) continue;
    const auto& o = s->options();
    add("nvmf_create_subsystem", {{"nqn", o.nqn},
                                  {"serial_number", o.serial},
                                  {"model_number", o.model},
                                  {"allow_any_host", o.allow_any_host},
                                  {"max_namespaces", o.max_namespaces},
                                  {"min_cntlid", o.min_cntlid},
                                  {"max_cntlid", o.max_cntlid},
                                  {"kas", o.kas},
                                  {"cqt_ms", o.cqt_ms}});
    for (const target::NamespaceInfo& n : s->namespaces()) {
      if (n.removing) continue;
      add("nvmf_subsystem_add_ns", {{"nqn", o.nqn}, {"namespace", namespace_json(n)}});
    }
    for (const std::string& h : s->hosts()) {
      nlohmann::json params = {{"nqn", o.nqn}, {"host", h}};
      if (const target::HostKeys* k = s->host_keys(h)) {
        params["dhchap_key"] = key_param(k->key, k->key_name);
        if (k->ctrlr_key) params["dhchap_ctrlr_key"] = key_param(k->ctrlr_key, k->ctrlr_key_name);
      }
      add("nvmf_subsystem_add_host", std::move(params));
    }
    for (const auto& a : s->listeners())
      add("nvmf_subsystem_add_listener",
          {{"nqn", o.nqn}, {"listen_address", address_json(tgt.as_configured(a))}});
  }
  for (const auto& a : tgt.discovery_subsystem()->listeners())
    add("nvmf_subsystem_add_listener", {{"nqn", tgt.discovery_subsystem()->nqn()},
                                        {"listen_address", address_json(tgt.as_configured(a))}});
  return out;
}

nlohmann::json nvmf_subsystems_json(const target::Target& tgt) {
  nlohmann::json out = nlohmann::json::array();
  for (target::Subsystem* s : tgt.subsystems()) {
    const auto& o = s->options();
    nlohmann::json j = {{"nqn", o.nqn},
                        {"subtype", s->discovery() ? "Discovery" : "NVMe"},
                        {"listen_addresses", nlohmann::json::array()},
                        {"allow_any_host", s->discovery() || o.allow_any_host},
                        {"hosts", nlohmann::json::array()}};
    for (const auto& a : s->listeners()) j["listen_addresses"].push_back(address_json(a));
    for (const std::string& h : s->hosts()) {
      nlohmann::json host = {{"nqn", h}};
      if (const target::HostKeys* k = s->host_keys(h)) {  // names, never secrets
        host["dhchap_key"] = k->key_name.empty() ? "(given inline)" : k->key_name;
        if (k->ctrlr_key)
          host["dhchap_ctrlr_key"] =
              k->ctrlr_key_name.empty() ? "(given inline)" : k->ctrlr_key_name;
      }
      j["hosts"].push_back(host);
    }
    if (!s->discovery()) {
      j["serial_number"] = o.serial;
      j["model_number"] = o.model;
      j["max_namespaces"] = o.max_namespaces;
      j["min_cntlid"] = o.min_cntlid;
      j["max_cntlid"] = o.max_cntlid;
      j["kas"] = o.kas;
      j["cqt_ms"] = o.cqt_ms;
      j["namespaces"] = nlohmann::json::array();
      for (const target::NamespaceInfo& n : s->namespaces()) {
        nlohmann::json ns = namespace_json(n);
        ns["name"] = n.bdev_name;
        if (n.removing) ns["removing"] = true;
        j["namespaces"].push_back(ns);
      }
      j["controllers"] = nlohmann::json::array();
      for (const auto& [cntlid, ci] : s->controllers())
        j["controllers"].push_back({{"cntlid", cntlid}, {"hostnqn", ci.hostnqn}});
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace pollux::fabric::tgt
