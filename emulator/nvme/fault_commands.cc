#include "emulator/nvme/fault_commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "common/text.h"

namespace pollux::emu::nvme {

namespace {

using json = nlohmann::json;

// Replies go through json_text: an error may quote what the client sent, which need not be
// UTF-8, and dump() would throw on it.
std::string reply(const json& j) { return json_text(j); }
std::string fail(const std::string& why) { return reply({{"ok", false}, {"error", why}}); }
std::string ok() { return reply({{"ok", true}}); }

Result<FaultAction> parse_action(const std::string& s) {
  for (int i = 0; i < kFaultActions; ++i) {
    const auto a = static_cast<FaultAction>(i);
    if (s == to_string(a)) return a;
  }
  return Error{"action: '" + s +
               "' is not one of status, never_complete, delay, duplicate_completion, "
               "unknown_cid, stale_phase, drop_data, misdirect"};
}

// Reads an unsigned integer field if present; errors name it.
template <class T>
bool get_uint(const json& j, const char* key, T* out, std::string* err) {
  if (!j.contains(key)) return true;
  if (!j[key].is_number_unsigned()) {
    *err = std::string(key) + ": expected a non-negative integer";
    return false;
  }
  if (j[key].get<uint64_t>() > std::numeric_limits<T>::max()) {  // get<T> would truncate
    *err = std::string(key) + ": at most " + std::to_string(std::numeric_limits<T>::max());
    return false;
  }
  *out = j[key].get<T>();
  return true;
}

// A delay beyond this is a command that never completes: say never_complete.
constexpr uint64_t kMaxDelayUs = 3'600'000'000;  // an hour

// Blocks of namespace nsid (0: any namespace, so the largest); 0 if there is no such one.
uint64_t blocks(Controller& ctrl, uint32_t nsid) {
  if (nsid != 0) {
    const NamespaceStore* ns = ctrl.namespace_store(nsid);
    return ns ? ns->size() / ctrl.lba_size(nsid) : 0;
  }
  uint64_t most = 0;
  for (uint32_t id = 1; id <= ctrl.namespace_count(); ++id) most = std::max(most, blocks(ctrl, id));
  return most;
}

// "" or why nsid and an LBA range do not fit the controller's namespaces.
std::string check_target(Controller& ctrl, uint32_t nsid, uint64_t last_lba, bool has_lba) {
  if (nsid != 0 && ctrl.namespace_store(nsid) == nullptr) {
    return "nsid: no namespace " + std::to_string(nsid) + " (0: any)";
  }
  if (const uint64_t n = blocks(ctrl, nsid); has_lba && last_lba >= n) {
    return "lba: " + std::to_string(last_lba) + " is beyond the namespace (" + std::to_string(n) +
           " blocks)";
  }
  return "";
}

std::string add_fault(Controller& ctrl, const json& j) {
  static const char* kKeys[] = {"cmd",   "action",      "status",   "opcode", "nsid", "lba",
                                "count", "probability", "delay_us", "queue",  "shift"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
      return fail(it.key() + ": unknown field");
    }
  }
  if (!j.contains("action") || !j["action"].is_string()) return fail("action: required (a string)");
  auto action = parse_action(j["action"].get<std::string>());
  if (!action) return fail(action.error());
  FaultRule r;
  r.action = action.value();
  std::string err;
  uint32_t opcode = 0;
  if (j.contains("opcode")) {
    if (!get_uint(j, "opcode", &opcode, &err)) return fail(err);
    if (opcode > 0xff) return fail("opcode: 0..255");
    r.opcode = static_cast<int>(opcode);
  }
  uint64_t delay_us = 0;
  if (!get_uint(j, "nsid", &r.nsid, &err) || !get_uint(j, "count", &r.count, &err) ||
      !get_uint(j, "delay_us", &delay_us, &err)) {
    return fail(err);
  }
  if (delay_us > kMaxDelayUs) return fail("delay_us: at most 3600000000 (an hour)");
  r.delay_ns = delay_us * 1000;
  if (j.contains("queue")) {
    if (!j["queue"].is_string() || (j["queue"] != "io" && j["queue"] != "admin")) {
      return fail("queue: io or admin");
    }
    r.admin = j["queue"] == "admin";
  }
  if (!get_uint(j, "shift", &r.shift, &err)) return fail(err);
  if (j.contains("shift") && r.action != FaultAction::kMisdirect) return fail("shift: only for action misdirect");
  if (j.contains("lba")) {
    const json& l = j["lba"];
    if (!l.is_array() || l.size() != 2 || !l[0].is_number_unsigned() || !l[1].is_number_unsigned()) {
      return fail("lba: expected [first, last]");
    }
    r.lba_lo = l[0].get<uint64_t>();
    r.lba_hi = l[1].get<uint64_t>();
  }
  if (std::string e = check_target(ctrl, r.nsid, r.lba_hi, j.contains("lba")); !e.empty()) {
    return fail(e);
  }
  if (j.contains("probability")) {
    if (!j["probability"].is_number()) return fail("probability: expected a number in [0, 1]");
    r.probability = j["probability"].get<double>();
  }
  if (r.action == FaultAction::kStatus) {
    if (!j.contains("status") || !j["status"].is_string()) return fail("status: required for action status");
    auto st = parse_fault_status(j["status"].get<std::string>());
    if (!st) return fail("status: " + st.error());
    r.status = st.value();
  } else if (j.contains("status")) {
    return fail("status: only for action status");
  }
  if (r.action == FaultAction::kDelay && r.delay_ns == 0) return fail("delay_us: required for action delay");
  auto id = ctrl.faults().add(r);
  if (!id) return fail(id.error());
  return reply({{"ok", true}, {"id", id.value()}});
}

std::string apply(Controller& ctrl, std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("cmd") || !j["cmd"].is_string()) {
    return fail("cmd: required (fault, remove_fault, clear, bad_block, fatal, disable, stats)");
  }
  const std::string cmd = j["cmd"].get<std::string>();
  if (cmd == "fault") return add_fault(ctrl, j);
  if (cmd == "remove_fault") {
    if (!j.contains("id") || !j["id"].is_number_integer()) return fail("id: required");
    return ctrl.faults().remove(j["id"].get<int>()) ? ok() : fail("id: no such fault");
  }
  if (cmd == "clear") {
    ctrl.faults().clear_rules();
    ctrl.faults().clear_bad_blocks();
    return ok();
  }
  if (cmd == "bad_block") {
    uint32_t nsid = 1;
    uint64_t lba = 0;
    std::string err;
    if (!j.contains("lba")) return fail("lba: required");
    if (!get_uint(j, "nsid", &nsid, &err) || !get_uint(j, "lba", &lba, &err)) return fail(err);
    if (nsid == 0) return fail("nsid: a bad block is in one namespace (1, 2, ...)");
    if (std::string e = check_target(ctrl, nsid, lba, true); !e.empty()) return fail(e);
    ctrl.faults().add_bad_block(nsid, lba);
    return reply({{"ok", true}, {"bad_blocks", ctrl.faults().bad_blocks()}});
  }
  if (cmd == "fatal") {
    ctrl.inject_fatal_status();
    return ok();
  }
  if (cmd == "disable") {
    ctrl.inject_spontaneous_disable();
    return ok();
  }
  if (cmd == "stats") {
    const ControllerCounters& c = ctrl.counters();
    return reply({{"ok", true},
                  {"fault_hits", ctrl.fault_hits()},
                  {"bad_blocks", ctrl.faults().bad_blocks()},
                  {"failed_commands", c.failed_commands},
                  {"completions_posted", c.completions_posted},
                  {"resets", c.resets},
                  {"ready", ctrl.ready()},
                  {"fatal", ctrl.fatal()}});
  }
  return fail("cmd: '" + cmd + "' is not one of fault, remove_fault, clear, bad_block, fatal, disable, stats");
}

}  // namespace

std::string apply_fault_command(Controller& ctrl, std::string_view text) {
  try {
    return apply(ctrl, text);
  } catch (const std::exception& e) {  // a client must never take the device down
    return fail(std::string("cannot apply: ") + e.what());
  }
}

}  // namespace pollux::emu::nvme
