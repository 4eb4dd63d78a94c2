// pollux-tgt's JSON-RPC server (fabric/tgt: RpcServer and every method TargetApp registers —
// bdev, lvol and nvmf configuration, the queries, save_config) fed any byte stream as one
// client's connection, in process (RpcServer's in-process clients: no socket), on a step-mode
// framework in virtual time. A NUL byte in the input is not sent: the client waits there until
// the server is quiet (as a client that waits for each answer does), then sends what follows.
// Each input gets a fresh application. Methods that reach outside the process (bdev_nvme_*,
// bdev_uring_*, bdev_aio_*, keyring_file_add_key) are refused before they run, TCP transports
// listen on a network that reaches nobody, and the sizes of what a method builds are bounded
// (tests/fuzz/tgt_sandbox.h).
//
// What must hold: no crash, hang, sanitizer report or escaping exception; every line the
// server writes is a JSON-RPC 2.0 response (jsonrpc "2.0", an id, a result or an error with an
// integer code and a message), no more of them than requests; afterwards a new client still
// gets keyring_get_keys answered; the application then stops cleanly.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "driver/env/clock.h"
#include "driver/event/framework.h"
#include "driver/metrics/bdev_source.h"  // TargetApp's members, complete
#include "fabric/tgt/app.h"
#include "fabric/tgt/rpc_server.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/tgt_sandbox.h"

namespace {

namespace tgt = pollux::fabric::tgt;
namespace event = pollux::event;
using json = nlohmann::json;
using pollux::fuzz::check;
using pollux::fuzz::fail;

const bool g_debug = std::getenv("POLLUX_FUZZ_DEBUG") != nullptr;

struct Rig {
  pollux::fuzz::NullNetwork net;
  pollux::env::VirtualClock clock{1'000'000'000};
  std::unique_ptr<event::Framework> fw;
  event::Thread* app_thread = nullptr;
  std::unique_ptr<tgt::TargetApp> app;

  template <typename F>
  auto on_app(F f) {
    event::CurrentThreadScope scope(app_thread);
    return f();
  }

  Rig() {
    event::FrameworkOptions fo;
    fo.core_mask = "0x1";
    fo.step_mode = true;
    fo.clock = &clock;
    fo.msg_ring_size = 256;
    auto f = event::Framework::create(fo);
    check(f.ok(), "framework");
    fw = std::move(f).value();
    app_thread = fw->create_thread("app", 0);
    on_app([&] {
      app = std::make_unique<tgt::TargetApp>(*fw);
      tgt::AppOptions o;
      o.rpc = "";
      o.rpc_in_process = true;
      o.tcp_network = &net;
      o.bdev_options.io_pool_size = 64;  // the methods move little data; a pool of 512 was 13 % of an input (zeroed pages)
      o.bdev_options.io_cache_size = 16;
      o.bdev_options.bounce_buffers = 0;
      auto st = app->start(o);
      if (!st) std::fprintf(stderr, "start: %s\n", st.error().message.c_str());
      check(st.ok(), "the application starts");
      tgt::RpcServer& rpc = *app->rpc();
      for (const std::string& m : rpc.methods()) {
        // Only the methods the sandbox changes are wrapped: wrapping all of them was a tenth
        // of an input's time.
        if (pollux::fuzz::reaches_outside(m)) {
          rpc.add(m, [](const json&, tgt::RpcServer::Reply reply) {
            reply(pollux::make_error(EPERM, "not in the fuzzer: it reaches outside the process"));
          });
          continue;
        }
        if (!pollux::fuzz::has_bounds(m)) continue;
        tgt::RpcServer::Handler h = rpc.handler(m);
        rpc.add(m, [m, h](const json& params, tgt::RpcServer::Reply reply) {
          h(pollux::fuzz::bounded_params(m, params), std::move(reply));
        });
      }
    });
  }
  ~Rig() {
    bool stopped = false;
    on_app([&] { app->stop([&] { stopped = true; }); });
    for (int i = 0; i < 200000 && !stopped; ++i)
      if (!fw->step()) clock.advance(100'000);
    check(stopped, "the application stops");
    fw->stop(0);
    for (int i = 0; i < 10000 && !fw->finished(); ++i) fw->step();
    app.reset();  // as pollux-tgt's main does: after the framework has finished
  }
  // Polls (the RPC server runs every millisecond) until nothing more happens.
  void run() {
    for (int round = 0; round < 50; ++round) {
      clock.advance(1'000'000);
      bool busy = false;
      for (int i = 0; i < 100000; ++i) {
        if (!fw->step()) break;
        busy = true;
      }
      if (!busy && round > 2) return;
    }
  }
};

// Every line a JSON-RPC 2.0 response; returns how many (and the last, parsed, in *last).
std::size_t check_responses(const std::string& out, json* last = nullptr) {
  std::size_t n = 0, at = 0;
  while (at < out.size()) {
    const std::size_t end = out.find('\n', at);
    check(end != std::string::npos, "a response without its newline");
    const json r = json::parse(out.begin() + static_cast<long>(at),
                               out.begin() + static_cast<long>(end), nullptr, false);
    at = end + 1;
    check(!r.is_discarded() && r.is_object(), "a response that is not a JSON object");
    check(r.contains("jsonrpc") && r["jsonrpc"] == "2.0", "a response without jsonrpc 2.0");
    check(r.contains("id"), "a response without an id");
    check(r.contains("result") != r.contains("error"), "a response needs a result or an error");
    if (r.contains("error")) {
      const json& e = r["error"];
      check(e.is_object() && e.contains("code") && e["code"].is_number_integer() &&
                e.contains("message") && e["message"].is_string(),
            "an error without an integer code and a message");
      if (g_debug)
        std::fprintf(stderr, "error %lld: %s\n", e["code"].get<long long>(),
                     e["message"].get<std::string>().c_str());
    } else if (g_debug) {
      std::fprintf(stderr, "result: %.300s\n", r["result"].dump().c_str());
    }
    ++n;
    if (last != nullptr) *last = r;
  }
  return n;
}

// How many complete JSON values (requests, as the server splits them) the stream holds.
std::size_t count_requests(std::string_view s) {
  std::size_t n = 0;
  tgt::JsonFramer framer;
  for (;;) {
    const std::size_t end = framer.next(s);
    if (end == 0) return n;
    ++n;
    if (end == std::string::npos) return n;  // answered with a parse error, then closed
    s.remove_prefix(end);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string stream(reinterpret_cast<const char*>(data), size);
  Rig rig;
  tgt::RpcServer& rpc = *rig.app->rpc();
  const uint64_t client = rig.on_app([&] { return rpc.connect_local(); });
  for (std::size_t at = 0; at <= stream.size();) {
    std::size_t end = stream.find('\0', at);
    if (end == std::string::npos) end = stream.size();
    const std::string piece = stream.substr(at, end - at);
    rig.on_app([&] { rpc.deliver_local(client, piece); });
    rig.run();
    at = end + 1;
  }
  const std::string out = rig.on_app([&] { return rpc.take_local_output(client); });
  const std::size_t answers = check_responses(out);
  std::string sent = stream;
  std::erase(sent, '\0');
  check(answers <= count_requests(sent), "more responses than requests");
  rig.on_app([&] { rpc.disconnect_local(client); });
  // The server still serves: a method with a short answer (rpc_get_methods' list of ~100
  // names, written and parsed again, was a fifth of an input's time).
  const uint64_t next = rig.on_app([&] { return rpc.connect_local(); });
  rig.on_app([&] {
    rpc.deliver_local(next, R"({"jsonrpc":"2.0","id":"last","method":"keyring_get_keys"})");
  });
  rig.run();
  const std::string last = rig.on_app([&] { return rpc.take_local_output(next); });
  json r;
  check(check_responses(last, &r) == 1, "the server stopped answering");
  check(r.contains("result") && r["result"].is_array() && r["id"] == "last",
        "keyring_get_keys after the input");
  rig.on_app([&] { rpc.disconnect_local(next); });
  return 0;
}
