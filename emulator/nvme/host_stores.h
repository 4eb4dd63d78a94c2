// Device writes of host memory that bypass the CPU's caches.
//
// A read's data goes to host memory the host may not touch for a long time (a benchmark's
// buffers: 8 drives x QD 128 x 4 KiB is 4 MiB, eight times a core's L2). Written with plain
// stores, every line is first read for ownership and then evicts a line of the models' or the
// host stack's working set; streaming (non-temporal) stores do neither, as a DMA engine's
// writes do not go through the CPU's caches. But a buffer still in the cache (QD 1 reuses one)
// is best written in place: streaming would send it to memory each time (-15 % at QD 1). So a
// page goes by streaming stores unless this thread wrote it within its last 256 page writes
// (recently_written: 1 MiB, about what a core's L2 holds).
//
// Only for a host that reads on the thread that stores (the lockstep's host and devices share
// one; Controller::set_stream_to_host): streaming stores are weakly ordered against other
// cores, so a host polling on another core could see a completion entry before the data, and
// an sfence before every entry costs more than the streaming saves (it waits for the stores to
// reach memory: +10 % wall time for one drive). The thread's own loads see them in order —
// also through the host's own mapping of the pages (caches are physically tagged) — and a
// migration to another core passes an interrupt, which drains them.
#pragma once

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pollux::emu::nvme::host_stores {

inline bool streamable(const void* dst, size_t n) {
  return n % 64 == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
}

// Whether this thread wrote the 4 KiB page of `dst` within its last kRecentPages page writes
// (its reuse distance: a page written again sooner is likely still in the cache); records
// the write. Pages of one buffer pool are consecutive, so their low bits index the record; two
// hot pages 1 MiB apart share a slot and stream each time (speed only: what lands is the same).
inline constexpr uint64_t kRecentPages = 256;
struct PageWrite {
  uint64_t page = 0;  // 0: none
  uint64_t when = 0;
};
inline thread_local PageWrite recent_pages[kRecentPages];
inline thread_local uint64_t page_writes = 0;
inline bool recently_written(const void* dst) {
  const uint64_t page = (reinterpret_cast<uintptr_t>(dst) >> 12) + 1;
  PageWrite& w = recent_pages[page % kRecentPages];
  const uint64_t now = ++page_writes;
  const bool recent = w.page == page && now - w.when <= kRecentPages;
  w = PageWrite{page, now};
  return recent;
}

// dst and n as streamable() accepts.
inline void zero(void* dst, size_t n) {
  auto* p = static_cast<__m128i*>(dst);
  const __m128i z = _mm_setzero_si128();
  for (size_t i = 0; i < n / 16; i += 4) {
    _mm_stream_si128(p + i, z);
    _mm_stream_si128(p + i + 1, z);
    _mm_stream_si128(p + i + 2, z);
    _mm_stream_si128(p + i + 3, z);
  }
}

// dst and n as streamable() accepts; src any alignment.
inline void copy(void* dst, const void* src, size_t n) {
  auto* p = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n / 16; ++i)
    _mm_stream_si128(p + i, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * 16)));
}

}  // namespace pollux::emu::nvme::host_stores
