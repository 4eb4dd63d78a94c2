#include "scenarios/oracle/oracle.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace pollux::scenarios::oracle {
namespace {

constexpr uint64_t kP1 = 0x9e3779b97f4a7c15ull;  // odd multipliers (golden ratio, splitmix)
constexpr uint64_t kP2 = 0xbf58476d1ce4e5b9ull;
constexpr uint64_t kP3 = 0x94d049bb133111ebull;
constexpr uint64_t kP4 = 0xd6e8feb86659fd93ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Full-avalanche 64-bit finaliser.
inline uint64_t avalanche(uint64_t x) {
  x ^= x >> 30;
  x *= kP2;
  x ^= x >> 27;
  x *= kP3;
  x ^= x >> 31;
  return x;
}

// One lane step: a bijection of `acc` for every word, and injective in the word.
inline uint64_t lane(uint64_t acc, uint64_t word) {
  acc ^= word * kP1;
  acc = rotl(acc, 29);
  return acc * kP4 + kP2;
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

}  // namespace

uint64_t hash_block(const void* data, std::size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  // Four independent lanes over 32-byte stripes (keeps the multipliers' pipelines busy).
  uint64_t a = kP1 ^ size, b = kP2, c = kP3, d = kP4 ^ (size << 1);
  std::size_t n = size;
  while (n >= 32) {
    a = lane(a, load64(p));
    b = lane(b, load64(p + 8));
    c = lane(c, load64(p + 16));
    d = lane(d, load64(p + 24));
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    a = lane(a, load64(p));
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t tail = 0;
    std::memcpy(&tail, p, n);
    b = lane(b, tail ^ (uint64_t{n} << 56));
  }
  uint64_t h = avalanche(a);
  h = avalanche(h + rotl(b, 17));
  h = avalanche(h + rotl(c, 31));
  h = avalanche(h + rotl(d, 47));
  return h == ~0ull ? ~1ull : h;
}

const char* to_string(ViolationKind kind) {
  switch (kind) {
    case ViolationKind::kStale: return "stale";
    case ViolationKind::kLostDurableWrite: return "lost durable write";
    case ViolationKind::kMisdirected: return "misdirected";
    case ViolationKind::kCorrupt: return "torn/corrupt";
  }
  return "?";
}

std::string Violation::to_string() const {
  return "LBA " + std::to_string(lba) + ": " + oracle::to_string(kind) + ": expected " +
         expected + ", found " + found;
}

std::string Verdict::to_string() const {
  if (violations.empty()) return "ok";
  std::string s;
  for (const auto& v : violations) {
    if (!s.empty()) s += '\n';
    s += v.to_string();
  }
  return s;
}

// ---- U64Map ----------------------------------------------------------------------------

template <class T>
std::size_t Oracle::U64Map<T>::home(uint64_t key) const {
  return static_cast<std::size_t>(avalanche(key)) & (slots_.size() - 1);
}

template <class T>
T* Oracle::U64Map<T>::find(uint64_t key) {
  if (size_ == 0) return nullptr;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].value;
    if (slots_[i].key == kEmptyKey) return nullptr;
  }
}

template <class T>
const T* Oracle::U64Map<T>::find(uint64_t key) const {
  return const_cast<U64Map*>(this)->find(key);
}

template <class T>
T& Oracle::U64Map<T>::get(uint64_t key, bool* inserted) {
  if ((size_ + 1) * 4 > slots_.size() * 3) grow();  // load factor <= 3/4
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) {
      *inserted = false;
      return slots_[i].value;
    }
    if (slots_[i].key == kEmptyKey) {
      slots_[i].key = key;
      slots_[i].value = T{};
      ++size_;
      *inserted = true;
      return slots_[i].value;
    }
  }
}

template <class T>
void Oracle::U64Map<T>::erase(uint64_t key) {
  if (size_ == 0) return;
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home(key);
  while (slots_[i].key != key) {
    if (slots_[i].key == kEmptyKey) return;
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole.
  for (std::size_t j = (i + 1) & mask; slots_[j].key != kEmptyKey; j = (j + 1) & mask) {
    const std::size_t h = home(slots_[j].key);
    if (((j - h) & mask) >= ((j - i) & mask)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i].key = kEmptyKey;
  --size_;
}

template <class T>
void Oracle::U64Map<T>::clear() {
  for (auto& s : slots_) s.key = kEmptyKey;
  size_ = 0;
}

template <class T>
void Oracle::U64Map<T>::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
  const std::size_t mask = slots_.size() - 1;
  for (auto& s : old) {
    if (s.key == kEmptyKey) continue;
    std::size_t i = home(s.key);
    while (slots_[i].key != kEmptyKey) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

// ---- Oracle ----------------------------------------------------------------------------

Oracle::Oracle(uint32_t block_size, uint64_t num_blocks)
    : Oracle(block_size, num_blocks, [&] {
        std::vector<uint8_t> zero(block_size, 0);
        return hash_block(zero.data(), zero.size());
      }()) {}

Oracle::Oracle(uint32_t block_size, uint64_t num_blocks, uint64_t initial_hash)
    : block_size_(block_size), num_blocks_(num_blocks), initial_hash_(initial_hash) {
  if (block_size == 0) throw std::invalid_argument("oracle: block size 0");
}

void Oracle::check_range(uint64_t lba, uint32_t blocks) const {
  if (blocks == 0 || lba >= num_blocks_ || blocks > num_blocks_ - lba)
    throw std::out_of_range("oracle: LBA range " + std::to_string(lba) + "+" +
                            std::to_string(blocks) + " outside " + std::to_string(num_blocks_) +
                            " blocks");
}

uint32_t Oracle::alloc_version() {
  ++live_versions_;
  if (free_ != kNil) {
    const uint32_t idx = free_;
    free_ = pool_[idx].next;
    return idx;
  }
  if (pool_.size() >= kNil) throw std::length_error("oracle: too many versions");
  pool_.push_back(Version{});
  return static_cast<uint32_t>(pool_.size() - 1);
}

void Oracle::free_version(uint32_t idx) {
  --live_versions_;
  pool_[idx].next = free_;
  free_ = idx;
}

Oracle::Block& Oracle::block(uint64_t lba) {
  bool inserted;
  Block& b = blocks_.get(lba, &inserted);
  if (inserted) {  // first touch: the never-written state, durable from the start
    const uint32_t idx = alloc_version();
    pool_[idx] = Version{0, initial_hash_, 0, 0, kNil, kStatusAcked, kDurable};
    b.head = idx;
  }
  return b;
}

bool Oracle::durable(const Version& v, bool plp) const {
  if (v.flags & kDurable) return true;
  if (v.status != kStatusAcked) return false;
  return plp || (v.flags & kFua) || v.complete < flush_seq_;
}

// Drops versions that can never be read again, even after a power loss: those completed
// before a durable version was submitted.
void Oracle::prune(Block& b, bool plp) {
  uint64_t floor = 0;
  bool any = false;
  for (uint32_t i = b.head; i != kNil; i = pool_[i].next) {
    if (durable(pool_[i], plp)) {
      floor = std::max(floor, pool_[i].submit);
      any = true;
    }
  }
  if (!any) return;
  uint32_t* link = &b.head;
  while (*link != kNil) {
    const uint32_t i = *link;
    Version& v = pool_[i];
    if (v.complete != kInFlight && v.complete < floor) {
      *link = v.next;
      free_version(i);
    } else {
      link = &v.next;
    }
  }
}

uint64_t Oracle::begin_write(uint64_t lba, uint32_t blocks, const void* data, bool fua) {
  check_range(lba, blocks);
  if (data == nullptr) throw std::invalid_argument("oracle: begin_write without data");
  const uint64_t id = ++next_id_;
  const uint64_t now = ++seq_;
  bool inserted;
  writes_.get(id, &inserted) = Write{lba, now, blocks, fua};
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint32_t k = 0; k < blocks; ++k) {
    const uint64_t h = hash_block(p + std::size_t{k} * block_size_, block_size_);
    known_.get(h, &inserted) = Known{lba + k, id};
    Block& b = block(lba + k);
    const uint32_t idx = alloc_version();
    pool_[idx] = Version{id, h, now, kInFlight, b.head, kStatusInFlight,
                         static_cast<uint8_t>(fua ? kFua : 0)};
    b.head = idx;
  }
  ++stats_.writes_begun;
  return id;
}

void Oracle::write_acked(uint64_t id) {
  const Write* found = writes_.find(id);
  if (found == nullptr)
    throw std::logic_error("oracle: write_acked for unknown or finished write " +
                           std::to_string(id));
  const Write w = *found;
  writes_.erase(id);
  const uint64_t now = ++seq_;
  for (uint32_t k = 0; k < w.blocks; ++k) {
    Block& b = *blocks_.find(w.lba + k);
    b.after_crash = 0;
    for (uint32_t i = b.head; i != kNil; i = pool_[i].next) {
      Version& v = pool_[i];
      if (v.gen == id) {
        v.status = kStatusAcked;
        v.complete = now;
      } else if (v.complete != kInFlight && v.complete < w.submit) {
        v.flags |= kSuperseded;  // finished before this write began: overwritten
      }
    }
    prune(b, false);
  }
  ++stats_.writes_acked;
}

void Oracle::write_failed(uint64_t id) {
  const Write* found = writes_.find(id);
  if (found == nullptr) {
    if (id <= lost_ids_) return;  // was in flight at a power loss; the driver aborts it
    throw std::logic_error("oracle: write_failed for unknown or finished write " +
                           std::to_string(id));
  }
  const Write w = *found;
  writes_.erase(id);
  const uint64_t now = ++seq_;
  for (uint32_t k = 0; k < w.blocks; ++k) {
    Block& b = *blocks_.find(w.lba + k);
    for (uint32_t i = b.head; i != kNil; i = pool_[i].next) {
      if (pool_[i].gen == id) {
        pool_[i].status = kStatusFailed;
        pool_[i].complete = now;
        break;
      }
    }
  }
  ++stats_.writes_failed;
}

void Oracle::flush_acked() { flush_acked(++seq_); }

uint64_t Oracle::begin_flush() { return ++seq_; }

void Oracle::flush_acked(uint64_t token) {
  flush_seq_ = std::max(flush_seq_, token);
  ++stats_.flushes;
}

void Oracle::power_loss(bool plp) {
  const uint64_t now = ++seq_;
  blocks_.for_each([&](uint64_t, Block& b) {
    prune(b, plp);
    // Every remaining version may be what the media holds; they are now mutually
    // concurrent (none supersedes another) and none is still in flight.
    for (uint32_t i = b.head; i != kNil; i = pool_[i].next) {
      Version& v = pool_[i];
      if (durable(v, plp)) v.flags |= kDurable;
      v.flags &= static_cast<uint8_t>(~kSuperseded);
      if (v.status == kStatusInFlight) v.status = kStatusFailed;
      v.submit = v.complete = now;
    }
    b.after_crash = 1;
  });
  writes_.clear();
  lost_ids_ = next_id_;
  ++stats_.power_losses;
}

std::string Oracle::describe_version(const Version& v) const {
  std::string s = "gen " + std::to_string(v.gen);
  if (v.gen == 0) return s + " (never written)";
  switch (v.status) {
    case kStatusInFlight: s += " (in flight"; break;
    case kStatusAcked: s += " (acked"; break;
    default: s += " (failed"; break;
  }
  if (v.flags & kFua) s += ", FUA";
  if (durable(v, false)) s += ", durable";
  return s + ")";
}

Violation Oracle::describe(uint64_t lba, uint64_t found, const Block* b) const {
  Violation out;
  out.lba = lba;
  out.found_hash = found;
  // What was acceptable.
  uint64_t max_durable_gen = 0;
  bool has_durable = false;
  if (b == nullptr) {
    out.expected_generations.push_back(0);
    out.expected = "gen 0 (never written)";
  } else {
    std::vector<std::pair<uint64_t, std::string>> acceptable;
    for (uint32_t i = b->head; i != kNil; i = pool_[i].next) {
      const Version& v = pool_[i];
      if (v.flags & kDurable) {
        has_durable = true;
        max_durable_gen = std::max(max_durable_gen, v.gen);
      }
      if (!(v.flags & kSuperseded)) acceptable.emplace_back(v.gen, describe_version(v));
    }
    std::sort(acceptable.begin(), acceptable.end());
    for (const auto& [gen, text] : acceptable) {
      out.expected_generations.push_back(gen);
      if (!out.expected.empty()) out.expected += " or ";
      out.expected += text;
    }
  }
  // What was found.
  const Known* k = known_.find(found);
  const bool same_lba = (k != nullptr && k->lba == lba) || found == initial_hash_;
  if (same_lba) {
    const uint64_t gen = (k != nullptr && k->lba == lba) ? k->gen : 0;
    out.found_known = true;
    out.found_lba = lba;
    out.found_generation = gen;
    const bool lost = b != nullptr && b->after_crash && has_durable && gen < max_durable_gen;
    out.kind = lost ? ViolationKind::kLostDurableWrite : ViolationKind::kStale;
    out.found = gen == 0 ? "gen 0 (never-written content)"
                         : "gen " + std::to_string(gen) + " of this LBA (" +
                               (lost ? "older than a durable write" : "superseded version") +
                               ")";
  } else if (k != nullptr) {
    out.kind = ViolationKind::kMisdirected;
    out.found_known = true;
    out.found_lba = k->lba;
    out.found_generation = k->gen;
    out.found = "gen " + std::to_string(k->gen) + " of LBA " + std::to_string(k->lba) +
                " (written to another LBA)";
  } else {
    out.kind = ViolationKind::kCorrupt;
    out.found = "unknown content hash " + hex(found) + " (torn or corrupt)";
    for (const auto& [hash, what] : named_) {
      if (hash == found) out.found = what;
    }
  }
  return out;
}

void Oracle::name_content(const void* block, std::string what) {
  named_.emplace_back(hash_block(block, block_size_), std::move(what));
}

Verdict Oracle::check_read(uint64_t lba, uint32_t blocks, const void* data) {
  check_range(lba, blocks);
  Verdict verdict;
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint32_t k = 0; k < blocks; ++k) {
    const uint64_t h = hash_block(p + std::size_t{k} * block_size_, block_size_);
    Block* b = blocks_.find(lba + k);
    ++stats_.blocks_read;
    if (b == nullptr) {
      if (h != initial_hash_) verdict.violations.push_back(describe(lba + k, h, nullptr));
      continue;
    }
    uint32_t match = kNil;
    for (uint32_t i = b->head; i != kNil; i = pool_[i].next) {
      if (!(pool_[i].flags & kSuperseded) && pool_[i].hash == h) {
        match = i;
        break;
      }
    }
    if (match == kNil) {
      verdict.violations.push_back(describe(lba + k, h, b));
      continue;
    }
    // Resolve: the media holds this version; other completed versions cannot come back
    // (only writes still in flight can change the block).
    for (uint32_t i = b->head; i != kNil; i = pool_[i].next) {
      Version& v = pool_[i];
      if (i != match && v.complete != kInFlight && v.hash != h) v.flags |= kSuperseded;
    }
  }
  stats_.violations += verdict.violations.size();
  return verdict;
}

Verdict Oracle::verify_all(const ReadBlockFn& read) {
  std::vector<uint64_t> lbas;
  lbas.reserve(blocks_.size());
  blocks_.for_each([&](uint64_t lba, Block&) { lbas.push_back(lba); });
  std::sort(lbas.begin(), lbas.end());
  std::vector<uint8_t> buf(block_size_);
  Verdict all;
  for (uint64_t lba : lbas) {
    std::fill(buf.begin(), buf.end(), uint8_t{0});
    read(lba, buf.data());
    Verdict v = check_read(lba, 1, buf.data());
    for (auto& x : v.violations) all.violations.push_back(std::move(x));
  }
  return all;
}

std::vector<uint64_t> Oracle::acceptable_generations(uint64_t lba) const {
  std::vector<uint64_t> gens;
  const Block* b = blocks_.find(lba);
  if (b == nullptr) return {0};
  for (uint32_t i = b->head; i != kNil; i = pool_[i].next)
    if (!(pool_[i].flags & kSuperseded)) gens.push_back(pool_[i].gen);
  std::sort(gens.begin(), gens.end());
  gens.erase(std::unique(gens.begin(), gens.end()), gens.end());
  return gens;
}

OracleStats Oracle::stats() const {
  OracleStats s = stats_;
  s.tracked_blocks = blocks_.size();
  s.tracked_versions = live_versions_;
  s.writes_in_flight = writes_.size();
  s.known_contents = known_.size();
  return s;
}

}  // namespace pollux::scenarios::oracle
