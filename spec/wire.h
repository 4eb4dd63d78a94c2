// Byte-level encoding of wire structures: unaligned loads from a received buffer and appends
// to a message being built. Shared by every side of every protocol in spec/.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace pollux::spec::wire {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

}  // namespace pollux::spec::wire
