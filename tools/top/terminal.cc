#include "tools/top/terminal.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace pollux::top {
namespace {

constexpr char kEnterScreen[] = "\x1b[?1049h\x1b[?25l";  // Alternate screen, hide cursor.
constexpr char kLeaveScreen[] = "\x1b[?25h\x1b[?1049l";

// Read by the signal handler, hence globals.
termios g_saved_termios;
volatile sig_atomic_t g_termios_saved = 0;

void write_all(const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = write(STDOUT_FILENO, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void restore_terminal() {
  if (g_termios_saved) tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
  write_all(kLeaveScreen, sizeof kLeaveScreen - 1);
}

// Async-signal-safe: put the terminal back, then die of the signal as if unhandled.
void on_fatal_signal(int sig) {
  restore_terminal();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

winsize window_size() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 || ws.ws_row == 0) {
    ws.ws_col = 80;
    ws.ws_row = 24;
  }
  return ws;
}

}  // namespace

Terminal::Terminal() {
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
    termios raw = g_saved_termios;
    // No line buffering or echo; ISIG stays so Ctrl-C still raises SIGINT.
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    g_termios_saved = 1;
    keys_ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
  }
  std::signal(SIGINT, on_fatal_signal);
  std::signal(SIGTERM, on_fatal_signal);
  write_all(kEnterScreen, sizeof kEnterScreen - 1);
}

Terminal::~Terminal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  restore_terminal();
}

std::optional<char> Terminal::read_key(std::chrono::milliseconds wait) {
  pollfd fd{STDIN_FILENO, POLLIN, 0};
  const int timeout_ms = static_cast<int>(std::max<long long>(0, wait.count()));
  if (poll(&fd, keys_ ? 1 : 0, timeout_ms) <= 0) return std::nullopt;
  char c = 0;
  ssize_t n = read(STDIN_FILENO, &c, 1);
  if (n == 1) return c;
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) keys_ = false;  // Closed: stop.
  return std::nullopt;
}

void Terminal::draw(const std::string& text) {
  // Home, each line cleared to its end, nothing below; no newline after the last line so a
  // full screen does not scroll.
  std::string out = "\x1b[H";
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (pos > 0) out += "\n";
    out.append(text, pos, end - pos);
    out += "\x1b[K";
    pos = end + 1;
  }
  out += "\x1b[J";
  write_all(out.data(), out.size());
}

std::size_t Terminal::width() {
  return window_size().ws_col;
}
std::size_t Terminal::height() {
  return window_size().ws_row;
}

}  // namespace pollux::top
