#include "scenarios/sim/verified_io.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace pollux::sim {

void VerifiedIo::Ctx::cb(void* ctx, const spec::nvme::CompletionEntry& c) {
  auto* x = static_cast<Ctx*>(ctx);
  --*x->outstanding;
  x->done = true;
  x->ok = (c.status & 0xfffe) == 0;
  if (!x->ok) ++*x->failed;
}

void run_verified_io(VerifiedIo& out, nvme::Qpair& qp, const nvme::Namespace& ns,
                     uint8_t* buffers, uint64_t seed, const env::Clock& clock,
                     const std::function<void()>& step) {
  using V = VerifiedIo;
  constexpr uint32_t kChunks = V::kBlocks / V::kNlb;
  std::vector<uint8_t> data(V::kBlocks * 512);
  std::vector<uint8_t> version(kChunks, 0);
  std::vector<bool> uncertain(kChunks, false);  // a write failed: old or new data
  std::mt19937_64 rng(seed);
  std::vector<V::Ctx*> ctxs(V::kQd);
  for (auto& c : ctxs) c = &out.contexts.emplace_back(V::Ctx{&out.outstanding, &out.failed, true});
  std::vector<uint32_t> busy(V::kQd, UINT32_MAX);
  auto busy_chunk = [&](uint32_t chunk) {
    for (uint32_t s = 0; s < V::kQd; ++s)
      if (!ctxs[s]->done && busy[s] == chunk) return true;
    return false;
  };
  // A slot's finished write: its chunk is uncertain if it failed.
  auto settle = [&] {
    for (uint32_t s = 0; s < V::kQd; ++s) {
      if (ctxs[s]->done && busy[s] != UINT32_MAX && !ctxs[s]->ok) uncertain[busy[s]] = true;
      if (ctxs[s]->done) busy[s] = UINT32_MAX;
    }
  };
  uint32_t issued = 0;
  while (issued < V::kIos || out.outstanding > 0) {
    settle();
    for (uint32_t s = 0; s < V::kQd && issued < V::kIos; ++s) {
      if (!ctxs[s]->done) continue;
      const uint32_t chunk = static_cast<uint32_t>(rng() % kChunks);
      if (busy_chunk(chunk)) continue;
      const uint8_t v = ++version[chunk];
      uint8_t* buf = buffers + s * V::kChunk;
      for (uint32_t i = 0; i < V::kChunk; ++i) buf[i] = static_cast<uint8_t>(chunk * 7 + v + i);
      std::memcpy(&data[chunk * V::kChunk], buf, V::kChunk);
      ctxs[s]->done = false;
      busy[s] = chunk;
      ++out.outstanding;
      EXPECT_EQ(qp.write(ns, buf, chunk * V::kNlb, V::kNlb, V::Ctx::cb, ctxs[s]), 0);
      ++issued;
    }
    step();
    if (clock.now() > 5'000'000'000) break;
  }
  settle();  // the last writes (the loop ends when they complete, before another pass)
  out.writes_outstanding = out.outstanding;
  uint8_t* rbuf = buffers + V::kQd * V::kChunk;
  for (uint32_t chunk = 0; chunk < kChunks; ++chunk) {
    if (version[chunk] == 0 || uncertain[chunk]) continue;
    V::Ctx& r = out.contexts.emplace_back(V::Ctx{&out.outstanding, &out.failed, false});
    ++out.outstanding;
    std::memset(rbuf, 0xee, V::kChunk);
    EXPECT_EQ(qp.read(ns, rbuf, chunk * V::kNlb, V::kNlb, V::Ctx::cb, &r), 0);
    while (!r.done && clock.now() < 10'000'000'000) step();
    const bool same = std::memcmp(rbuf, &data[chunk * V::kChunk], V::kChunk) == 0;
    out.verified += r.done && same;
    out.wrong += r.done && !same && r.ok;
  }
}

}  // namespace pollux::sim
