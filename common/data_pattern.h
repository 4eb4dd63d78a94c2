// The verification data pattern, a pure function of (LBA, generation): every block starts
// with its LBA and the generation, the rest is an xorshift stream seeded from both. The
// driver's workloads write it (driver/env/pattern.h adds the checks that name what went
// wrong); the emulator's memory store recognises it and keeps only the seed. Shared here so
// neither side includes the other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::data_pattern {

// `blocks` consecutive blocks of `block_size` bytes (a multiple of 8), LBAs lba, lba+1, ...
void fill(uint8_t* buf, uint64_t lba, uint32_t blocks, uint32_t block_size, uint64_t generation);

// True if the `block_size` bytes at `block` are exactly fill(lba, 1 block, generation).
bool matches(const uint8_t* block, uint64_t lba, uint32_t block_size, uint64_t generation);

// The pattern's third word (the first one derived from the seed): a cheap first check
// before matches().
uint64_t first_stream_word(uint64_t lba, uint64_t generation);

}  // namespace pollux::data_pattern
