#include "emulator/rnic/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "spec/roce.h"

namespace pollux::emu::rnic {

Wire::Wire(uint64_t seed, WireFaults faults, uint64_t latency_ns)
    : seed_(seed), faults_(faults), latency_ns_(latency_ns), rng_(seed) {}

void Wire::attach(uint64_t address, WirePort* port) {
  ports_[address] = port;
}
void Wire::detach(uint64_t address) {
  ports_.erase(address);
}

bool Wire::chance(double p) {
  // Always draw, so one fault's probability does not shift the others' random sequence.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return u < p;
}

void Wire::transmit(uint64_t now_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                    std::size_t len) {
  const uint64_t index = send_index_++;
  ++stats_.sent;
  const bool lost = chance(faults_.loss);
  const bool corrupt = chance(faults_.corrupt);
  const bool dup = chance(faults_.duplicate);
  const bool late = chance(faults_.reorder);
  const uint64_t flip_at = rng_();
  const bool scripted =
      std::find(scripted_drops_.begin(), scripted_drops_.end(), index) != scripted_drops_.end() ||
      !link_up(src) || !link_up(dst);
  const char* fate = "ok";
  uint64_t fate_code = 0;  // for the decision hash: ok, drop, corrupt, late, corrupt+late
  if (scripted || lost) {
    ++stats_.dropped;
    fate = "drop";
    fate_code = 1;
  } else {
    std::vector<uint8_t> bytes(packet, packet + len);
    if (corrupt && len > 0) {
      bytes[flip_at % len] ^= 0x5a;
      ++stats_.corrupted;
      fate = "corrupt";
      fate_code = 2;
    }
    uint64_t at = now_ns + latency_ns_;
    if (late) {
      at += faults_.reorder_delay_ns;
      ++stats_.reordered;
      fate = corrupt ? "corrupt+late" : "late";
      fate_code = corrupt ? 4 : 3;
    }
    if (dup) {
      ++stats_.duplicated;
      enqueue(at, src, dst, bytes);
    }
    enqueue(at, src, dst, std::move(bytes));
  }
  const bool has_bth = len >= sizeof(spec::roce::Bth);
  const uint8_t opcode = has_bth ? packet[0] : 0xff;
  const uint32_t psn = has_bth ? spec::roce::load_be24(packet + 9) : 0;
  for (uint64_t v : {now_ns, src, dst, uint64_t{opcode} << 32 | psn, uint64_t{len},
                     fate_code | uint64_t{dup} << 8})
    decision_hash_ = (decision_hash_ ^ v) * 1099511628211ull;
  if (record_) {
    char line[128];
    std::snprintf(line, sizeof line, "t=%llu %llu->%llu op=0x%02x psn=%u len=%zu %s%s",
                  static_cast<unsigned long long>(now_ns), static_cast<unsigned long long>(src),
                  static_cast<unsigned long long>(dst), opcode, psn, len, fate, dup ? "+dup" : "");
    trace_.emplace_back(line);
  }
}

void Wire::enqueue(uint64_t at, uint64_t src, uint64_t dst, std::vector<uint8_t> bytes) {
  in_flight_.emplace(Key{at, next_seq_++}, Frame{src, dst, std::move(bytes)});
}

std::size_t Wire::deliver_until(uint64_t t_ns) {
  std::size_t n = 0;
  while (!in_flight_.empty() && in_flight_.begin()->first.first <= t_ns) {
    auto node = in_flight_.extract(in_flight_.begin());
    const Frame& f = node.mapped();
    auto port = ports_.find(f.dst);
    if (port == ports_.end()) {
      ++stats_.dropped;
      continue;
    }
    // FNV-1a-like over 64-bit words (the bytes of a packet eight at a time).
    auto mix = [this](uint64_t v) { trace_hash_ = (trace_hash_ ^ v) * 1099511628211ull; };
    mix(node.key().first);
    mix(f.src);
    mix(f.dst);
    mix(f.bytes.size());
    std::size_t i = 0;
    for (; i + 8 <= f.bytes.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, f.bytes.data() + i, 8);
      mix(w);
    }
    for (; i < f.bytes.size(); ++i) mix(f.bytes[i]);
    ++stats_.delivered;
    ++n;
    port->second->receive(f.src, f.bytes.data(), f.bytes.size());
  }
  return n;
}

void Wire::set_link_up(uint64_t address, bool up) {
  auto it = std::find(links_down_.begin(), links_down_.end(), address);
  if (up && it != links_down_.end()) links_down_.erase(it);
  if (!up && it == links_down_.end()) links_down_.push_back(address);
}

bool Wire::link_up(uint64_t address) const {
  return std::find(links_down_.begin(), links_down_.end(), address) == links_down_.end();
}

uint64_t Wire::next_event_ns() const {
  return in_flight_.empty() ? UINT64_MAX : in_flight_.begin()->first.first;
}

}  // namespace pollux::emu::rnic
