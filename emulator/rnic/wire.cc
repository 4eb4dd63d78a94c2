#include "emulator/rnic/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "spec/roce.h"

namespace pollux::emu::rnic {

Wire::Wire(uint64_t seed, WireFaults faults, uint64_t latency_ns)
    : seed_(seed), faults_(faults), latency_ns_(latency_ns), rng_(seed) {}

Wire::~Wire() = default;

void Wire::enable_timing(const NicProfile& profile) {
  network_ = std::make_unique<Network>(profile, static_cast<Network::Sink*>(this));
  for (const auto& [address, port] : ports_) network_->add_port(address);
}

void Wire::attach(uint64_t address, WirePort* port) {
  ports_[address] = port;
  if (network_) network_->add_port(address);
}
void Wire::detach(uint64_t address) {
  ports_.erase(address);
}

void Wire::set_faults(const WireFaults& f) {
  if (f.flap_interval_ns != faults_.flap_interval_ns || f.flap_down_ns != faults_.flap_down_ns)
    flaps_.clear();  // a new schedule (still a function of the seed and the time alone)
  faults_ = f;
}

bool Wire::chance(double p) {
  // Always draw, so one fault's probability does not shift the others' random sequence.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return u < p;
}

bool Wire::flapping(uint64_t address, uint64_t t_ns) {
  if (faults_.flap_interval_ns == 0 || faults_.flap_down_ns == 0) return false;
  auto it = flaps_.find(address);
  const double rate = 1.0 / static_cast<double>(faults_.flap_interval_ns);
  auto up_time = [rate](std::mt19937_64& g) {
    return static_cast<uint64_t>(std::exponential_distribution<double>(rate)(g)) + 1;
  };
  if (it == flaps_.end()) {
    // Each port's schedule has a generator of its own: flaps do not shift the packet faults'
    // draws, and one port's schedule does not depend on when another was first looked at.
    Flaps f{std::mt19937_64(seed_ ^ (address * 0x9e3779b97f4a7c15ull)), 0, 0};
    f.down_start = up_time(f.rng);
    f.down_end = f.down_start + faults_.flap_down_ns;
    it = flaps_.emplace(address, std::move(f)).first;
  }
  Flaps& f = it->second;
  while (t_ns >= f.down_end) {
    f.down_start = f.down_end + up_time(f.rng);
    f.down_end = f.down_start + faults_.flap_down_ns;
  }
  return t_ns >= f.down_start;
}

Wire::Decision Wire::decide(uint64_t t_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                            std::size_t len) {
  const uint64_t index = send_index_++;
  ++stats_.sent;
  Decision d;
  const bool lost = chance(faults_.loss);
  const bool corrupt = chance(faults_.corrupt);
  d.duplicate = chance(faults_.duplicate);
  d.late = chance(faults_.reorder);
  const uint64_t flip_at = rng_();
  auto in_side = [this](uint64_t a) {
    return std::find(partition_.begin(), partition_.end(), a) != partition_.end();
  };
  const bool down = !link_up(src) || !link_up(dst) || flapping(src, t_ns) ||
                    flapping(dst, t_ns) || (!partition_.empty() && in_side(src) != in_side(dst));
  const bool scripted =
      std::find(scripted_drops_.begin(), scripted_drops_.end(), index) != scripted_drops_.end();
  const char* fate = "ok";
  uint64_t fate_code = 0;  // for the decision hash: ok, drop, corrupt, late, corrupt+late
  if (scripted || down || lost) {
    d.lost = true;
    d.duplicate = d.late = false;
    ++stats_.dropped;
    fate = "drop";
    fate_code = 1;
  } else {
    if (corrupt && len > 0) {
      d.corrupt_at = static_cast<int64_t>(flip_at % len);
      ++stats_.corrupted;
      fate = "corrupt";
      fate_code = 2;
    }
    if (d.late) {
      ++stats_.reordered;
      fate = corrupt ? "corrupt+late" : "late";
      fate_code = corrupt ? 4 : 3;
    }
    if (d.duplicate) ++stats_.duplicated;
  }
  const bool has_bth = len >= sizeof(spec::roce::Bth);
  const uint8_t opcode = has_bth ? packet[0] : 0xff;
  const uint32_t psn = has_bth ? spec::roce::load_be24(packet + 9) : 0;
  for (uint64_t v : {t_ns, src, dst, uint64_t{opcode} << 32 | psn, uint64_t{len},
                     fate_code | uint64_t{d.duplicate} << 8})
    decision_hash_ = (decision_hash_ ^ v) * 1099511628211ull;
  if (record_) {
    char line[128];
    std::snprintf(line, sizeof line, "t=%llu %llu->%llu op=0x%02x psn=%u len=%zu %s%s",
                  static_cast<unsigned long long>(t_ns), static_cast<unsigned long long>(src),
                  static_cast<unsigned long long>(dst), opcode, psn, len, fate,
                  d.duplicate ? "+dup" : "");
    trace_.emplace_back(line);
  }
  return d;
}

void Wire::transmit(uint64_t now_ns, uint64_t src, uint64_t dst, const uint8_t* packet,
                    std::size_t len) {
  if (network_) {
    transmit_at(now_ns * 1000, src, dst, packet, len);
    return;
  }
  const Decision d = decide(now_ns, src, dst, packet, len);
  if (d.lost) return;
  std::vector<uint8_t> bytes(packet, packet + len);
  if (d.corrupt_at >= 0) bytes[static_cast<std::size_t>(d.corrupt_at)] ^= 0x5a;
  uint64_t at = now_ns + latency_ns_;
  if (d.late) at += faults_.reorder_delay_ns;
  if (d.duplicate) enqueue(at, src, dst, bytes);
  enqueue(at, src, dst, std::move(bytes));
}

void Wire::transmit_at(uint64_t ready_ps, uint64_t src, uint64_t dst, const uint8_t* packet,
                       std::size_t len) {
  if (!network_) {
    transmit((ready_ps + 999) / 1000, src, dst, packet, len);
    return;
  }
  network_->send(ready_ps, src, dst, packet, len);
}

Wire::Fate Wire::depart(SimTime t, Network::Frame& f) {
  const Decision d = decide(t / 1000, f.src, f.dst, f.bytes.data(), f.bytes.size());
  if (!d.lost && d.corrupt_at >= 0) f.bytes[static_cast<std::size_t>(d.corrupt_at)] ^= 0x5a;
  return Fate{d.lost, d.duplicate, d.late ? faults_.reorder_delay_ns * 1000 : 0};
}

void Wire::arrive(SimTime t, Network::Frame& f) {
  deliver(t, f.src, f.dst, f.bytes.data(), f.bytes.size());
}

void Wire::enqueue(uint64_t at, uint64_t src, uint64_t dst, std::vector<uint8_t> bytes) {
  in_flight_.emplace(Key{at, next_seq_++}, Frame{src, dst, std::move(bytes)});
}

std::size_t Wire::deliver_until(uint64_t t_ns) {
  if (network_) return network_->run_until(t_ns >= UINT64_MAX / 1000 ? UINT64_MAX : t_ns * 1000);
  std::size_t n = 0;
  while (!in_flight_.empty() && in_flight_.begin()->first.first <= t_ns) {
    auto node = in_flight_.extract(in_flight_.begin());
    const Frame& f = node.mapped();
    n += deliver(node.key().first * 1000, f.src, f.dst, f.bytes.data(), f.bytes.size());
  }
  return n;
}

bool Wire::deliver(uint64_t t_ps, uint64_t src, uint64_t dst, const uint8_t* bytes,
                   std::size_t len) {
  auto port = ports_.find(dst);
  if (port == ports_.end()) {
    ++stats_.dropped;
    return false;
  }
  // FNV-1a-like over 64-bit words (the bytes of a packet eight at a time). Untimed wires hash
  // the nanosecond (as they always did); timed ones the picosecond.
  auto mix = [this](uint64_t v) { trace_hash_ = (trace_hash_ ^ v) * 1099511628211ull; };
  mix(network_ ? t_ps : t_ps / 1000);
  mix(src);
  mix(dst);
  mix(len);
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    mix(w);
  }
  for (; i < len; ++i) mix(bytes[i]);
  ++stats_.delivered;
  delivery_ps_ = t_ps;
  port->second->receive(src, bytes, len);
  return true;
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
  if (network_) {
    const SimTime t = network_->next_event();
    return t == UINT64_MAX ? UINT64_MAX : (t + 999) / 1000;
  }
  return in_flight_.empty() ? UINT64_MAX : in_flight_.begin()->first.first;
}

}  // namespace pollux::emu::rnic
