// A JSON-RPC 2.0 server on a UNIX stream socket (SPDK's RPC shape: one request object at a
// time per client, no framing beyond the JSON itself), served by a timed poller on the thread
// that starts it. Handlers run on that thread and answer once, now or later.
//
// Errors: -32700 parse error (the client is then disconnected: the stream cannot be resynced),
// -32600 invalid request, -32601 unknown method, -32602 invalid parameters (a handler's EINVAL),
// otherwise the handler's negative errno with its message.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "driver/env/result.h"
#include "driver/event/thread.h"

namespace pollux::fabric::tgt {

// Splits a byte stream into JSON values (objects or arrays; strings and escapes respected) in
// one pass over the bytes, however they arrive: it remembers how far it scanned, so a request
// that trickles in a byte at a time costs what it would all at once (re-scanning the buffer on
// every read made that quadratic: hours for a 4 MiB request sent slowly).
class JsonFramer {
 public:
  // `s` holds the bytes from the current value's start (what earlier calls saw, and more).
  // Returns the end of the value (an offset into s; the framer then starts afresh for the
  // bytes after it), 0 if it is not complete yet, or npos if `s` does not start like one.
  std::size_t next(std::string_view s);
  uint64_t bytes_scanned() const { return scanned_; }

 private:
  std::size_t pos_ = 0;  // how far into the value the scan got
  int depth_ = 0;
  bool started_ = false, in_string_ = false, escape_ = false;
  uint64_t scanned_ = 0;
};

class RpcServer {
 public:
  using Reply = std::function<void(Result<nlohmann::json>)>;
  using Handler = std::function<void(const nlohmann::json& params, Reply reply)>;

  // On a framework thread: binds `path` (an existing socket file is replaced only if nobody
  // listens on it).
  // The socket file is the owner's only (0600), or 0660 for `group` (common/unix_socket.h).
  static Result<std::unique_ptr<RpcServer>> start(const std::string& path,
                                                   const std::string& group = "");
  // On a framework thread: a server with no socket, for in-process clients only.
  static Result<std::unique_ptr<RpcServer>> in_process();
  ~RpcServer();  // on the same thread: closes every client and removes the socket file
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  void add(const std::string& method, Handler h);
  std::vector<std::string> methods() const;
  Handler handler(const std::string& method) const;  // empty if none
  const std::string& path() const { return path_; }

  // In-process clients (tests, fuzzing): bytes go in as a connection would deliver them and
  // the answers stay here to be taken; no socket. Served by the same poller as the others.
  uint64_t connect_local();
  void deliver_local(uint64_t client, const std::string& bytes);
  std::string take_local_output(uint64_t client);
  bool local_closing(uint64_t client) const;  // the server ends it (after a parse error)
  void disconnect_local(uint64_t client);

  static constexpr std::size_t kMaxRequestBytes = 4 << 20;

 private:
  struct Client {
    int fd = -1;  // -1: an in-process client
    uint64_t id = 0;
    std::string in;
    JsonFramer framer;  // where the request at the start of `in` ends
    std::string out;
    bool closing = false;  // close once `out` is sent
  };
  RpcServer(std::string path, int fd, event::Thread* thread);
  static event::PollStatus poll(void* arg);
  void serve(Client& c);
  void process(Client& c);  // the complete requests in c.in
  Client* find_client(uint64_t id) const;
  void dispatch(Client& c, std::string_view text);
  void send(uint64_t client, const nlohmann::json& id, Result<nlohmann::json> r);
  void respond(Client& c, const nlohmann::json& msg);

  std::string path_;
  int fd_;
  event::Thread* thread_;
  event::Poller* poller_ = nullptr;
  std::map<std::string, Handler> handlers_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint64_t next_client_ = 1;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace pollux::fabric::tgt
