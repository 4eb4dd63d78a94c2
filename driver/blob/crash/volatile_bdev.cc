#include "driver/blob/crash/volatile_bdev.h"

#include <cstring>
#include <memory>

namespace pollux::blob::crash {

const char* to_string(CutPolicy p) {
  switch (p) {
    case CutPolicy::kLoseAll: return "lose-all";
    case CutPolicy::kKeepAll: return "keep-all";
    case CutPolicy::kTearRandomly: return "tear";
  }
  return "?";
}

struct VolatileBdev::Backend final : public bdev::Backend {
  Backend(event::Framework& fw, std::unique_ptr<VolatileBdev> dev) : fw(fw), dev(std::move(dev)) {
    fw.register_io_device(this, [](void*, void*) { return 0; }, [](void*, void*) {}, 0, "volatile");
  }
  bool supports(bdev::IoType t) const override {
    return t == bdev::IoType::kRead || t == bdev::IoType::kWrite || t == bdev::IoType::kFlush ||
           t == bdev::IoType::kWriteZeroes || t == bdev::IoType::kUnmap;
  }
  void* io_device() override { return this; }
  void destruct() override { fw.unregister_io_device(this, nullptr, nullptr); }
  void submit(bdev::BdevIo& io, void*) override { dev->submit(io); }
  event::Framework& fw;
  std::unique_ptr<VolatileBdev> dev;
};

VolatileBdev::VolatileBdev(uint64_t blocks, uint32_t bs)
    : bs_(bs), current_(blocks * bs, 0), durable_(blocks * bs, 0) {}

Result<VolatileBdev*> VolatileBdev::create(bdev::Manager& mgr, const std::string& name,
                                           uint64_t num_blocks, uint32_t block_size) {
  auto dev = std::unique_ptr<VolatileBdev>(new VolatileBdev(num_blocks, block_size));
  VolatileBdev* raw = dev.get();
  bdev::BdevProperties p;
  p.name = name;
  p.product = "volatile-cache test disk";
  p.block_size = block_size;
  p.num_blocks = num_blocks;
  p.write_cache = true;
  auto r = mgr.register_bdev(std::move(p), std::make_unique<Backend>(mgr.framework(), std::move(dev)),
                             "volatile");
  if (!r.ok()) return r.error();
  return raw;
}

void VolatileBdev::arm(uint64_t after, CutPolicy policy, uint64_t seed) {
  cut_after_ = after;
  policy_ = policy;
  rng_.seed(seed);
}

void VolatileBdev::power_on() {
  dead_ = false;
  commands_ = 0;
  cut_after_ = 0;
}

void VolatileBdev::power_cut() {
  dead_ = true;
  lost_candidates_ = 0;
  // Back to the durable image wherever the cache wrote, then what survived, oldest first.
  for (const Pending& p : cache_)
    std::memcpy(current_.data() + p.lba * bs_, durable_.data() + p.lba * bs_, p.data.size());
  for (const Pending& p : cache_) {
    const uint64_t blocks = p.data.size() / bs_;
    lost_candidates_ += blocks;
    // Random fate per write: lost, kept whole, or torn (each block on its own).
    const uint64_t fate = policy_ == CutPolicy::kKeepAll ? 1 : policy_ == CutPolicy::kLoseAll ? 0 : rng_() % 3;
    for (uint64_t b = 0; b < blocks; ++b) {
      const bool keep = fate == 1 || (fate == 2 && (rng_() & 1));
      if (keep) std::memcpy(current_.data() + (p.lba + b) * bs_, p.data.data() + b * bs_, bs_);
    }
  }
  for (const Pending& p : cache_)
    std::memcpy(durable_.data() + p.lba * bs_, current_.data() + p.lba * bs_, p.data.size());
  cache_.clear();
}

void VolatileBdev::submit(bdev::BdevIo& io) {
  if (dead_) return io.complete(bdev::IoStatus::kRemoved);
  ++commands_;
  const uint64_t at = io.offset_blocks() * bs_, bytes = io.num_blocks() * bs_;
  switch (io.type()) {
    case bdev::IoType::kRead: {
      uint64_t done = 0;
      for (int i = 0; i < io.iovcnt() && done < bytes; ++i) {
        const uint64_t n = std::min<uint64_t>(io.iovs()[i].iov_len, bytes - done);
        std::memcpy(io.iovs()[i].iov_base, current_.data() + at + done, n);
        done += n;
      }
      break;
    }
    case bdev::IoType::kWrite:
    case bdev::IoType::kWriteZeroes:
    case bdev::IoType::kUnmap: {
      Pending p{io.offset_blocks(), std::vector<uint8_t>(bytes, 0)};
      if (io.type() == bdev::IoType::kWrite) {
        uint64_t done = 0;
        for (int i = 0; i < io.iovcnt() && done < bytes; ++i) {
          const uint64_t n = std::min<uint64_t>(io.iovs()[i].iov_len, bytes - done);
          std::memcpy(p.data.data() + done, io.iovs()[i].iov_base, n);
          done += n;
        }
      }
      std::memcpy(current_.data() + at, p.data.data(), bytes);
      cache_.push_back(std::move(p));
      break;
    }
    case bdev::IoType::kFlush:
      for (const Pending& p : cache_)
        std::memcpy(durable_.data() + p.lba * bs_, p.data.data(), p.data.size());
      cache_.clear();
      break;
    default:
      return io.complete(bdev::IoStatus::kFailed);
  }
  const bool cut_now = cut_after_ != 0 && commands_ == cut_after_;
  if (cut_now) power_cut();  // after this command took effect; its completion still arrives
  io.complete(bdev::IoStatus::kSuccess);
}

}  // namespace pollux::blob::crash
