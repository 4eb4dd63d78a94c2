// Pollux's own NVMe/TCP host (the driver's controller through //fabric/tcp:host) for target
// tests: connect by transport ID, one I/O queue pair, DMA buffers, synchronous and batched I/O.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "driver/env/dma_memory.h"
#include "driver/nvme/connect.h"
#include "driver/nvme/controller.h"

namespace pollux::fabric::tcp::testing {

namespace sn = spec::nvme;

struct Host {
  explicit Host(const std::string& trid, uint32_t queue_size = 64,
                nvme::ControllerOptions options = {}) {
    auto id = nvme::parse_transport_id(trid);
    EXPECT_TRUE(id.ok());
    auto c = nvme::connect(*id, std::move(options));
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    if (!c.ok()) return;
    ctrl = std::move(c).value();
    nvme::QpairOptions qo;
    qo.queue_size = queue_size;
    auto q = ctrl->alloc_io_qpair(qo);
    EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().message);
    if (q.ok()) qp = std::move(q).value();
    ns = ctrl->ns(1);
    auto m = env::DmaRegion::create(env::MemoryRegistry::global(), 8 << 20);
    EXPECT_TRUE(m.ok());
    mem = std::move(m).value();
  }
  ~Host() {
    if (ctrl && qp) ctrl->free_io_qpair(std::move(qp));
  }
  bool ok() const { return ctrl && qp && ns; }
  uint8_t* buf(std::size_t offset = 0) { return static_cast<uint8_t*>(mem->data()) + offset; }

  struct Done {
    bool done = false;
    uint16_t status = 0;
  };
  static void on_done(void* ctx, const sn::CompletionEntry& c) {
    auto* d = static_cast<Done*>(ctx);
    d->done = true;
    d->status = c.status & 0xfffe;
  }
  // Polls until every Done in `ds` is set (10 s at most).
  bool wait(Done* ds, std::size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      std::size_t left = 0;
      for (std::size_t i = 0; i < n; ++i) left += ds[i].done ? 0 : 1;
      if (left == 0) return true;
      if (std::chrono::steady_clock::now() > end) return false;
      qp->process_completions();
    }
  }
  // A synchronous command; the status (0: success), or 0xffff on timeout / submission error.
  uint16_t io(bool write, void* b, uint64_t lba, uint32_t nlb) {
    Done d;
    const int rc =
        write ? qp->write(*ns, b, lba, nlb, on_done, &d) : qp->read(*ns, b, lba, nlb, on_done, &d);
    if (rc != 0) return 0xffff;
    return wait(&d, 1) ? d.status : 0xffff;
  }

  std::unique_ptr<nvme::Controller> ctrl;
  std::unique_ptr<nvme::Qpair> qp;
  const nvme::Namespace* ns = nullptr;
  std::unique_ptr<env::DmaRegion> mem;
};

inline void fill(uint8_t* p, std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < n; i += 4) {
    const uint32_t v = rng();
    std::memcpy(p + i, &v, std::min<std::size_t>(4, n - i));
  }
}

}  // namespace pollux::fabric::tcp::testing
