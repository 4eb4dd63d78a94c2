#include "fabric/tgt/rpc_server.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/text.h"
#include "common/unix_socket.h"

namespace pollux::fabric::tgt {

namespace {
constexpr uint64_t kPollPeriodUs = 1000;
constexpr int kParseError = -32700, kInvalidRequest = -32600, kMethodNotFound = -32601,
              kInvalidParams = -32602;
}  // namespace

std::size_t JsonFramer::next(std::string_view s) {
  for (; pos_ < s.size(); ++pos_) {
    const char c = s[pos_];
    ++scanned_;
    if (!started_) {
      if (std::isspace(static_cast<unsigned char>(c))) continue;
      if (c != '{' && c != '[') return std::string::npos;
      started_ = true;
      depth_ = 1;
    } else if (in_string_) {
      if (escape_)
        escape_ = false;
      else if (c == '\\')
        escape_ = true;
      else if (c == '"')
        in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      const std::size_t end = pos_ + 1;
      pos_ = 0;  // the next value starts afresh (depth 0, outside a string already)
      started_ = false;
      return end;
    }
  }
  return 0;
}

RpcServer::RpcServer(std::string path, int fd, event::Thread* thread)
    : path_(std::move(path)), fd_(fd), thread_(thread) {}

Result<std::unique_ptr<RpcServer>> RpcServer::start(const std::string& path,
                                                   const std::string& group) {
  event::Thread* self = event::Thread::current();
  if (self == nullptr) return make_error(EINVAL, "rpc: start it on a framework thread");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path)
    return make_error(
        EINVAL, fmt::format("--rpc {}: a path of 1 to {} bytes", path, sizeof a.sun_path - 1));
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(errno, fmt::format("rpc: socket: {}", std::strerror(errno)));
  std::string why;
  if (const int e = common::restrict_socket_before_bind(fd, path, group, &why); e != 0) {
    ::close(fd);
    return make_error(-e, fmt::format("--rpc {}: {}", path, why));
  }
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno == EADDRINUSE) {
    // A socket file left behind is replaced; one somebody serves is not.
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool served = ::connect(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(probe);
    if (served) {
      ::close(fd);
      return make_error(EADDRINUSE, fmt::format("--rpc {}: another process serves it", path));
    }
    ::unlink(path.c_str());
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(fd, 16) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("--rpc {}: {}", path, std::strerror(e)));
  }
  if (const int e = common::restrict_socket_after_bind(path, group, &why); e != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return make_error(-e, fmt::format("--rpc {}: {}", path, why));
  }
  std::unique_ptr<RpcServer> s(new RpcServer(path, fd, self));
  s->poller_ = self->register_poller(poll, s.get(), kPollPeriodUs, "rpc_server");
  return s;
}

Result<std::unique_ptr<RpcServer>> RpcServer::in_process() {
  event::Thread* self = event::Thread::current();
  if (self == nullptr) return make_error(EINVAL, "rpc: start it on a framework thread");
  std::unique_ptr<RpcServer> s(new RpcServer("", -1, self));
  s->poller_ = self->register_poller(poll, s.get(), kPollPeriodUs, "rpc_server");
  return s;
}

RpcServer::~RpcServer() {
  *alive_ = false;
  if (poller_ != nullptr) thread_->unregister_poller(poller_);
  for (auto& c : clients_)
    if (c->fd >= 0) ::close(c->fd);
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void RpcServer::add(const std::string& method, Handler h) {
  handlers_[method] = std::move(h);
}

RpcServer::Handler RpcServer::handler(const std::string& method) const {
  auto it = handlers_.find(method);
  return it == handlers_.end() ? Handler() : it->second;
}

std::vector<std::string> RpcServer::methods() const {
  std::vector<std::string> out;
  for (const auto& [m, h] : handlers_) out.push_back(m);
  return out;
}

event::PollStatus RpcServer::poll(void* arg) {
  auto& s = *static_cast<RpcServer*>(arg);
  bool busy = false;
  while (s.fd_ >= 0) {
    const int fd = ::accept4(s.fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    auto c = std::make_unique<Client>();
    c->fd = fd;
    c->id = s.next_client_++;
    s.clients_.push_back(std::move(c));
    busy = true;
  }
  // Serving may reply at once and so touch clients_; iterate by index over a stable list.
  for (std::size_t i = 0; i < s.clients_.size(); ++i) s.serve(*s.clients_[i]);
  for (std::size_t i = 0; i < s.clients_.size();) {
    Client& c = *s.clients_[i];
    if (c.fd < 0) {  // in-process: its output waits to be taken, its end to be asked for
      ++i;
      continue;
    }
    if (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<std::size_t>(n));
        busy = true;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        c.closing = true;
        c.out.clear();
      }
    }
    if (c.closing && c.out.empty()) {
      ::close(c.fd);
      s.clients_.erase(s.clients_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  return busy ? event::PollStatus::kBusy : event::PollStatus::kIdle;
}

void RpcServer::serve(Client& c) {
  if (c.closing) return;
  if (c.fd < 0) return process(c);
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) {
      c.closing = true;  // answers still owed go nowhere
      break;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) c.closing = true;
      break;
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    if (c.in.size() > kMaxRequestBytes) break;
  }
  process(c);
}

void RpcServer::process(Client& c) {
  if (c.closing) return;
  if (c.in.size() > kMaxRequestBytes) {
    respond(c, {{"jsonrpc", "2.0"},
                {"id", nullptr},
                {"error", {{"code", kInvalidRequest}, {"message", "request too large"}}}});
    c.closing = true;
    return;
  }
  // The requests are taken from the front of `in`, which moves once at the end (an erase per
  // request would move the rest of a pipelined buffer each time).
  std::size_t taken = 0;
  while (!c.closing) {
    const std::string_view rest = std::string_view(c.in).substr(taken);
    const std::size_t end = c.framer.next(rest);
    if (end == 0) break;
    if (end == std::string::npos) {
      respond(c, {{"jsonrpc", "2.0"},
                  {"id", nullptr},
                  {"error", {{"code", kParseError}, {"message", "expected a JSON object"}}}});
      c.closing = true;
      break;
    }
    taken += end;
    dispatch(c, rest.substr(0, end));
  }
  c.in.erase(0, taken);
}

void RpcServer::dispatch(Client& c, std::string_view text) {
  nlohmann::json req =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) {
    respond(c, {{"jsonrpc", "2.0"},
                {"id", nullptr},
                {"error", {{"code", kParseError}, {"message", "not valid JSON"}}}});
    c.closing = true;
    return;
  }
  const nlohmann::json id = req.is_object() && req.contains("id") ? req["id"] : nlohmann::json();
  auto invalid = [&](const std::string& why) {
    respond(
        c,
        {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", kInvalidRequest}, {"message", why}}}});
  };
  if (!req.is_object()) return invalid("expected a request object (batches are not supported)");
  if (!req.contains("jsonrpc") || req["jsonrpc"] != "2.0")
    return invalid("'jsonrpc' must be \"2.0\"");
  if (!req.contains("method") || !req["method"].is_string())
    return invalid("'method' must be a string");
  if (req.contains("id") && !(id.is_number_integer() || id.is_string() || id.is_null()))
    return invalid("'id' must be a number or a string");
  nlohmann::json params = req.contains("params") ? req["params"] : nlohmann::json::object();
  if (params.is_null()) params = nlohmann::json::object();
  if (!params.is_object()) return invalid("'params' must be an object");
  const std::string method = req["method"];
  auto it = handlers_.find(method);
  if (it == handlers_.end()) {
    respond(c, {{"jsonrpc", "2.0"},
                {"id", id},
                {"error",
                 {{"code", kMethodNotFound}, {"message", "unknown method '" + method + "'"}}}});
    return;
  }
  const bool notification = !req.contains("id");
  const uint64_t client = c.id;
  std::weak_ptr<bool> alive = alive_;
  it->second(params, [this, alive, client, id, notification](Result<nlohmann::json> r) {
    if (alive.expired() || notification) return;
    send(client, id, std::move(r));
  });
}

void RpcServer::send(uint64_t client, const nlohmann::json& id, Result<nlohmann::json> r) {
  for (auto& c : clients_) {
    if (c->id != client) continue;
    if (r.ok()) {
      respond(*c, {{"jsonrpc", "2.0"}, {"id", id}, {"result", r.value()}});
    } else {
      const int code = r.error().code == -EINVAL ? kInvalidParams : r.error().code;
      respond(*c, {{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", {{"code", code}, {"message", r.error().message}}}});
    }
    return;
  }
}

RpcServer::Client* RpcServer::find_client(uint64_t id) const {
  for (const auto& c : clients_)
    if (c->id == id) return c.get();
  return nullptr;
}

uint64_t RpcServer::connect_local() {
  auto c = std::make_unique<Client>();
  c->id = next_client_++;
  clients_.push_back(std::move(c));
  return clients_.back()->id;
}

void RpcServer::deliver_local(uint64_t client, const std::string& bytes) {
  if (Client* c = find_client(client); c != nullptr && !c->closing) c->in += bytes;
}

std::string RpcServer::take_local_output(uint64_t client) {
  Client* c = find_client(client);
  if (c == nullptr) return "";
  std::string out;
  out.swap(c->out);
  return out;
}

bool RpcServer::local_closing(uint64_t client) const {
  const Client* c = find_client(client);
  return c == nullptr || c->closing;
}

void RpcServer::disconnect_local(uint64_t client) {
  std::erase_if(clients_, [&](const std::unique_ptr<Client>& c) { return c->id == client; });
}

void RpcServer::respond(Client& c, const nlohmann::json& msg) {
  c.out += json_text(msg);
  c.out += '\n';
}

}  // namespace pollux::fabric::tgt
