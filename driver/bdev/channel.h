// Per-(thread, bdev) channel state. Internal to the bdev layer.
#pragma once

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

struct Channel {
  Manager* mgr = nullptr;
  Bdev* bdev = nullptr;
  event::Thread* thread = nullptr;
  event::IoChannel* module_ch = nullptr;
  void* module_ctx = nullptr;
  IoStats stats;
  BdevIo* free = nullptr;  // cache of bdev_io over the manager's pool
  std::size_t free_count = 0;
  BdevIo* wait_head = nullptr;  // waiting: channel frozen by a reset, QoS, or module ENOMEM
  BdevIo* wait_tail = nullptr;
  bool frozen = false;
  uint32_t outstanding = 0;
  // Completions that happened inside a submission wait here for the channel poller, so a
  // callback that submits again never recurses (a module may complete inside submit()).
  uint32_t in_submit = 0;
  BdevIo* done_head = nullptr;
  BdevIo* done_tail = nullptr;
  event::Poller* poller = nullptr;

  void enqueue(BdevIo* io) {
    io->next_ = nullptr;
    if (wait_tail) wait_tail->next_ = io; else wait_head = io;
    wait_tail = io;
  }
  BdevIo* dequeue() {
    BdevIo* io = wait_head;
    if (io) {
      wait_head = io->next_;
      if (!wait_head) wait_tail = nullptr;
    }
    return io;
  }
};

}  // namespace pollux::bdev
