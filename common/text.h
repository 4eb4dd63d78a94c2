// Text that comes from outside (files, sockets, the command line) on its way into JSON.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pollux {

// The offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or std::string_view::npos.
std::size_t invalid_utf8_at(std::string_view s);

// JSON text that cannot throw on strings: nlohmann's dump() throws type_error 316 on a string
// that is not UTF-8 (a device name from a file, a byte from a control socket) and, uncaught,
// aborts the program. Here each invalid byte becomes U+FFFD. Every JSON a Pollux program
// writes goes through this.
std::string json_text(const nlohmann::json& j, int indent = -1);

}  // namespace pollux
