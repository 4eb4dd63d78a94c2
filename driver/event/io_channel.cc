#include "driver/event/io_channel.h"

#include <algorithm>
#include <new>

#include "driver/event/framework.h"
#include "driver/event/thread.h"

namespace pollux::event {

// Channel contexts are cache-line aligned: they hold per-thread hot state (qpairs, counters).
static constexpr std::align_val_t kCtxAlign{64};

void* IoChannel::io_device() const { return device_->io_device; }

void IoChannel::destroy_deferred(void* arg) {
  auto* ch = static_cast<IoChannel*>(arg);
  ch->destroy_pending_ = false;
  if (ch->refs_ == 0) ch->destroy();  // not taken again since the last put
}

void IoChannel::destroy_leaked(IoChannel* ch) {
  ch->thread_->framework().leaked_channels_.fetch_add(1, std::memory_order_relaxed);
  ch->destroy();
}

void IoChannel::destroy() {
  auto& list = thread_->channels_;
  list.erase(std::find(list.begin(), list.end(), this));
  device_->destroy(device_->io_device, ctx_);
  ::operator delete(ctx_, kCtxAlign);
  thread_->framework().release_device_channel(device_);
  delete this;
}

void ChannelIter::next(int status) {
  status_ = status;
  ++index_;
  fw_->channel_iter_step(this);
}

}  // namespace pollux::event
