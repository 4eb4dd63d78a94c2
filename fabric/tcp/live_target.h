// An NVMe/TCP target running in this process for tests: a free-running framework (reactors
// on OS threads of their own, not pinned), a malloc bdev as namespace 1 of one subsystem that
// admits any host, listening on 127.0.0.1 at a port the kernel picks. The test thread is free
// to act as a host (Pollux's driver, or raw sockets).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "driver/bdev/bdev.h"
#include "driver/bdev/modules/malloc.h"
#include "driver/event/framework.h"
#include "fabric/target/target.h"
#include "fabric/tcp/target_transport.h"

namespace pollux::fabric::tcp::testing {

struct LiveTargetOptions {
  std::string mask = "0x3";
  TcpTargetOptions tcp = [] {
    TcpTargetOptions o;
    o.num_shared_buffers = 64;
    return o;
  }();
  uint64_t blocks = 65536;  // 32 MiB of 512-byte blocks
  uint32_t block_size = 512;
  std::string nqn = "nqn.2026-11.io.pollux:loop";
  net::Network* network = nullptr;  // where the target listens (default: the kernel's TCP)
};

class LiveTarget {
 public:
  explicit LiveTarget(LiveTargetOptions o = {}) : o_(std::move(o)) {
    event::FrameworkOptions fo;
    fo.core_mask = o_.mask;
    fo.pin_reactors = false;
    auto fw = event::Framework::create(fo);
    EXPECT_TRUE(fw.ok());
    fw_ = std::move(fw).value();
    std::future<void> started = started_.get_future();
    runner_ = std::thread([this] { fw_->run(&LiveTarget::start, this); });
    EXPECT_EQ(started.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_TRUE(error_.empty()) << error_;
  }
  ~LiveTarget() {
    if (tgt_ != nullptr) {
      tgt_->run_on(app_, [this] { tgt_->stop([this] { fw_->stop(0); }); });
    } else {
      fw_->stop(1);
    }
    runner_.join();
    tgt_.reset();
    mgr_.reset();
  }
  LiveTarget(const LiveTarget&) = delete;
  LiveTarget& operator=(const LiveTarget&) = delete;

  uint16_t port() const { return port_; }
  const std::string& nqn() const { return o_.nqn; }
  std::string trid(const std::string& extra = "") const {
    return "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:" + std::to_string(port_) +
           " subnqn:" + o_.nqn + (extra.empty() ? "" : " " + extra);
  }
  target::Target& target() { return *tgt_; }
  bdev::Manager& bdevs() { return *mgr_; }
  // Runs fn on the target thread, waits for it and for the changes it made to settle.
  void on_target(std::function<void(target::Target&)> fn) {
    std::promise<void> done;
    tgt_->run_on(app_, [&] {
      fn(*tgt_);
      tgt_->when_settled([&] { done.set_value(); });
    });
    done.get_future().wait();
  }
  const target::ListenAddress& listen_address() const { return listen_; }
  TcpTargetTransport& transport() const { return *transport_; }

 private:
  static void start(void* arg) {
    auto& t = *static_cast<LiveTarget*>(arg);
    t.app_ = event::Thread::current();
    auto fail = [&](const std::string& e) {
      t.error_ = e;
      t.started_.set_value();
      t.tgt_.reset();
      t.fw_->stop(1);
    };
    auto m = bdev::Manager::create(*t.fw_);
    if (!m) return fail(m.error().message);
    t.mgr_ = std::move(m).value();
    if (auto b = bdev::create_malloc_bdev(
            *t.mgr_, {"Malloc0", t.o_.blocks, t.o_.block_size, nullptr, nullptr});
        !b)
      return fail(b.error().message);
    auto tg = target::Target::create(*t.fw_, *t.mgr_);
    if (!tg) return fail(tg.error().message);
    t.tgt_ = std::move(tg).value();
    auto tr = TcpTargetTransport::create(*t.tgt_, t.o_.tcp, t.o_.network);
    if (!tr) return fail(tr.error().message);
    TcpTargetTransport* transport = tr->get();
    t.transport_ = transport;
    if (auto st = t.tgt_->add_transport(std::move(tr).value()); !st)
      return fail(st.error().message);
    target::SubsystemOptions so;
    so.nqn = t.o_.nqn;
    so.allow_any_host = true;
    if (auto s = t.tgt_->create_subsystem(so); !s) return fail(s.error().message);
    target::NamespaceOptions no;
    no.bdev_name = "Malloc0";
    if (auto n = t.tgt_->add_namespace(so.nqn, no); !n) return fail(n.error().message);
    t.listen_ = target::ListenAddress{"TCP", "IPv4", "127.0.0.1", "0"};
    if (auto st = t.tgt_->add_listener(so.nqn, t.listen_); !st) return fail(st.error().message);
    t.port_ = transport->bound_port(t.listen_);
    t.tgt_->when_settled([&t] { t.started_.set_value(); });
  }

  LiveTargetOptions o_;
  std::unique_ptr<event::Framework> fw_;
  std::unique_ptr<bdev::Manager> mgr_;
  std::unique_ptr<target::Target> tgt_;
  event::Thread* app_ = nullptr;
  TcpTargetTransport* transport_ = nullptr;
  target::ListenAddress listen_;
  uint16_t port_ = 0;
  std::string error_;
  std::promise<void> started_;
  std::thread runner_;
};

}  // namespace pollux::fabric::tcp::testing
