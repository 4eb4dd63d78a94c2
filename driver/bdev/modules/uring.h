// bdev_uring: a file or block device through io_uring. Each thread that uses the bdev gets a
// channel with its own ring and an active poller; submit() only fills SQEs, and the poller
// makes one io_uring_enter per iteration (io_uring_submit of everything prepared since), then
// reaps the CQEs it finds without a syscall.
//
// I/O: read/write → READV/WRITEV, flush → FSYNC, unmap → fallocate(PUNCH_HOLE|KEEP_SIZE)
// (reads back zeros; fails with kFailed where the file system or device refuses), reset →
// nothing to reset (completes at once: the layer has already quiesced the channels).
// A full ring completes kNoMemory (the bdev layer retries). A short transfer fails the I/O.
#pragma once

#include <string>

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

struct UringOptions {
  std::string name;
  std::string filename;      // regular file or block device
  uint32_t block_size = 0;   // 0: 512 for files, the logical block size for block devices
  uint64_t num_blocks = 0;   // 0: the file's size; else a shorter regular file is extended
  uint32_t queue_depth = 128;  // ring entries per channel (I/O in flight per thread)
  bool direct = false;       // O_DIRECT (buffers and offsets then need block alignment)
};

// Opens the file and registers the bdev (product "URING bdev"). Any framework thread.
Result<Bdev*> create_uring_bdev(Manager& mgr, const UringOptions& options);
// Unregisters it (descriptors get kRemove); the file is closed once every descriptor closed
// and done(ctx) runs on the calling thread. -ENODEV if unknown or not a uring bdev.
int delete_uring_bdev(Manager& mgr, const std::string& name, event::MsgFn done = nullptr,
                      void* ctx = nullptr);

}  // namespace pollux::bdev
