// Page-mapping FTL with greedy GC over a NandArray.
//
// Numbering. Dies are taken in round-robin slot order i = die * channels + channel (channel
// first). Superblock sb = i * blocks_per_plane + b is block b on every plane of slot i. A
// physical unit p = (sb * pages_per_block + page) * G + o, G = units per page group, where
// o = plane * units_per_page + unit: one page group (one multi-plane program) is G consecutive
// units.
//
// Forward entries: 0 = implicit (precondition) or unmapped (kNone); 1..physical = p + 1;
// kBufferBase + slot = in the open host page group; kTrimmed = unmapped after a trim.
// Reverse entries: LPN + 1, 0 = nothing live (padding). A unit is live iff the forward entry
// of the LPN the reverse entry names points back at it, so invalidation never touches the
// reverse map. Superblocks still holding the sequential fill (precond_) have no reverse
// entries: their LPNs are computed, and are live iff their forward entry is still 0.
//
// GC works one page group at a time (gc_group) and may leave a victim half-emptied for the
// next round; the victim's remaining units stay valid and readable where they are.
//
// Free-space invariant per die: the host may open a new superblock only while at least two
// are free, so GC always has one to relocate into. A victim has fewer live units than a
// superblock holds, so once GC takes a fresh superblock the victim is emptied (and erased)
// before that one fills: GC never needs a second. Every group GC programs gains space as long
// as some closed superblock has a stale unit.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <utility>

#include "emulator/timing/nand.h"

namespace pollux::emu::timing {
namespace {

constexpr uint32_t kBufferBase = 0xFFFF0000u;
constexpr uint32_t kTrimmed = 0xFFFFFFFFu;
constexpr uint32_t kMaxGroupUnits = kTrimmed - kBufferBase;  // buffer slots that fit

enum : uint8_t { kFree, kOpen, kClosed, kVictim };

// Spare units each die needs: gc_free_blocks_low + 2 superblocks (the free target, the open
// superblock, the one only GC may take). A die that cannot take a host page group has at most
// one free superblock and every closed one full of live data; with this much spare not all
// dies can be in that state at once (all live data together is at most the logical capacity),
// so a host write always finds a die.
uint64_t min_spare_units_per_die(const FtlConfig& c, const NandGeometry& g) {
  const uint64_t group = uint64_t(g.page_bytes) / c.mapping_unit * g.planes_per_die;
  return (uint64_t(c.gc_free_blocks_low) + 2) * group * g.pages_per_block;
}

std::string n(uint64_t v) { return std::to_string(v); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Validation and construction

std::string Ftl::validate(const FtlConfig& c, const NandGeometry& g) {
  if (g.channels == 0) return "geometry.channels must be at least 1";
  if (g.dies_per_channel == 0) return "geometry.dies_per_channel must be at least 1";
  if (g.planes_per_die == 0) return "geometry.planes_per_die must be at least 1";
  if (g.blocks_per_plane == 0) return "geometry.blocks_per_plane must be at least 1";
  if (g.pages_per_block == 0) return "geometry.pages_per_block must be at least 1";
  if (g.page_bytes == 0) return "geometry.page_bytes must be at least 1";
  if (c.mapping_unit == 0) return "ftl.mapping_unit must be at least 1";
  if (g.page_bytes % c.mapping_unit != 0)
    return "ftl.mapping_unit (" + n(c.mapping_unit) + ") must divide geometry.page_bytes (" +
           n(g.page_bytes) + ")";
  if (c.gc_free_blocks_low < 2)
    return "ftl.gc_free_blocks_low (" + n(c.gc_free_blocks_low) +
           ") must be at least 2 (one free superblock is kept for GC's own relocations)";
  const uint64_t group = uint64_t(g.page_bytes / c.mapping_unit) * g.planes_per_die;
  if (group > kMaxGroupUnits)
    return "geometry: a multi-plane page group of " + n(group) + " mapping units exceeds " +
           n(kMaxGroupUnits) + " (raise ftl.mapping_unit)";
  const uint64_t sb = group * g.pages_per_block;
  if (sb >= UINT32_MAX) return "geometry: a superblock of " + n(sb) + " mapping units is too big";
  const uint64_t dies = uint64_t(g.channels) * g.dies_per_channel;
  const uint64_t blocks = dies * g.blocks_per_plane;
  if (blocks >= UINT32_MAX) return "geometry: too many blocks (" + n(blocks) + " superblocks)";
  const uint64_t physical = blocks * sb;
  if (physical >= kBufferBase)
    return "geometry: " + n(physical) + " physical mapping units exceed the map's limit of " +
           n(kBufferBase - 1) + " (raise ftl.mapping_unit)";
  if (c.logical_bytes == 0) return "ftl.logical_bytes must be at least 1";
  if (c.logical_bytes % c.mapping_unit != 0)
    return "ftl.logical_bytes (" + n(c.logical_bytes) + ") must be a multiple of "
           "ftl.mapping_unit (" + n(c.mapping_unit) + ")";
  const uint64_t spare = dies * min_spare_units_per_die(c, g);
  const uint64_t logical = c.logical_bytes / c.mapping_unit;
  if (spare >= physical || logical > physical - spare)
    return "ftl.logical_bytes (" + n(c.logical_bytes) + ") leaves too little over-provisioning: "
           "the array holds " + n(physical * c.mapping_unit) + " bytes and at least " +
           n(spare * c.mapping_unit) + " must stay spare for garbage collection (at most " +
           n(spare < physical ? (physical - spare) * c.mapping_unit : 0) +
           " logical bytes; see ftl.gc_free_blocks_low and the geometry)";
  return "";
}

Ftl::Ftl(const FtlConfig& c, NandArray& nand) : nand_(nand), cfg_(c), g_(nand.geometry()) {
  if (std::string e = validate(c, g_); !e.empty()) throw std::invalid_argument(e);
  unit_bytes_ = c.mapping_unit;
  units_per_page_ = g_.page_bytes / c.mapping_unit;
  group_units_ = units_per_page_ * g_.planes_per_die;
  sb_units_ = group_units_ * g_.pages_per_block;
  dies_ = g_.channels * g_.dies_per_channel;
  logical_units_ = c.logical_bytes / c.mapping_unit;
  const uint32_t blocks = dies_ * g_.blocks_per_plane;
  physical_units_ = uint64_t(blocks) * sb_units_;
  implicit_ = c.precondition != Precondition::kNone;
  unmapped_ = implicit_ ? kTrimmed : 0;

  fwd_ = SparseMap();
  rev_ = LazyTable(physical_units_);
  valid_.assign(blocks, 0);
  next_.assign(blocks, kNoBlock);
  prev_.assign(blocks, kNoBlock);
  state_.assign(blocks, kFree);
  precond_.assign(blocks, 0);
  bucket_.assign(size_t(dies_) * (sb_units_ + 1), kNoBlock);
  host_buf_.assign(group_units_, kNoLpn);
  gc_buf_.assign(group_units_, kNoLpn);
  gc_finished_.assign(group_units_, kNoBlock);
  die_state_.resize(dies_);
  for (uint32_t i = 0; i < dies_; ++i) {
    DieState& d = die_state_[i];
    d.channel = i % g_.channels;
    d.die = i / g_.channels;
    d.open = d.free_head = d.free_tail = d.victim = kNoBlock;
    d.min_hint = sb_units_ + 1;
  }
  if (c.slc_bytes != 0) {
    // Folding rewrites SLC data as TLC: the array's TLC program rate, all dies at once.
    const uint64_t fold_rate = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(dies_) * group_units_ * unit_bytes_ * kSec) /
        nand.timing().t_prog);
    slc_ = SlcCache(c.slc_bytes, fold_rate, c.slc_fold_after_idle);
  }
  if (implicit_) {
    precondition_sequential();
  } else {
    for (uint32_t i = 0; i < dies_; ++i)
      for (uint32_t b = 0; b < g_.blocks_per_plane; ++b) push_free(i, i * g_.blocks_per_plane + b);
  }
  if (c.precondition == Precondition::kSteady) precondition_steady();
}

// The fill as if LPNs 0..L-1 had been written in order: page group k (LPNs kG..kG+G-1) went to
// round-robin slot k % dies as that slot's (k / dies)-th group. Only per-superblock state is
// set; no per-unit memory is touched.
void Ftl::precondition_sequential() {
  const uint32_t K = g_.pages_per_block, B = g_.blocks_per_plane;
  precond_groups_ = (logical_units_ + group_units_ - 1) / group_units_;
  const uint64_t pad = precond_groups_ * group_units_ - logical_units_;
  for (uint32_t i = 0; i < dies_; ++i) {
    const uint64_t groups = precond_groups_ / dies_ + (i < precond_groups_ % dies_ ? 1 : 0);
    const uint64_t full = groups / K, rest = groups % K;
    for (uint32_t b = 0; b < B; ++b) {
      const uint32_t sb = i * B + b;
      if (b < full) {
        state_[sb] = kClosed;
        valid_[sb] = sb_units_;
        precond_[sb] = 1;
      } else if (b == full && rest != 0) {
        state_[sb] = kOpen;
        valid_[sb] = uint32_t(rest) * group_units_;
        precond_[sb] = 1;
        die_state_[i].open = sb;
        die_state_[i].next_group = uint32_t(rest);
      } else {
        push_free(i, sb);
      }
    }
  }
  if (pad != 0) {  // the last group was padded
    const uint64_t k = precond_groups_ - 1;
    valid_[(k % dies_) * B + (k / dies_) / K] -= uint32_t(pad);
  }
  for (uint32_t sb = 0; sb < dies_ * B; ++sb)
    if (state_[sb] == kClosed) bucket_link(sb, valid_[sb]);
  rr_ = uint32_t(precond_groups_ % dies_);
}

// Random overwrites without timing until the WA of one window stops moving (at least twice
// the capacity, at most eight times): O(capacity) work, so meant for scaled-down drives.
void Ftl::precondition_steady() {
  std::mt19937_64 rng(cfg_.seed);
  const uint64_t window = std::max<uint64_t>(logical_units_ / 2, group_units_);
  uint64_t written = 0;
  double previous = 0.0, wa = 0.0;
  for (;;) {
    const FtlStats before = stats_;
    for (uint64_t w = 0; w < window; ++w) {
      // Multiply-shift: uniform enough, and the same sequence on every standard library.
      const uint64_t lpn = uint64_t((unsigned __int128)rng() * logical_units_ >> 64);
      ++stats_.host_units_written;
      accept(lpn);
      if (host_fill_ == group_units_) program_buffer(0, /*timed=*/false);
    }
    written += window;
    wa = double(stats_.nand_units_written - before.nand_units_written) /
         double(stats_.host_units_written - before.host_units_written);
    if (written >= 8 * logical_units_) break;
    if (written >= 2 * logical_units_ && wa > 0 && std::abs(wa - previous) <= 0.02 * wa) break;
    previous = wa;
  }
  if (host_fill_ != 0) program_buffer(0, /*timed=*/false);
  precond_host_units_ = written;
  precond_wa_ = wa;
  stats_ = {};
}

// ---------------------------------------------------------------------------------------------
// Host operations

bool Ftl::nand_location(uint64_t lpn, uint64_t* p) const {
  const uint32_t e = fwd_[lpn];
  if (e == 0) {
    if (!implicit_) return false;  // never written: zeroes without a media access
    *p = implicit_phys(lpn);
    return true;
  }
  if (e >= kBufferBase) return false;  // in the write buffer, or trimmed
  *p = e - 1;
  return true;
}

SimTime Ftl::read(SimTime start, uint64_t lpn) {
  if (lpn >= logical_units_) throw std::out_of_range("Ftl::read: LPN past the capacity");
  if (cfg_.read_ahead_groups != 0) read_ahead(start, lpn);
  uint64_t p;
  if (!nand_location(lpn, &p)) return start;
  return nand_.read(start, page_of(p), unit_bytes_);
}

// A stream is a run of reads of consecutive LPNs at least a page group long (a random read
// of a few units is not one). Each read of the stream that starts a new page group senses
// the next read_ahead_groups groups (the LPN ranges that follow, wherever the FTL put them);
// a group already in its die's register costs nothing.
void Ftl::read_ahead(SimTime start, uint64_t lpn) {
  const bool next = last_read_lpn_ != kNoLpn && lpn == last_read_lpn_ + 1;
  stream_units_ = next ? stream_units_ + 1 : 0;
  last_read_lpn_ = lpn;
  if (stream_units_ < group_units_ || lpn % group_units_ != 0) return;
  uint64_t here;
  const bool mapped = nand_location(lpn, &here);
  for (uint32_t k = 1; k <= cfg_.read_ahead_groups; ++k) {
    const uint64_t next = lpn + uint64_t(k) * group_units_;
    uint64_t p;
    if (next >= logical_units_ || !nand_location(next, &p)) continue;
    const PhysPage page = page_of(p);
    if (mapped) {
      // A group on the die being read would evict the page the stream is reading: stop.
      const PhysPage cur = page_of(here);
      if (page.channel == cur.channel && page.die == cur.die) break;
    }
    nand_.sense(start, page);
    ++read_ahead_senses_;
  }
}

Ftl::WriteResult Ftl::write(SimTime start, uint64_t lpn) {
  if (lpn >= logical_units_) throw std::out_of_range("Ftl::write: LPN past the capacity");
  ++stats_.host_units_written;
  accept(lpn);
  if (host_fill_ < group_units_) return {0, start};
  return program_buffer(start, /*timed=*/true);
}

Ftl::WriteResult Ftl::flush(SimTime start) {
  if (host_fill_ == 0) return {0, start};
  return program_buffer(start, /*timed=*/true);
}

void Ftl::trim(uint64_t lpn) {
  if (lpn >= logical_units_) throw std::out_of_range("Ftl::trim: LPN past the capacity");
  invalidate(lpn);
  if (fwd_[lpn] != unmapped_) fwd_[lpn] = unmapped_;  // don't fault in a page to store 0
}

uint64_t Ftl::free_blocks() const { return free_total_; }

uint32_t Ftl::free_blocks(uint32_t channel, uint32_t die) const {
  return die_state_[die * g_.channels + channel].free_count;
}

Ftl::Location Ftl::locate(uint64_t lpn) const {
  Location l;
  if (lpn >= logical_units_) return l;
  const uint32_t e = fwd_[lpn];
  uint64_t p;
  if (e == 0) {
    if (!implicit_) return l;
    p = implicit_phys(lpn);
  } else if (e == kTrimmed) {
    return l;
  } else if (e >= kBufferBase) {
    l.kind = Location::kBuffered;
    return l;
  } else {
    p = e - 1;
  }
  l.kind = Location::kNand;
  l.page = page_of(p);
  l.unit = uint32_t(p % units_per_page_);
  return l;
}

Ftl::BlockInfo Ftl::block_info(uint32_t channel, uint32_t die, uint32_t block) const {
  const uint32_t sb = (die * g_.channels + channel) * g_.blocks_per_plane + block;
  BlockInfo b;
  b.valid_units = valid_[sb];
  b.state = state_[sb] == kFree     ? BlockInfo::kFree
            : state_[sb] == kOpen   ? BlockInfo::kOpen
            : state_[sb] == kClosed ? BlockInfo::kClosed
                                    : BlockInfo::kCollecting;
  return b;
}

// ---------------------------------------------------------------------------------------------
// Write path

// Put one host unit into the open page group (the caller counts it and programs when full).
void Ftl::accept(uint64_t lpn) {
  invalidate(lpn);
  host_buf_[host_fill_] = lpn;
  fwd_[lpn] = kBufferBase + host_fill_;
  ++host_fill_;
}

// Every slot is programmed: units overwritten while buffered and the padding of a partial
// group are written to NAND but are dead, so NAND writes = programs x G.
Ftl::WriteResult Ftl::program_buffer(SimTime start, bool timed) {
  const uint32_t d = pick_die(start, timed);
  const uint64_t base = take_group(d);
  for (uint32_t o = 0; o < group_units_; ++o) {
    const uint64_t lpn = o < host_fill_ ? host_buf_[o] : kNoLpn;
    if (lpn != kNoLpn) {
      place(lpn, base + o);
    } else if (rev_[base + o] != 0) {
      rev_[base + o] = 0;
    }
  }
  SimTime done = start;
  if (timed) {
    // Host data goes to SLC-mode blocks while the SLC cache has room (a fast program).
    const bool slc = slc_.admit(start, uint64_t(group_units_) * unit_bytes_);
    done = nand_.program(start, page_of(base), g_.planes_per_die,
                         slc ? nand_.timing().t_prog_slc : 0);
    slc_.programmed(done);
  }
  finish_group(d);
  stats_.nand_units_written += group_units_;
  const uint32_t units = host_fill_;
  host_fill_ = 0;
  return {units, done};
}

// The next die in round-robin order that can take a page group, after its GC. A die GC
// cannot help (every closed superblock all valid) is skipped; validate()'s spare makes sure
// some die always can.
uint32_t Ftl::pick_die(SimTime start, bool timed) {
  for (uint32_t tries = 0; tries < dies_; ++tries) {
    const uint32_t d = rr_;
    rr_ = rr_ + 1 == dies_ ? 0 : rr_ + 1;
    DieState& ds = die_state_[d];
    if (ds.free_count < cfg_.gc_free_blocks_low) collect(d, start, timed);
    if (ds.open != kNoBlock || ds.free_count >= 2) return d;
  }
  throw std::logic_error("Ftl: no die can take a page group (over-provisioning exhausted)");
}

uint64_t Ftl::take_group(uint32_t d) {
  DieState& ds = die_state_[d];
  if (ds.open == kNoBlock) {
    ds.open = pop_free(d);
    state_[ds.open] = kOpen;
    ds.next_group = 0;
  }
  return (uint64_t(ds.open) * g_.pages_per_block + ds.next_group) * group_units_;
}

void Ftl::finish_group(uint32_t d) {
  DieState& ds = die_state_[d];
  if (++ds.next_group == g_.pages_per_block) {  // full: now a GC candidate
    state_[ds.open] = kClosed;
    bucket_link(ds.open, valid_[ds.open]);
    ds.open = kNoBlock;
  }
}

void Ftl::place(uint64_t lpn, uint64_t p) {
  fwd_[lpn] = uint32_t(p + 1);
  rev_[p] = uint32_t(lpn + 1);
  ++valid_[p / sb_units_];  // the open superblock: not in a bucket yet
}

void Ftl::invalidate(uint64_t lpn) {
  const uint32_t e = fwd_[lpn];
  if (e == 0) {
    if (implicit_) drop_unit(implicit_phys(lpn));
  } else if (e < kBufferBase) {
    drop_unit(e - 1);
  } else if (e != kTrimmed) {
    host_buf_[e - kBufferBase] = kNoLpn;  // superseded while still buffered
  }
}

void Ftl::drop_unit(uint64_t p) {
  const uint32_t sb = uint32_t(p / sb_units_);
  const uint32_t v = valid_[sb]--;
  if (state_[sb] == kClosed) {
    bucket_unlink(sb, v);
    bucket_link(sb, v - 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Garbage collection

void Ftl::collect(uint32_t d, SimTime start, bool timed) {
  while (die_state_[d].free_count < cfg_.gc_free_blocks_low)
    if (!gc_group(d, start, timed)) return;  // no superblock with anything to reclaim
}

// One page group of relocation: gather G live units from the victim (resuming the one a
// previous group left half-emptied, then the emptiest closed superblocks), reading each plane
// page once for the units taken from it; program them on the same die once their data has
// arrived; erase the victims this completes. Groups are never padded while a victim remains,
// so relocation wastes no space (padding every GC pass would eat the over-provisioning it is
// meant to recover). All of it is reserved from `start` on this die, so the host program that
// triggered GC queues behind it. Returns false if there was nothing to do.
bool Ftl::gc_group(uint32_t d, SimTime start, bool timed) {
  DieState& ds = die_state_[d];
  const uint32_t low = cfg_.gc_free_blocks_low;
  uint32_t n = 0, finished = 0;
  SimTime ready = start;
  bool progress = false;
  while (n < group_units_) {
    if (ds.victim == kNoBlock) {
      if (n == 0 && ds.free_count >= low) return true;  // freed by victims with nothing live
      const uint32_t sb = lowest_block(d);
      if (sb == kNoBlock || valid_[sb] == sb_units_) break;
      bucket_unlink(sb, valid_[sb]);
      state_[sb] = kVictim;
      ds.victim = sb;
      ds.cursor = 0;
    }
    const uint32_t sb = ds.victim;
    const bool pre = precond_[sb] != 0;
    const uint64_t first = uint64_t(sb) * sb_units_;
    const uint32_t before = n;
    while (ds.cursor < sb_units_ && n < group_units_) {
      const uint32_t page_end = ds.cursor - ds.cursor % units_per_page_ + units_per_page_;
      uint32_t taken = 0;
      for (; ds.cursor < page_end && n < group_units_; ++ds.cursor) {
        const uint64_t lpn = live_lpn(first + ds.cursor, pre);
        if (lpn == kNoLpn) continue;
        gc_buf_[n++] = lpn;
        ++taken;
      }
      if (taken != 0 && timed) {
        const SimTime arrived =
            nand_.read(start, page_of(first + page_end - 1), taken * unit_bytes_);
        ready = std::max(ready, arrived);
      }
    }
    valid_[sb] -= n - before;  // they move with this group (nothing can intervene)
    if (ds.cursor == sb_units_) {
      ds.victim = kNoBlock;
      progress = true;
      if (n == before) {
        erase_victim(d, sb, start, timed);  // none of its units wait in this group
      } else {
        gc_finished_[finished++] = sb;
      }
    }
  }
  if (n != 0) {  // padded only if the die ran out of victims
    const uint64_t base = take_group(d);
    for (uint32_t o = 0; o < group_units_; ++o) {
      if (o < n) {
        place(gc_buf_[o], base + o);
      } else if (rev_[base + o] != 0) {
        rev_[base + o] = 0;
      }
    }
    if (timed) nand_.program(ready, page_of(base), g_.planes_per_die);
    finish_group(d);
    stats_.nand_units_written += group_units_;
    stats_.gc_relocations += n;
    progress = true;
  }
  for (uint32_t i = 0; i < finished; ++i) erase_victim(d, gc_finished_[i], start, timed);
  return progress;
}

void Ftl::erase_victim(uint32_t d, uint32_t sb, SimTime start, bool timed) {
  if (timed) {
    const DieState& ds = die_state_[d];
    nand_.erase(start, ds.channel, ds.die, 0, sb % g_.blocks_per_plane, g_.planes_per_die);
  }
  ++stats_.erases;
  valid_[sb] = 0;
  precond_[sb] = 0;
  state_[sb] = kFree;
  push_free(d, sb);
}

// The LPN whose current copy is unit p, or kNoLpn.
uint64_t Ftl::live_lpn(uint64_t p, bool precond_block) const {
  const uint64_t group = p / group_units_;
  if (precond_block) {
    // Slot i's j-th group is fill group k = j * dies + i (see precondition_sequential).
    const uint64_t per_die = uint64_t(g_.blocks_per_plane) * g_.pages_per_block;
    const uint64_t k = (group % per_die) * dies_ + group / per_die;
    if (k < precond_groups_) {
      const uint64_t lpn = k * group_units_ + p % group_units_;
      return lpn < logical_units_ && fwd_[lpn] == 0 ? lpn : kNoLpn;
    }
  }
  const uint32_t r = rev_[p];
  if (r == 0) return kNoLpn;
  return fwd_[r - 1] == p + 1 ? r - 1 : kNoLpn;
}

uint64_t Ftl::implicit_phys(uint64_t lpn) const {
  const uint64_t k = lpn / group_units_;
  const uint64_t per_die = uint64_t(g_.blocks_per_plane) * g_.pages_per_block;
  return ((k % dies_) * per_die + k / dies_) * group_units_ + lpn % group_units_;
}

PhysPage Ftl::page_of(uint64_t p) const {
  const uint64_t group = p / group_units_;
  const uint32_t o = uint32_t(p % group_units_);
  const uint64_t sb = group / g_.pages_per_block;
  const DieState& ds = die_state_[sb / g_.blocks_per_plane];
  return PhysPage{ds.channel, ds.die, o / units_per_page_, uint32_t(sb % g_.blocks_per_plane),
                  uint32_t(group % g_.pages_per_block)};
}

// Greedy: a closed superblock of die d with the fewest valid units. min_hint never exceeds the
// true minimum, so the scan costs at most the victim's valid count (which GC copies anyway).
uint32_t Ftl::lowest_block(uint32_t d) {
  DieState& ds = die_state_[d];
  const uint32_t* heads = &bucket_[size_t(d) * (sb_units_ + 1)];
  for (uint32_t v = ds.min_hint; v <= sb_units_; ++v) {
    if (heads[v] != kNoBlock) {
      ds.min_hint = v;
      return heads[v];
    }
  }
  ds.min_hint = sb_units_ + 1;
  return kNoBlock;
}

void Ftl::bucket_link(uint32_t sb, uint32_t valid) {
  const uint32_t d = sb / g_.blocks_per_plane;
  uint32_t& head = bucket_[size_t(d) * (sb_units_ + 1) + valid];
  next_[sb] = head;
  prev_[sb] = kNoBlock;
  if (head != kNoBlock) prev_[head] = sb;
  head = sb;
  DieState& ds = die_state_[d];
  ds.min_hint = std::min(ds.min_hint, valid);
}

void Ftl::bucket_unlink(uint32_t sb, uint32_t valid) {
  const uint32_t d = sb / g_.blocks_per_plane;
  if (prev_[sb] != kNoBlock) {
    next_[prev_[sb]] = next_[sb];
  } else {
    bucket_[size_t(d) * (sb_units_ + 1) + valid] = next_[sb];
  }
  if (next_[sb] != kNoBlock) prev_[next_[sb]] = prev_[sb];
}

uint32_t Ftl::pop_free(uint32_t d) {
  DieState& ds = die_state_[d];
  const uint32_t sb = ds.free_head;
  ds.free_head = next_[sb];
  if (ds.free_head == kNoBlock) ds.free_tail = kNoBlock;
  --ds.free_count;
  --free_total_;
  return sb;
}

// FIFO, so erased superblocks rest before reuse (and wear spreads) rather than cycling one.
void Ftl::push_free(uint32_t d, uint32_t sb) {
  DieState& ds = die_state_[d];
  next_[sb] = kNoBlock;
  if (ds.free_tail != kNoBlock) {
    next_[ds.free_tail] = sb;
  } else {
    ds.free_head = sb;
  }
  ds.free_tail = sb;
  ++ds.free_count;
  ++free_total_;
}

}  // namespace pollux::emu::timing
