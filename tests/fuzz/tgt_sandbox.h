// What keeps pollux-tgt's configuration methods inside the fuzzer's process when the input
// chooses their parameters: TCP transports listen on a network that reaches nobody, RDMA
// transports name a device path that cannot exist, and memory a method would populate and
// lock (malloc bdevs, transport buffer pools) is capped — the parameters are parsed and
// checked as given; only the size of what gets built is bounded. Methods that open files or
// devices or connect out (bdev_uring_create, bdev_nvme_attach_controller, ...) are refused
// before they run (reaches_outside).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "driver/bdev/config.h"
#include "driver/env/result.h"
#include "fabric/net/socket.h"

namespace pollux::fuzz {

// Listens everywhere, accepts nobody, connects nowhere.
class NullNetwork final : public fabric::net::Network {
 public:
  Result<std::unique_ptr<fabric::net::Socket>> connect(const std::string&,
                                                       const std::string&) override {
    return make_error(ECONNREFUSED, "the fuzzer's network reaches nobody");
  }
  Result<std::unique_ptr<fabric::net::Listener>> listen(const std::string&, const std::string&,
                                                        const std::string& port) override {
    return std::unique_ptr<fabric::net::Listener>(std::make_unique<Listener>(port));
  }
  std::unique_ptr<fabric::net::ReadinessGroup> readiness_group() override {
    return std::make_unique<Group>();
  }
  uint64_t now_ns() const override { return 0; }

 private:
  class Listener final : public fabric::net::Listener {
   public:
    explicit Listener(const std::string& port) : port_(port == "0" ? 49152 : to_port(port)) {}
    std::unique_ptr<fabric::net::Socket> accept() override { return nullptr; }
    uint16_t port() const override { return port_; }

   private:
    static uint16_t to_port(const std::string& p) {
      unsigned v = 0;
      for (char c : p) v = c >= '0' && c <= '9' ? (v * 10 + static_cast<unsigned>(c - '0')) % 65536 : v;
      return static_cast<uint16_t>(v);
    }
    uint16_t port_;
  };
  class Group final : public fabric::net::ReadinessGroup {
   public:
    void add(fabric::net::Socket&, void*) override {}
    void remove(fabric::net::Socket&) override {}
    int poll(void**, int) override { return 0; }
  };
};

inline constexpr uint64_t kMaxBuiltBytes = 1 << 20;  // per malloc bdev, per transport pool

// The methods whose parameters bounded_params changes (the others pass through as given).
inline bool has_bounds(const std::string& method) {
  return method == "bdev_malloc_create" || method == "nvmf_create_transport";
}

// A copy of the parameters with the sizes of what they build bounded (types left as given:
// a wrong type still reaches the real parser).
inline nlohmann::json bounded_params(const std::string& method, nlohmann::json p) {
  if (!has_bounds(method) || !p.is_object()) return p;
  auto u64 = [&](const char* f, uint64_t dflt) {
    return p.contains(f) && p[f].is_number_unsigned() ? p[f].get<uint64_t>() : dflt;
  };
  if (method == "bdev_malloc_create" && p.contains("num_blocks") &&
      p["num_blocks"].is_number_unsigned()) {
    const uint64_t bs = u64("block_size", 512);
    if (bs != 0 && u64("num_blocks", 0) > kMaxBuiltBytes / bs)
      p["num_blocks"] = kMaxBuiltBytes / bs;
  }
  if (method == "nvmf_create_transport") {
    const uint64_t io = u64("max_io_size", 131072);
    if (io != 0 && u64("num_shared_buffers", 511) > kMaxBuiltBytes / io)
      p["num_shared_buffers"] = std::max<uint64_t>(1, kMaxBuiltBytes / io);
    if (p.contains("rdma_device") && p["rdma_device"].is_string() &&
        p["rdma_device"].get<std::string>().rfind("vfio-user:", 0) == 0)
      p["rdma_device"] = "vfio-user:/nonexistent/pollux-fuzz/rnic.sock";
  }
  return p;
}

// The table's methods with bounded parameters.
inline bdev::ConfigMethods bounded(const bdev::ConfigMethods& in) {
  bdev::ConfigMethods out;
  for (const std::string& name : in.methods()) {
    bdev::ConfigHandler h = *in.find(name);
    out.replace(name, [name, h](bdev::ConfigContext& c, const bdev::ConfigParams& p) {
      const nlohmann::json bounded_json = bounded_params(name, p.json());
      return h(c, bdev::ConfigParams(bounded_json, p.where()));
    });
  }
  return out;
}

// Methods that reach outside the process (files, devices, other hosts). keyring_file_add_key
// reads any file the input names into the process-wide keyring, which would also carry a key
// from one input to the next.
inline bool reaches_outside(const std::string& method) {
  return method.rfind("bdev_nvme_", 0) == 0 || method.rfind("bdev_uring_", 0) == 0 ||
         method.rfind("bdev_aio_", 0) == 0 || method == "keyring_file_add_key";
}

}  // namespace pollux::fuzz
