#include "tools/top/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>

namespace pollux::top {
namespace {

// Far above any real metrics page; stops a runaway server from eating memory.
constexpr std::size_t kMaxResponseBytes = 64 << 20;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

HttpResult failure(std::string error) {
  return {"", std::move(error)};
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

bool is_timeout(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINPROGRESS;
}

// A connected socket with the timeouts set, or an error.
int connect_to(const Endpoint& endpoint, std::chrono::milliseconds timeout, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &addresses); rc != 0) {
    error = "cannot resolve '" + endpoint.host + "': " + gai_strerror(rc);
    return -1;
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  int fd = -1, last_errno = 0;
  for (addrinfo* a = addresses; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    // On Linux SO_SNDTIMEO also bounds connect(), which then fails with EINPROGRESS.
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last_errno = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (fd < 0) {
    error = is_timeout(last_errno)
                ? "cannot connect: timed out after " + std::to_string(timeout.count()) + " ms"
                : "cannot connect: " + errno_text(last_errno);
  }
  return fd;
}

bool send_all(int fd, std::string_view data, std::string& error) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = is_timeout(errno) ? "timed out sending the request"
                                : "cannot send the request: " + errno_text(errno);
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool receive_all(int fd, std::chrono::milliseconds timeout, std::string& out, std::string& error) {
  char buf[16384];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = is_timeout(errno) ? "timed out after " + std::to_string(timeout.count()) +
                                      " ms waiting for the response"
                                : "cannot read the response: " + errno_text(errno);
      return false;
    }
    if (out.size() + static_cast<std::size_t>(n) > kMaxResponseBytes) {
      error = "response larger than " + std::to_string(kMaxResponseBytes >> 20) + " MiB";
      return false;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

HttpResult parse_http_response(std::string_view raw) {
  if (raw.empty()) return failure("empty response (the server closed the connection)");
  std::size_t header_end = raw.find("\r\n\r\n");
  std::size_t body_start = header_end + 4;
  if (header_end == std::string_view::npos) {  // Tolerate bare newlines.
    header_end = raw.find("\n\n");
    body_start = header_end + 2;
  }
  if (header_end == std::string_view::npos) return failure("malformed HTTP response: no headers");
  std::string_view head = raw.substr(0, header_end);

  // Status line: HTTP/1.x CODE REASON
  std::size_t eol = head.find('\n');
  std::string_view status_line = trim(head.substr(0, eol));
  int code = 0;
  if (!status_line.starts_with("HTTP/") || status_line.size() < 12 || status_line[8] != ' ' ||
      std::from_chars(status_line.data() + 9, status_line.data() + 12, code).ptr !=
          status_line.data() + 12) {
    return failure("malformed HTTP status line '" + std::string(status_line.substr(0, 60)) + "'");
  }
  if (code != 200) return failure("HTTP status " + std::string(trim(status_line.substr(9))));

  std::string_view body = raw.substr(body_start);
  std::string_view headers = eol == std::string_view::npos ? "" : head.substr(eol + 1);
  while (!headers.empty()) {
    std::size_t next = headers.find('\n');
    std::string_view line = headers.substr(0, next);
    headers.remove_prefix(next == std::string_view::npos ? headers.size() : next + 1);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (iequals(name, "Transfer-Encoding") && !iequals(value, "identity")) {
      return failure("unsupported Transfer-Encoding '" + std::string(value) + "'");
    }
    if (iequals(name, "Content-Length")) {
      std::size_t length = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return failure("malformed Content-Length '" + std::string(value) + "'");
      }
      if (body.size() < length) {
        return failure("truncated response: " + std::to_string(body.size()) + " of " +
                       std::to_string(length) + " bytes");
      }
      body = body.substr(0, length);
    }
  }
  return {std::string(body), ""};
}

HttpResult http_get(const Endpoint& endpoint, std::chrono::milliseconds timeout) {
  const std::string url = "http://" + endpoint.to_string();
  std::string error;
  Socket socket(connect_to(endpoint, timeout, error));
  if (socket.fd() < 0) return failure("GET " + url + ": " + error);

  const bool ipv6 = endpoint.host.find(':') != std::string::npos;
  const std::string request =
      "GET " + endpoint.path +
      " HTTP/1.0\r\nHost: " + (ipv6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" +
      std::to_string(endpoint.port) + "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n";
  std::string raw;
  if (!send_all(socket.fd(), request, error) || !receive_all(socket.fd(), timeout, raw, error)) {
    return failure("GET " + url + ": " + error);
  }
  HttpResult result = parse_http_response(raw);
  if (!result.ok()) result.error = "GET " + url + ": " + result.error;
  return result;
}

}  // namespace pollux::top
