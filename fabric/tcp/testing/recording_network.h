// The kernel's TCP behind the socket seam, with every send, send_more and push of accepted
// sockets written down (for tests of how the target batches its sends).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fabric/net/posix.h"

namespace pollux::fabric::tcp::testing {

class RecordingNetwork final : public net::Network {
 public:
  // Per accepted socket, in order: 'S' send, 'M' send_more, 'P' push.
  std::vector<std::string> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

  Result<std::unique_ptr<net::Socket>> connect(const std::string& address,
                                               const std::string& port) override {
    return inner_.connect(address, port);
  }
  Result<std::unique_ptr<net::Listener>> listen(const std::string& adrfam,
                                                const std::string& address,
                                                const std::string& port) override {
    auto l = inner_.listen(adrfam, address, port);
    if (!l) return l;
    return std::unique_ptr<net::Listener>(std::make_unique<Listener>(*this, std::move(l).value()));
  }
  std::unique_ptr<net::ReadinessGroup> readiness_group() override {
    return std::make_unique<Group>(inner_.readiness_group());
  }
  uint64_t now_ns() const override { return inner_.now_ns(); }

 private:
  class Socket final : public net::Socket {
   public:
    Socket(RecordingNetwork& n, std::unique_ptr<net::Socket> s, std::size_t id)
        : n_(n), s_(std::move(s)), id_(id) {}
    net::Socket& inner() { return *s_; }
    ssize_t send(const iovec* iov, int iovcnt) override {
      n_.note(id_, 'S');
      return s_->send(iov, iovcnt);
    }
    ssize_t send_more(const iovec* iov, int iovcnt) override {
      n_.note(id_, 'M');
      return s_->send_more(iov, iovcnt);
    }
    void push() override {
      n_.note(id_, 'P');
      s_->push();
    }
    ssize_t recv(const iovec* iov, int iovcnt) override { return s_->recv(iov, iovcnt); }
    void shutdown_write() override { s_->shutdown_write(); }
    bool connected(int* error) override { return s_->connected(error); }
    void wait(bool for_write, uint64_t deadline_ns) override { s_->wait(for_write, deadline_ns); }
    std::string peer() const override { return s_->peer(); }

   private:
    RecordingNetwork& n_;
    std::unique_ptr<net::Socket> s_;
    std::size_t id_;
  };
  class Listener final : public net::Listener {
   public:
    Listener(RecordingNetwork& n, std::unique_ptr<net::Listener> l) : n_(n), l_(std::move(l)) {}
    std::unique_ptr<net::Socket> accept() override {
      auto s = l_->accept();
      if (!s) return s;
      return std::make_unique<Socket>(n_, std::move(s), n_.open_log());
    }
    uint16_t port() const override { return l_->port(); }

   private:
    RecordingNetwork& n_;
    std::unique_ptr<net::Listener> l_;
  };
  class Group final : public net::ReadinessGroup {
   public:
    explicit Group(std::unique_ptr<net::ReadinessGroup> g) : g_(std::move(g)) {}
    void add(net::Socket& s, void* ctx) override { g_->add(static_cast<Socket&>(s).inner(), ctx); }
    void remove(net::Socket& s) override { g_->remove(static_cast<Socket&>(s).inner()); }
    int poll(void** ready, int max) override { return g_->poll(ready, max); }

   private:
    std::unique_ptr<net::ReadinessGroup> g_;
  };

  std::size_t open_log() {
    std::lock_guard lock(mu_);
    calls_.emplace_back();
    return calls_.size() - 1;
  }
  void note(std::size_t id, char c) {
    std::lock_guard lock(mu_);
    calls_[id] += c;
  }

  net::PosixNetwork inner_;
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
};

}  // namespace pollux::fabric::tcp::testing
