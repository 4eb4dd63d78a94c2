#include "emulator/rnic/control.h"

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/text.h"

namespace pollux::emu::rnic {
namespace {

using json = nlohmann::json;

std::string fail(const std::string& why) {
  return json_text({{"ok", false}, {"error", why}});
}
std::string ok() {
  return json_text({{"ok", true}});
}

constexpr uint64_t kMaxDownUs = 3'600'000'000;  // an hour

// Every key of `j` is one of `keys`; "" or the first that is not.
std::string unknown_key(const json& j, std::initializer_list<const char*> keys) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }))
      return it.key() + ": unknown field";
  }
  return "";
}

bool get_uint(const json& j, const char* key, uint64_t max, uint64_t* out, std::string* err) {
  if (!j.contains(key)) {
    *err = std::string(key) + ": required";
    return false;
  }
  if (!j[key].is_number_unsigned() || j[key].get<uint64_t>() > max) {
    *err = std::string(key) + ": expected an integer from 0 to " + std::to_string(max);
    return false;
  }
  *out = j[key].get<uint64_t>();
  return true;
}

bool get_rate(const json& j, double* out, std::string* err) {
  if (!j.contains("rate") || !j["rate"].is_number() || j["rate"].get<double>() < 0 ||
      j["rate"].get<double>() > 1) {
    *err = "rate: expected a probability from 0 to 1";
    return false;
  }
  *out = j["rate"].get<double>();
  return true;
}

json nic_stats(const Rnic& r) {
  const RnicCounters& c = r.counters();
  std::array<uint64_t, 7> by_state{};
  r.for_each_qp([&](uint32_t, sr::QpState st, const QpCounters&) {
    if (static_cast<std::size_t>(st) < by_state.size()) ++by_state[static_cast<std::size_t>(st)];
  });
  return {{"enabled", r.enabled()},
          {"tx_packets", c.tx_packets},
          {"rx_packets", c.rx_packets},
          {"retransmitted_packets", c.retransmitted_packets},
          {"ack_timeouts", c.timeouts},
          {"icrc_errors", c.icrc_errors},
          {"dropped_packets", c.dropped_packets},
          {"wqes_pushed", c.pushed_wqes},
          {"qps_rts", by_state[static_cast<std::size_t>(sr::QpState::kRts)]},
          {"qps_error", by_state[static_cast<std::size_t>(sr::QpState::kErr)]}};
}

}  // namespace

void RnicControl::tick(uint64_t now_ns) {
  for (std::size_t i = 0; i < down_until_.size(); ++i) {
    if (down_until_[i] != 0 && now_ns >= down_until_[i]) {
      down_until_[i] = 0;
      c_.wire().set_link_up(c_.nic(i).nic().port_address(), true);
    }
  }
}

std::string RnicControl::apply(std::string_view text, uint64_t now_ns) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("cmd") || !j["cmd"].is_string())
    return fail("cmd: expected an object with a string \"cmd\"");
  const std::string cmd = j["cmd"].get<std::string>();
  std::string err;
  uint64_t nic = 0;
  auto which_nic = [&] {
    return get_uint(j, "nic", c_.count() == 0 ? 0 : c_.count() - 1, &nic, &err) && c_.count() != 0;
  };
  if (cmd == "stats") {
    if (std::string k = unknown_key(j, {"cmd"}); !k.empty()) return fail(k);
    json nics = json::array();
    for (std::size_t i = 0; i < c_.count(); ++i) nics.push_back(nic_stats(c_.nic(i).nic()));
    const WireStats& w = c_.wire().stats();
    return json_text(
        {{"ok", true},
         {"nics", nics},
         {"wire", {{"sent", w.sent}, {"dropped", w.dropped}, {"corrupted", w.corrupted}}}});
  }
  if (cmd == "link_down" || cmd == "link_up") {
    if (std::string k = unknown_key(j, {"cmd", "nic", "duration_us"}); !k.empty()) return fail(k);
    if (!which_nic()) return fail(err.empty() ? "nic: no NICs" : err);
    const uint64_t port = c_.nic(nic).nic().port_address();
    if (down_until_.size() < c_.count()) down_until_.resize(c_.count(), 0);
    if (cmd == "link_up") {
      down_until_[nic] = 0;
      c_.wire().set_link_up(port, true);
      return ok();
    }
    uint64_t us = 0;
    if (!get_uint(j, "duration_us", kMaxDownUs, &us, &err)) return fail(err);
    if (us == 0) return fail("duration_us: at least 1");
    down_until_[nic] = now_ns + us * 1000;
    c_.wire().set_link_up(port, false);
    return ok();
  }
  if (cmd == "loss" || cmd == "corrupt") {
    if (std::string k = unknown_key(j, {"cmd", "rate"}); !k.empty()) return fail(k);
    double rate = 0;
    if (!get_rate(j, &rate, &err)) return fail(err);
    (cmd == "loss" ? faults_.loss : faults_.corrupt) = rate;
    c_.wire().set_faults(faults_);
    return ok();
  }
  if (cmd == "qp_error") {
    if (std::string k = unknown_key(j, {"cmd", "nic", "qpn"}); !k.empty()) return fail(k);
    uint64_t qpn = 0;
    if (!which_nic()) return fail(err.empty() ? "nic: no NICs" : err);
    if (!get_uint(j, "qpn", std::numeric_limits<uint32_t>::max(), &qpn, &err)) return fail(err);
    if (!c_.nic(nic).nic().force_qp_error(static_cast<uint32_t>(qpn)))
      return fail("qpn: no QP " + std::to_string(qpn) + " outside Reset and Error on NIC " +
                  std::to_string(nic));
    return ok();
  }
  if (cmd == "nic_reset") {
    if (std::string k = unknown_key(j, {"cmd", "nic"}); !k.empty()) return fail(k);
    if (!which_nic()) return fail(err.empty() ? "nic: no NICs" : err);
    c_.nic(nic).on_reset();
    return ok();
  }
  return fail("cmd: '" + cmd +
              "' is not one of link_down, link_up, loss, corrupt, qp_error, nic_reset, stats");
}

}  // namespace pollux::emu::rnic
