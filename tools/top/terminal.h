// The interactive screen: keys read in raw mode, full-screen redraws with ANSI escapes. The
// terminal is put back as it was on destruction and on SIGINT/SIGTERM.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace pollux::top {

class Terminal {
 public:
  Terminal();  // Raw keys (when stdin is a terminal), alternate screen, cursor hidden.
  ~Terminal();
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // Waits up to `wait` for a key press; nothing on timeout or when there is no keyboard.
  std::optional<char> read_key(std::chrono::milliseconds wait);

  // Replaces the screen with `text` (lines ending in '\n').
  void draw(const std::string& text);

  static std::size_t width();
  static std::size_t height();

 private:
  bool keys_ = false;  // stdin is a terminal in raw mode and still open.
};

}  // namespace pollux::top
