// What every fuzz target shares: reading an input record by record, and failing on a broken
// invariant. Nothing here uses gtest: a broken invariant is __builtin_trap(), which libFuzzer
// and the g++ runner (fuzz_runner.cc) both report with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace pollux::fuzz {

// A broken invariant: says which, then traps (the fuzzer keeps the input).
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::fflush(stderr);
  __builtin_trap();
}
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

// The input, read front to back; a read past its end fails and moves nothing.
struct Reader {
  const uint8_t* p;
  std::size_t left;

  bool take(void* out, std::size_t n) {
    if (n > left) return false;
    if (n) std::memcpy(out, p, n);
    p += n;
    left -= n;
    return true;
  }
  // Up to n bytes (fewer at the end of the input), without copying.
  const uint8_t* take_up_to(std::size_t n, std::size_t* got) {
    *got = n < left ? n : left;
    const uint8_t* at = p;
    p += *got;
    left -= *got;
    return at;
  }
  template <typename T>
  bool get(T* v) {
    return take(v, sizeof *v);
  }
};

}  // namespace pollux::fuzz
