// I/O channels: per-(thread, io_device) context, created lazily on first get and reference
// counted. A device's channels are how a device-wide operation (a reset) reaches every thread
// using it: for_each_channel visits them one thread after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "driver/event/types.h"

namespace pollux::event {

// Called on the channel's thread. create returns 0 or a negative errno.
using ChannelCreateFn = int (*)(void* io_device, void* ctx);
using ChannelDestroyFn = void (*)(void* io_device, void* ctx);

class IoChannel {
 public:
  // A registered io_device (internal to the framework).
  struct Device {
    void* io_device;
    ChannelCreateFn create;
    ChannelDestroyFn destroy;
    std::size_t ctx_size;
    std::string name;
    uint32_t channels = 0;  // guarded by the framework's mutex
    bool unregistering = false;
    Thread* unregister_thread = nullptr;
    MsgFn unregister_done = nullptr;
    void* unregister_ctx = nullptr;
  };

  void* ctx() { return ctx_; }
  void* io_device() const;
  Thread* thread() const { return thread_; }
  uint32_t refs() const { return refs_; }

 private:
  friend class Framework;
  friend class Thread;
  IoChannel(Thread* t, Device* d) : thread_(t), device_(d) {}
  static void destroy_deferred(void* arg);
  static void destroy_leaked(IoChannel* ch);
  void destroy();

  Thread* thread_;
  Device* device_;
  uint32_t refs_ = 1;
  bool destroy_pending_ = false;
  void* ctx_ = nullptr;
};

// Handed to each step of Framework::for_each_channel; the step calls next() when done with
// its channel (possibly later, from the same thread, after asynchronous work).
class ChannelIter {
 public:
  IoChannel* channel() const { return channel_; }
  void* ctx() const { return ctx_; }
  // Moves on to the next thread; a non-zero status stops the walk and reaches the done callback.
  void next(int status);

 private:
  friend class Framework;
  Framework* fw_ = nullptr;
  void* io_device_ = nullptr;
  void (*fn_)(ChannelIter&) = nullptr;
  void* ctx_ = nullptr;
  void (*done_)(void* ctx, int status) = nullptr;
  Thread* origin_ = nullptr;
  std::size_t index_ = 0;
  IoChannel* channel_ = nullptr;
  int status_ = 0;
};

using ChannelIterFn = void (*)(ChannelIter& it);
using ChannelIterDoneFn = void (*)(void* ctx, int status);

}  // namespace pollux::event
