// NandArray: busy-until reservations per die, a timeline per channel; the read latency
// model (die spread, jitter, retries), page-register hits and program/erase suspend.
#include "emulator/timing/nand.h"

#include <algorithm>
#include <cmath>

namespace pollux::emu::timing {

NandArray::NandArray(const NandGeometry& g, const NandTiming& t)
    : g_(g),
      t_(t),
      die_busy_(size_t(g.channels) * g.dies_per_channel, 0),
      die_tr_(size_t(g.channels) * g.dies_per_channel, t.t_read),
      die_op_(size_t(g.channels) * g.dies_per_channel, Op::kIdle),
      die_op_begin_(size_t(g.channels) * g.dies_per_channel, 0),
      register_(size_t(g.channels) * g.dies_per_channel),
      suspended_sense_end_(size_t(g.channels) * g.dies_per_channel, 0),
      rng_state_(t.seed),
      channels_(g.channels),
      die_booked_(size_t(g.channels) * g.dies_per_channel, 0),
      channel_booked_(g.channels, 0) {
  for (uint32_t n = 0; n <= g.planes_per_die; ++n)
    program_xfer_.push_back(transfer_time(uint64_t(g.page_bytes) * n, t.channel_bytes_per_second));
  if (t.t_read_die_spread > 0) {
    for (SimTime& tr : die_tr_) {
      // Box-Muller by hand: the same seed gives the same dies with any standard library.
      const double u1 = 1.0 - uniform();  // (0, 1]
      const double u2 = uniform();
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      const double f = std::clamp(1.0 + z * t.t_read_die_spread, 0.5, 1.5);
      tr = static_cast<SimTime>(std::llround(double(t.t_read) * f));
    }
  }
}

uint64_t NandArray::next_random() {  // splitmix64
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double NandArray::uniform() {
  return double(next_random() >> 11) * 0x1.0p-53;
}  // [0, 1)

SimTime NandArray::sense_time(size_t d) {
  SimTime tr = die_tr_[d];
  if (t_.t_read_jitter != 0) {
    tr += static_cast<SimTime>(-double(t_.t_read_jitter) * std::log(1.0 - uniform()));
  }
  if (t_.read_retry_rate > 0 && uniform() < t_.read_retry_rate) {
    tr += SimTime{t_.read_retry_steps} * die_tr_[d];
    ++retries_;
  }
  return tr;
}

void NandArray::book_array_op(size_t d, Op op, SimTime begin, SimTime end) {
  die_op_[d] = op;
  die_op_begin_[d] = begin;
  die_busy_[d] = end;
  if (op != Op::kRead) register_[d].valid = false;  // the register carried program data
}

SimTime NandArray::book_sense(size_t d, SimTime start, uint32_t block, uint32_t page) {
  const SimTime tr = sense_time(d);
  SimTime sensed;
  const bool busy_writing = die_op_[d] == Op::kProgram || die_op_[d] == Op::kErase;
  if (t_.suspend && busy_writing && start < die_busy_[d]) {
    // Suspend the program/erase booked last (once it has begun), sense, resume it: it ends
    // later by the read's time. Its completion time was already reported to its caller; the
    // delay shows on whatever the die does next.
    const SimTime begin =
        std::max({start, die_op_begin_[d], suspended_sense_end_[d]}) + t_.t_suspend;
    sensed = begin + tr;
    suspended_sense_end_[d] = sensed;  // reads during one suspension go one after another
    die_busy_[d] += t_.t_suspend + tr + t_.t_resume;
    ++suspends_;
  } else {
    sensed = std::max(start, die_busy_[d]) + tr;
    book_array_op(d, Op::kRead, sensed - tr, sensed);
  }
  die_booked_[d] += tr;
  register_[d] = Register{true, block, page, sensed};
  return sensed;
}

SimTime NandArray::read(SimTime start, const PhysPage& p, uint32_t bytes) {
  const size_t d = die_index(p.channel, p.die);
  const Register& r = register_[d];
  SimTime sensed;
  if (t_.register_hits && r.valid && r.block == p.block && r.page == p.page) {
    sensed = std::max(start, r.ready);  // already in the register: transfer only
    ++register_hits_;
  } else {
    sensed = book_sense(d, start, p.block, p.page);
  }
  // Reads are nearly always one mapping unit: remember the last size's transfer time rather
  // than dividing 128-bit numbers on every call.
  if (bytes != read_xfer_bytes_) {
    read_xfer_bytes_ = bytes;
    read_xfer_time_ = transfer_time(bytes, t_.channel_bytes_per_second);
  }
  const SimTime done =
      channels_[p.channel].reserve(now_, sensed, t_.command_overhead + read_xfer_time_);
  channel_booked_[p.channel] += t_.command_overhead + read_xfer_time_;
  ++reads_;
  return done;
}

SimTime NandArray::sense(SimTime start, const PhysPage& p) {
  const size_t d = die_index(p.channel, p.die);
  const Register& r = register_[d];
  if (r.valid && r.block == p.block && r.page == p.page) return std::max(start, r.ready);
  return book_sense(d, start, p.block, p.page);
}

SimTime NandArray::program(SimTime start, const PhysPage& p, uint32_t planes, SimTime t_prog) {
  const size_t d = die_index(p.channel, p.die);
  if (t_prog == 0) t_prog = t_.t_prog;
  const SimTime xfer =
      planes < program_xfer_.size()
          ? program_xfer_[planes]
          : transfer_time(uint64_t(g_.page_bytes) * planes, t_.channel_bytes_per_second);
  const SimTime loaded = channels_[p.channel].reserve(now_, start, t_.command_overhead + xfer);
  // The data is loaded before the die is free if it is still busy: the controller streams
  // into the cache register while the array finishes the previous operation.
  const SimTime begin = std::max(loaded, die_busy_[d]);
  const SimTime done = begin + t_prog;
  book_array_op(d, Op::kProgram, begin, done);
  die_booked_[d] += t_prog;
  channel_booked_[p.channel] += t_.command_overhead + xfer;
  ++programs_;
  return done;
}

SimTime NandArray::erase(SimTime start, uint32_t channel, uint32_t die, uint32_t /*plane*/,
                         uint32_t /*block*/, uint32_t /*planes*/) {
  const size_t d = die_index(channel, die);
  SimTime issued = start;
  if (t_.command_overhead != 0) {  // only the command cycles use the bus
    issued = channels_[channel].reserve(now_, start, t_.command_overhead);
  }
  const SimTime begin = std::max(issued, die_busy_[d]);
  book_array_op(d, Op::kErase, begin, begin + t_.t_erase);
  die_booked_[d] += t_.t_erase;
  channel_booked_[channel] += t_.command_overhead;
  ++erases_;
  return die_busy_[d];
}

SimTime NandArray::die_free_at(uint32_t channel, uint32_t die) const {
  return die_busy_[die_index(channel, die)];
}

bool SlcCache::admit(SimTime start, uint64_t bytes) {
  if (capacity_ == 0) return false;
  // Idle time beyond fold_after_ since the last program folded SLC data into TLC.
  if (used_ != 0 && start > busy_until_ + fold_after_) {
    const SimTime idle = start - busy_until_ - fold_after_;
    const auto can =
        static_cast<uint64_t>((static_cast<unsigned __int128>(idle) * fold_rate_) / kSec);
    const uint64_t folded = std::min(used_, can);
    used_ -= folded;
    folded_ += folded;
  }
  if (used_ + bytes > capacity_) {
    ++tlc_programs_;
    return false;
  }
  used_ += bytes;
  ++slc_programs_;
  return true;
}

}  // namespace pollux::emu::timing
