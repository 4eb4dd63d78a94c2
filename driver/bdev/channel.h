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
  BdevIo* submitted = nullptr;  // every I/O given to the channel and not yet released
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
    io->queued_ = true;
    if (wait_tail) wait_tail->next_ = io; else wait_head = io;
    wait_tail = io;
  }
  BdevIo* dequeue() {
    BdevIo* io = wait_head;
    if (io) {
      wait_head = io->next_;
      if (!wait_head) wait_tail = nullptr;
      io->queued_ = false;
    }
    return io;
  }
  // Takes io out of the waiting queue, wherever it is (an abort; not the hot path).
  void unqueue(BdevIo* io) {
    BdevIo* prev = nullptr;
    for (BdevIo* it = wait_head; it != nullptr; prev = it, it = it->next_) {
      if (it != io) continue;
      (prev ? prev->next_ : wait_head) = io->next_;
      if (wait_tail == io) wait_tail = prev;
      io->queued_ = false;
      return;
    }
  }
  void link(BdevIo* io) {
    io->abort_requested_ = false;
    io->abort_told_ = false;
    io->sub_prev_ = nullptr;
    io->sub_next_ = submitted;
    if (submitted) submitted->sub_prev_ = io;
    submitted = io;
    io->linked_ = true;
  }
  void unlink(BdevIo* io) {
    if (!io->linked_) return;
    (io->sub_prev_ ? io->sub_prev_->sub_next_ : submitted) = io->sub_next_;
    if (io->sub_next_) io->sub_next_->sub_prev_ = io->sub_prev_;
    io->linked_ = false;
  }
};

}  // namespace pollux::bdev
