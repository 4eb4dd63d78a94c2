// pollux-tgt's SPDK-shaped JSON configuration (fabric/tgt: apply_target_config, its "bdev"
// section with the bdev layer's methods and its "nvmf" section with nvmf_config's) fed any
// text, on a step-mode target in virtual time. TCP transports listen on a network that
// reaches nobody; the sizes of what a method builds are bounded (tests/fuzz/tgt_sandbox.h).
// The lvol methods are not in this table: their stores live in a process-wide registry (the
// blobstore underneath has its own target, blob_load).
//
// What must hold: no crash, hang, sanitizer report or escaping exception; an error says
// something; a configuration that applies is saved (nvmf_config_json, save_config's "nvmf"
// section) in a form that applies again, to a target that saves the very same; the target
// then stops cleanly.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "driver/bdev/config.h"
#include "fabric/tgt/nvmf_config.h"
#include "tests/fuzz/target_world.h"
#include "tests/fuzz/tgt_sandbox.h"

namespace {

namespace tgt = pollux::fabric::tgt;
namespace bdev = pollux::bdev;
using json = nlohmann::json;
using pollux::fuzz::check;

const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

// A target and the method tables pollux-tgt would apply a configuration with.
struct Rig {
  std::unique_ptr<bdev::StandardModules> modules;  // destroyed after the world's manager
  pollux::fuzz::NullNetwork net;
  pollux::fuzz::TargetWorld w;
  // No keyring methods: keyring_file_add_key reads files named by the input.
  bdev::ConfigMethods keyring_methods, bdev_methods, nvmf_methods;

  Rig() {
    w.on_app([&] {
      modules = std::make_unique<bdev::StandardModules>(*w.mgr);
      bdev_methods = pollux::fuzz::bounded(bdev::ConfigMethods::builtin());
      bdev::ConfigMethods nvmf;
      tgt::register_nvmf_config_methods(nvmf, *w.tgt, nullptr, &net);
      nvmf_methods = pollux::fuzz::bounded(nvmf);
    });
  }
  bdev::Status apply(const json& config) {
    bdev::Status st = w.on_app([&] {
      return tgt::apply_target_config(config, *modules, keyring_methods, bdev_methods,
                                      nvmf_methods);
    });
    w.settle();
    return st;
  }
  json saved() {
    return w.on_app([&] { return tgt::nvmf_config_json(*w.tgt); });
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const json config =
      json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size,
                  nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;  // not JSON: read_config_file's parser says where
  json first;
  {
    Rig rig;
    const bdev::Status st = rig.apply(config);
    if (!st) {
      check(!st.error().message.empty(), "a configuration error that says nothing");
      if (g_debug) std::fprintf(stderr, "refused: %s\n", st.error().message.c_str());
      return 0;
    }
    first = rig.saved();
    (void)rig.w.on_app([&] { return tgt::nvmf_subsystems_json(*rig.w.tgt); });
  }
  if (g_debug) std::fprintf(stderr, "applied; saved nvmf: %s\n", first.dump().c_str());
  // The saved "nvmf" section, with the input's own "bdev" section, builds the same target.
  json again = json::object();
  again["subsystems"] = json::array();
  for (const json& sub : config["subsystems"])
    if (sub.is_object() && sub.contains("subsystem") && sub["subsystem"] == "bdev")
      again["subsystems"].push_back(sub);
  again["subsystems"].push_back({{"subsystem", "nvmf"}, {"config", first}});
  Rig rig;
  const bdev::Status st = rig.apply(again);
  if (!st) std::fprintf(stderr, "the saved configuration fails: %s\n", st.error().message.c_str());
  check(st.ok(), "a saved configuration does not apply again");
  check(rig.saved() == first, "a saved configuration applies to a different target");
  return 0;
}
