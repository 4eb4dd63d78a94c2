#include "emulator/timing/command_processor.h"

#include <algorithm>
#include <cmath>

namespace pollux::emu::timing {

namespace sp = ::pollux::spec::nvme;

CommandProcessor::CommandProcessor(sc_core::sc_module_name n, const FirmwareProfile& fw,
                                   uint32_t lba_shift, uint32_t page_size)
    : sc_module(n),
      fw_(fw),
      cores_(fw.cores, 0),
      core_dir_(fw.cores, Dir::kOther),
      rng_state_(fw.seed),
      lba_shift_(lba_shift),
      page_size_(page_size) {}

SimTime CommandProcessor::firmware(SimTime start, SimTime cost, Dir dir) {
  const auto core = std::min_element(cores_.begin(), cores_.end());
  if (dir != Dir::kOther) {
    Dir& last = core_dir_[static_cast<size_t>(core - cores_.begin())];
    if (last != Dir::kOther && last != dir) cost += fw_.turnaround;
    last = dir;
  }
  if (fw_.jitter > 0 && cost != 0) {
    // (1 - jitter) of the time is fixed, the rest exponential with the same mean: by hand
    // (splitmix64, -log), so the same seed gives the same run with any standard library.
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    const double u = double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    const double c = double(cost);
    cost = static_cast<SimTime>(c * (1 - fw_.jitter) - c * fw_.jitter * std::log(1.0 - u));
  }
  *core = std::max(start, *core) + cost;
  return *core;
}

bool CommandProcessor::in_range(uint64_t slba, uint32_t nlb) const {
  const uint64_t blocks = capacity_bytes_ >> lba_shift_;
  return slba < blocks && nlb <= blocks - slba;
}

// A PRP list is needed when the data crosses more than two memory pages; the device reads it
// (8 bytes an entry) before moving data. SGL segments are read the same way.
SimTime CommandProcessor::fetch_prp_list(SimTime t, const sp::SubmissionEntry& sqe,
                                         uint64_t bytes) {
  const bool sgl = sqe.psdt() != sp::kPsdtPrp;
  const uint64_t offset = sgl ? 0 : sqe.dptr.prp.prp1 & (page_size_ - 1);
  const uint64_t pages = (offset + bytes + page_size_ - 1) / page_size_;
  if (!sgl && pages <= 2) return t;
  if (sgl && sqe.dptr.sgl1.type() == sp::sgl::kTypeDataBlock) return t;
  ++stats_.prp_list_fetches;
  return link->dma_read(t, sgl ? 16 * pages : 8 * (pages - 1));
}

// Programs what the media still buffers; the cache slots holding it become free (durable).
SimTime CommandProcessor::flush_cache(SimTime t) {
  const Media::WriteOutcome f = media->flush(t);
  if (f.units && cache->enabled()) cache->release_pending(f.units, f.done);
  return f.done;
}

SimTime CommandProcessor::read(SimTime t, uint64_t slba, uint32_t nlb,
                               const sp::SubmissionEntry& sqe) {
  const uint64_t bytes = uint64_t{nlb} << lba_shift_;
  t = fetch_prp_list(t, sqe, bytes);
  const uint64_t begin_byte = slba << lba_shift_, end_byte = begin_byte + bytes;
  const uint64_t first = begin_byte / kUnitBytes;
  const uint64_t last = (end_byte - 1) / kUnitBytes;
  stats_.units_read += last - first + 1;
  // Each unit's data goes to the host as soon as the media returns it, through the data path
  // and the link (streaming: the link transfer starts when the path starts moving it); the
  // CQE follows the last byte on the same path.
  auto to_host = [&](SimTime ready, uint64_t n) {
    const DataPath::Slot path = datapath->to_host(ready + fw_.read_latency, n);
    return std::max(link->dma_write(path.begin, n), path.end);
  };
  if (first == last) return to_host(media->read(t, first), bytes);
  SimTime done = t;
  for (uint64_t u = first; u <= last; ++u) {
    const uint64_t lo = std::max(begin_byte, u * kUnitBytes);
    const uint64_t hi = std::min(end_byte, (u + 1) * kUnitBytes);
    done = std::max(done, to_host(media->read(t + fw_.per_unit * (u - first), u), hi - lo));
  }
  return done;
}

SimTime CommandProcessor::write(SimTime t, uint64_t slba, uint32_t nlb,
                                const sp::SubmissionEntry& sqe) {
  const uint64_t bytes = uint64_t{nlb} << lba_shift_;
  t = fetch_prp_list(t, sqe, bytes);
  // Data from the host over the link, streaming through the data path into the controller.
  const DataPath::Slot path = datapath->from_host(t, bytes);
  t = std::max(link->dma_read(t, bytes), path.end);
  const bool fua = (sqe.cdw12 >> 30) & 1;
  const uint64_t first = (slba << lba_shift_) / kUnitBytes;
  const uint64_t last = (((slba + nlb) << lba_shift_) - 1) / kUnitBytes;
  SimTime acked = t, durable = t;
  for (uint64_t u = first; u <= last; ++u) {
    const SimTime start = t + fw_.per_unit * (u - first);
    if (cache->enabled()) {
      const SimTime slot = cache->admit(start);
      const Media::WriteOutcome w = media->write(slot, u);
      if (w.units) cache->release_pending(w.units, w.done);
      acked = std::max(acked, slot);
    } else {
      const Media::WriteOutcome w = media->write(start, u);
      durable = std::max(durable, w.units ? w.done : media->flush(start).done);
    }
  }
  stats_.units_written += last - first + 1;
  if (!cache->enabled()) return durable + fw_.write_latency;
  if (fua && !cache_protected_) return std::max(flush_cache(acked), cache->drained_at());
  return acked + fw_.write_latency;
}

SimTime CommandProcessor::process(uint16_t sqid, const sp::SubmissionEntry& sqe, SimTime t) {
  if (sqid == 0) {
    ++stats_.admin;
    return link->dma_write(firmware(t, fw_.admin), 16);
  }
  const uint8_t opc = sqe.opcode;
  const uint64_t slba = sqe.slba();
  const uint32_t nlb = sqe.nlb();
  SimTime done;
  switch (opc) {
    case sp::nvm::kRead:
      ++stats_.reads;
      done = firmware(t, fw_.read, Dir::kRead);
      if (in_range(slba, nlb)) done = read(done, slba, nlb, sqe);  // else: an error, no data
      break;
    case sp::nvm::kWrite:
      ++stats_.writes;
      done = firmware(t, fw_.write, Dir::kWrite);
      if (in_range(slba, nlb)) done = write(done, slba, nlb, sqe);
      break;
    case sp::nvm::kFlush: {
      ++stats_.flushes;
      const SimTime f = firmware(t, fw_.flush);
      done = f;
      if (!(cache_protected_ && cache->enabled())) done = std::max({f, flush_cache(f), cache->drained_at()});
      break;
    }
    default:
      ++stats_.other;
      done = firmware(t, fw_.other);
      break;
  }
  return link->dma_write(done, 16);
}

}  // namespace pollux::emu::timing
