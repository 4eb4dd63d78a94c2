// Data patterns for verifying workloads (pollux-perf, pollux-bdevperf, scenarios): every
// block starts with its LBA and a generation number, the rest is derived from both, so a
// read that returns misdirected (wrong LBA), stale (old generation) or torn data is caught
// and described.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pollux::env {

void fill_pattern(uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t block_size,
                  uint64_t generation);
// True if every block matches; otherwise false with `why` naming the first bad block.
bool check_pattern(const uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t block_size,
                   uint64_t generation, std::string* why);

// A verify read first poisons its buffer: a device that reports success without moving data
// must not pass because the buffer still holds what the earlier write put there. The poison
// matches no pattern (its LBA field is beyond any device) and is not zeroes (what a block
// never written reads as); check_pattern names it ("no data transferred").
void poison(uint8_t* buf, std::size_t bytes);
bool is_poison(const uint8_t* block, uint32_t block_size);

}  // namespace pollux::env
