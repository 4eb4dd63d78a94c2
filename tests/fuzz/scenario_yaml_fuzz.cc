// Scenario files (YAML) from anyone: parse and validate any text; a bad one must be an error
// message, never a crash, an exception escaping or a hang. A scenario that parses is
// validated again (parse_scenario already did) and its durations formatted.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "scenarios/runner/scenario.h"

// libsystemc.so (the runner's timing models) calls sc_main from its own main(). A fuzz binary's
// main is libFuzzer's or fuzz_runner's, and a statically linked one does not pull in the
// runner's weak sc_main (emulator/timing/simulation.cc) for a shared library's reference: this
// one satisfies the linker.
extern "C" __attribute__((weak)) int sc_main(int, char**) {
  return 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto s = pollux::scenarios::parse_scenario(text, "fuzz.yaml");
  if (s) {
    (void)pollux::scenarios::validate(s.value());
    (void)pollux::scenarios::format_ns(s.value().end_ns());
  } else if (s.error().empty()) {
    __builtin_trap();  // an error must say what is wrong
  }
  return 0;
}
