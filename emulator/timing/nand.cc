// NandArray: busy-until reservations per die, a timeline per channel.
#include <algorithm>

#include "emulator/timing/nand.h"

namespace pollux::emu::timing {

NandArray::NandArray(const NandGeometry& g, const NandTiming& t)
    : g_(g),
      t_(t),
      die_busy_(size_t(g.channels) * g.dies_per_channel, 0),
      channels_(g.channels),
      die_booked_(size_t(g.channels) * g.dies_per_channel, 0),
      channel_booked_(g.channels, 0) {
  for (uint32_t n = 0; n <= g.planes_per_die; ++n)
    program_xfer_.push_back(transfer_time(uint64_t(g.page_bytes) * n, t.channel_bytes_per_second));
}

SimTime NandArray::read(SimTime start, const PhysPage& p, uint32_t bytes) {
  SimTime& die = die_busy_[size_t(p.channel) * g_.dies_per_channel + p.die];
  const SimTime sensed = std::max(start, die) + t_.t_read;
  die = sensed;
  // Reads are nearly always one mapping unit: remember the last size's transfer time rather
  // than dividing 128-bit numbers on every call.
  if (bytes != read_xfer_bytes_) {
    read_xfer_bytes_ = bytes;
    read_xfer_time_ = transfer_time(bytes, t_.channel_bytes_per_second);
  }
  const SimTime done =
      channels_[p.channel].reserve(now_, sensed, t_.command_overhead + read_xfer_time_);
  die_booked_[size_t(p.channel) * g_.dies_per_channel + p.die] += t_.t_read;
  channel_booked_[p.channel] += t_.command_overhead + read_xfer_time_;
  ++reads_;
  return done;
}

SimTime NandArray::program(SimTime start, const PhysPage& p, uint32_t planes) {
  SimTime& die = die_busy_[size_t(p.channel) * g_.dies_per_channel + p.die];
  const SimTime xfer =
      planes < program_xfer_.size()
          ? program_xfer_[planes]
          : transfer_time(uint64_t(g_.page_bytes) * planes, t_.channel_bytes_per_second);
  const SimTime loaded = channels_[p.channel].reserve(now_, start, t_.command_overhead + xfer);
  // The data is loaded before the die is free if it is still busy: the controller streams
  // into the cache register while the array finishes the previous operation.
  const SimTime done = std::max(loaded, die) + t_.t_prog;
  die = done;
  die_booked_[size_t(p.channel) * g_.dies_per_channel + p.die] += t_.t_prog;
  channel_booked_[p.channel] += t_.command_overhead + xfer;
  ++programs_;
  return done;
}

SimTime NandArray::erase(SimTime start, uint32_t channel, uint32_t die, uint32_t /*plane*/,
                         uint32_t /*block*/, uint32_t /*planes*/) {
  SimTime& d = die_busy_[size_t(channel) * g_.dies_per_channel + die];
  SimTime issued = start;
  if (t_.command_overhead != 0) {  // only the command cycles use the bus
    issued = channels_[channel].reserve(now_, start, t_.command_overhead);
  }
  d = std::max(issued, d) + t_.t_erase;
  die_booked_[size_t(channel) * g_.dies_per_channel + die] += t_.t_erase;
  channel_booked_[channel] += t_.command_overhead;
  ++erases_;
  return d;
}

SimTime NandArray::die_free_at(uint32_t channel, uint32_t die) const {
  return die_busy_[size_t(channel) * g_.dies_per_channel + die];
}

}  // namespace pollux::emu::timing
