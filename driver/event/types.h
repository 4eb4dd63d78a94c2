// Callback shapes of the event framework: plain function pointer + context, no allocation.
#pragma once

#include <cstdint>

namespace pollux::event {

enum class PollStatus : int { kIdle = 0, kBusy = 1 };

using MsgFn = void (*)(void* arg);
using PollerFn = PollStatus (*)(void* arg);

struct Message {
  MsgFn fn = nullptr;
  void* arg = nullptr;
};

class Framework;
class Reactor;
class Thread;
class Poller;
class IoChannel;

}  // namespace pollux::event
