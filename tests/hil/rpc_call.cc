// pollux-rpc-call SOCKET METHOD [PARAMS-JSON]: one JSON-RPC call to pollux-tgt, for the HIL
// guest, which has no Python for tools/pollux-rpc. Prints the result; exit status 1 on an
// error answer or no answer, 2 on bad arguments.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "fabric/tgt/rpc_server.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: pollux-rpc-call SOCKET METHOD [PARAMS-JSON]\n");
    return 2;
  }
  nlohmann::json req = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", argv[2]}};
  if (argc == 4) {
    nlohmann::json p = nlohmann::json::parse(argv[3], nullptr, /*allow_exceptions=*/false);
    if (p.is_discarded() || !p.is_object()) {
      std::fprintf(stderr, "pollux-rpc-call: PARAMS-JSON must be a JSON object\n");
      return 2;
    }
    req["params"] = p;
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (std::strlen(argv[1]) >= sizeof a.sun_path) return 2;
  std::strcpy(a.sun_path, argv[1]);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "pollux-rpc-call: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  const std::string out = req.dump();
  if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size()))
    return 1;
  std::string in;
  char buf[4096];
  pollux::fabric::tgt::JsonFramer framer;
  for (;;) {
    const std::size_t end = framer.next(in);
    if (end != 0 && end != std::string::npos) {
      in.resize(end);
      break;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      std::fprintf(stderr, "pollux-rpc-call: %s: no answer\n", argv[2]);
      return 1;
    }
    in.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const nlohmann::json resp = nlohmann::json::parse(in, nullptr, false);
  if (resp.is_discarded() || !resp.is_object()) return 1;
  if (resp.contains("error")) {
    std::fprintf(stderr, "pollux-rpc-call: %s: %s\n", argv[2], resp["error"].dump().c_str());
    return 1;
  }
  std::printf("%s\n", resp.value("result", nlohmann::json()).dump().c_str());
  return 0;
}
