#include "emulator/rnic/network.h"

#include <algorithm>

namespace pollux::emu::rnic {

namespace {
constexpr uint64_t kPauseFrameBytes = 64 + 20;  // a PFC frame with preamble and gap
}

Network::Network(const NicProfile& profile, Sink* sink)
    : p_(profile),
      sink_(sink),
      pause_delay_(profile.port.propagation +
                   timing::transfer_time(kPauseFrameBytes,
                                         uint64_t{profile.port.rate_gbps} * 125'000'000)) {}

void Network::add_port(uint64_t address) {
  if (index_.count(address)) return;
  index_[address] = static_cast<uint32_t>(ports_.size());
  NicPort port;
  port.address = address;
  ports_.push_back(std::move(port));
}

uint32_t Network::port_index(uint64_t address) const {
  auto it = index_.find(address);
  return it == index_.end() ? UINT32_MAX : it->second;
}

uint32_t Network::queued(uint64_t address) const {
  const uint32_t i = port_index(address);
  return i == UINT32_MAX ? 0 : static_cast<uint32_t>(ports_[i].egress.size());
}

bool Network::paused(uint64_t address) const {
  const uint32_t i = port_index(address);
  return i != UINT32_MAX && ports_[i].paused;
}

uint32_t Network::new_frame() {
  if (!free_frames_.empty()) {
    const uint32_t f = free_frames_.back();
    free_frames_.pop_back();
    return f;
  }
  frames_.emplace_back();
  return static_cast<uint32_t>(frames_.size() - 1);
}

void Network::free_frame(uint32_t f) {
  frames_[f].bytes.clear();  // keeps the capacity for the next frame
  free_frames_.push_back(f);
}

void Network::schedule(SimTime t, Kind k, uint32_t port, uint32_t frame) {
  events_.push(Event{t, next_seq_++, k, port, frame});
}

void Network::schedule_start(uint32_t port, SimTime t) {
  NicPort& p = ports_[port];
  t = std::max(t, now_);
  if (p.start_scheduled != UINT64_MAX && p.start_scheduled >= now_ && p.start_scheduled <= t)
    return;  // an earlier start is already due and will look again
  p.start_scheduled = t;
  schedule(t, Kind::kTxStart, port, 0);
}

void Network::send(SimTime ready, uint64_t src, uint64_t dst, const uint8_t* bytes,
                   std::size_t len) {
  const uint32_t port = port_index(src);
  if (port == UINT32_MAX) return;  // a sender that is not attached sends nothing
  const uint32_t f = new_frame();
  Frame& fr = frames_[f];
  fr.src = src;
  fr.dst = dst;
  fr.bytes.assign(bytes, bytes + len);
  fr.ready = std::max(ready, now_);
  fr.extra_delay = 0;
  fr.seq = next_seq_++;
  fr.in_port = port;
  NicPort& p = ports_[port];
  p.egress.push_back(f);
  std::push_heap(p.egress.begin(), p.egress.end(), ByReady{&frames_});
  if (!p.paused) schedule_start(port, std::max(fr.ready, p.busy_until));
}

void Network::try_start(uint32_t port) {
  NicPort& p = ports_[port];
  if (p.paused || p.egress.empty()) return;
  if (p.busy_until > now_) {
    schedule_start(port, p.busy_until);
    return;
  }
  const uint32_t f = p.egress.front();
  if (frames_[f].ready > now_) {
    schedule_start(port, frames_[f].ready);
    return;
  }
  std::pop_heap(p.egress.begin(), p.egress.end(), ByReady{&frames_});
  p.egress.pop_back();
  const SimTime end = now_ + ser(frames_[f]);
  p.busy_until = end;
  ++stats_.frames;
  stats_.bytes += frame_bytes(frames_[f]);
  const Sink::Fate fate = sink_->depart(now_, frames_[f]);
  if (fate.lost) {
    free_frame(f);
  } else {
    uint32_t copies[2] = {f, UINT32_MAX};
    if (fate.duplicate) {
      copies[1] = new_frame();
      frames_[copies[1]] = frames_[f];
      frames_[copies[1]].seq = next_seq_++;
    }
    for (uint32_t c : copies) {
      if (c == UINT32_MAX) continue;
      frames_[c].extra_delay = fate.delay;
      if (p_.sw.present) {
        // Cut-through: the switch may forward once the header is in; store-and-forward: once
        // the whole frame is.
        const SimTime in = (p_.sw.cut_through ? now_ : end) + p_.port.propagation + fate.delay +
                           p_.sw.port_latency;
        schedule(in, Kind::kSwitchIn, 0, c);
      } else {
        schedule(end + p_.port.propagation + fate.delay, Kind::kDeliver, 0, c);
      }
    }
  }
  if (!p.egress.empty()) schedule_start(port, end);
}

void Network::switch_in(uint32_t f) {
  Frame& fr = frames_[f];
  const uint32_t out = port_index(fr.dst);
  if (out == UINT32_MAX) {  // nobody there: the sink counts it
    sink_->arrive(now_, fr);
    free_frame(f);
    return;
  }
  NicPort& in = ports_[fr.in_port];
  const uint64_t size = frame_bytes(fr);
  if (!p_.sw.pfc && in.ingress_bytes + size > p_.sw.buffer_bytes) {
    ++stats_.buffer_drops;  // tail drop: the transport's retransmission recovers it
    free_frame(f);
    return;
  }
  in.ingress_bytes += size;
  stats_.max_buffered = std::max(stats_.max_buffered, in.ingress_bytes);
  if (p_.sw.pfc && in.ingress_bytes > p_.sw.buffer_bytes) ++stats_.headroom_exceeded;
  if (p_.sw.pfc && !in.xoff_sent && in.ingress_bytes > p_.sw.xoff_bytes) {
    in.xoff_sent = true;
    ++stats_.pause_frames;
    schedule(now_ + pause_delay_, Kind::kPause, fr.in_port, 0);
  }
  NicPort& o = ports_[out];
  o.sw_egress.push(f);
  if (!o.sw_busy) switch_start(out);
}

void Network::switch_start(uint32_t out) {
  NicPort& o = ports_[out];
  const uint32_t f = o.sw_egress.front();
  o.sw_egress.pop();
  o.sw_busy = true;
  schedule(now_ + ser(frames_[f]), Kind::kSwitchTxDone, out, f);
}

void Network::switch_done(uint32_t out, uint32_t f) {
  Frame& fr = frames_[f];
  NicPort& in = ports_[fr.in_port];
  in.ingress_bytes -= frame_bytes(fr);
  if (in.xoff_sent && in.ingress_bytes <= p_.sw.xon_bytes) {
    in.xoff_sent = false;
    ++stats_.resume_frames;
    schedule(now_ + pause_delay_, Kind::kResume, fr.in_port, 0);
  }
  schedule(now_ + p_.port.propagation, Kind::kDeliver, 0, f);
  NicPort& o = ports_[out];
  if (!o.sw_egress.empty()) {
    switch_start(out);
  } else {
    o.sw_busy = false;
  }
}

std::size_t Network::run_until(SimTime t) {
  std::size_t n = 0;
  while (!events_.empty() && events_.top().t <= t) {
    const Event e = events_.top();
    events_.pop();
    now_ = std::max(now_, e.t);
    ++n;
    switch (e.kind) {
      case Kind::kTxStart:
        if (ports_[e.port].start_scheduled == e.t) ports_[e.port].start_scheduled = UINT64_MAX;
        try_start(e.port);
        break;
      case Kind::kSwitchIn:
        switch_in(e.frame);
        break;
      case Kind::kSwitchTxDone:
        switch_done(e.port, e.frame);
        break;
      case Kind::kPause: {
        NicPort& p = ports_[e.port];
        if (!p.paused) {
          p.paused = true;
          p.paused_since = now_;
        }
        break;
      }
      case Kind::kResume: {
        NicPort& p = ports_[e.port];
        if (p.paused) {
          p.paused = false;
          stats_.paused_ps += now_ - p.paused_since;
          schedule_start(e.port, now_);
        }
        break;
      }
      case Kind::kDeliver:
        sink_->arrive(now_, frames_[e.frame]);
        free_frame(e.frame);
        break;
    }
  }
  return n;
}

SimTime Network::next_event() const {
  return events_.empty() ? UINT64_MAX : events_.top().t;
}

}  // namespace pollux::emu::rnic
