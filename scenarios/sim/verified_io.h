// Verified I/O for lockstep tests over a fabric: random writes of versioned 4 KiB chunks at QD 8
// through one queue pair (each chunk's bytes say which chunk and version it is), then every
// chunk written read back and compared. A chunk whose write failed may hold the old or the new
// data and is not read back. Shared by the NVMe/TCP and NVMe/RDMA lockstep tests.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>

#include "driver/env/clock.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/qpair.h"

namespace pollux::sim {

struct VerifiedIo {
  static constexpr uint32_t kQd = 8, kNlb = 8, kChunk = kNlb * 512;
  static constexpr uint32_t kBlocks = 256, kIos = 600;
  static constexpr uint64_t kBufferBytes = (kQd + 1) * kChunk;  // kQd writes and one read

  // Completion context of one command.
  struct Ctx {
    int* outstanding;
    uint64_t* failed;
    bool done = false, ok = false;
    static void cb(void* ctx, const spec::nvme::CompletionEntry& c);
  };

  uint64_t verified = 0, failed = 0;
  uint64_t wrong = 0;    // reads that succeeded with the wrong data
  int outstanding = 0;   // commands not completed (so far)
  int writes_outstanding = 0;  // writes not completed when the write phase ended
  // Contexts of commands that may still be outstanding: keep this object until the queue pair
  // is freed (which fails them).
  std::deque<Ctx> contexts;
};

// Runs it. `buffers` holds VerifiedIo::kBufferBytes the transport can reach (registered memory
// for RDMA); `step` moves the world on once (poll the queue pair, the admin queue, the lockstep);
// writes stop at virtual 5 s, each read waits until 10 s at most.
void run_verified_io(VerifiedIo& out, nvme::Qpair& qp, const nvme::Namespace& ns,
                     uint8_t* buffers, uint64_t seed, const env::Clock& clock,
                     const std::function<void()>& step);

}  // namespace pollux::sim
