// Smoke test for //third_party:isal: ISA-L's CRCs against bitwise reference implementations,
// the published check values (CRC RevEng catalogue, input "123456789") and chaining.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "isa-l/crc.h"
#include "isa-l/crc64.h"

namespace {

// Reflected CRC-32 (poly 0xEDB88320 for CRC-32, 0x82F63B78 for CRC-32C), init and xorout ~0.
uint32_t RefCrc32Reflected(uint32_t poly, const uint8_t* p, size_t n) {
  uint32_t crc = ~0u;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ ((crc & 1u) ? poly : 0u);
  }
  return ~crc;
}

// CRC-16/T10-DIF (the NVMe protection-information guard): poly 0x8BB7, not reflected, init 0.
uint16_t RefCrc16T10Dif(const uint8_t* p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; ++i) {
    crc = static_cast<uint16_t>(crc ^ (p[i] << 8));
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<uint16_t>((crc & 0x8000u) ? (crc << 1) ^ 0x8BB7u : (crc << 1));
    }
  }
  return crc;
}

// CRC-64/XZ (ECMA-182 reflected): poly 0xC96C5795D7870F42, init and xorout ~0.
uint64_t RefCrc64Xz(const uint8_t* p, size_t n) {
  uint64_t crc = ~0ull;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ ((crc & 1u) ? 0xC96C5795D7870F42ull : 0ull);
  }
  return ~crc;
}

std::vector<uint8_t> PseudoRandomBytes(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 0x12345678u;
  for (auto& byte : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    byte = static_cast<uint8_t>(x);
  }
  return v;
}

TEST(IsalSmokeTest, CrcsMatchReferenceAndCheckValues) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  const size_t n = sizeof(check);

  // The reference implementations reproduce the catalogue check values...
  ASSERT_EQ(RefCrc32Reflected(0xEDB88320u, check, n), 0xCBF43926u);
  ASSERT_EQ(RefCrc32Reflected(0x82F63B78u, check, n), 0xE3069283u);
  ASSERT_EQ(RefCrc16T10Dif(check, n), 0xD0DBu);
  ASSERT_EQ(RefCrc64Xz(check, n), 0x995DC9BBDF1939FAull);

  // ...and so must ISA-L. crc32_iscsi takes the raw seed and returns the un-inverted register.
  EXPECT_EQ(crc32_gzip_refl(0, check, n), 0xCBF43926u);
  EXPECT_EQ(~crc32_iscsi(const_cast<uint8_t*>(check), n, ~0u), 0xE3069283u);
  EXPECT_EQ(crc16_t10dif(0, check, n), 0xD0DBu);
  EXPECT_EQ(crc64_ecma_refl(0, check, n), 0x995DC9BBDF1939FAull);
}

TEST(IsalSmokeTest, LargeBufferMatchesReferenceAndChains) {
  // 4 KiB plus an odd tail: exercises the SIMD folding paths and the byte-wise tail.
  std::vector<uint8_t> data = PseudoRandomBytes(4096 + 13);
  const size_t n = data.size();
  const uint32_t crc32c = ~crc32_iscsi(data.data(), n, ~0u);
  EXPECT_EQ(crc32c, RefCrc32Reflected(0x82F63B78u, data.data(), n));
  EXPECT_EQ(crc32_gzip_refl(0, data.data(), n), RefCrc32Reflected(0xEDB88320u, data.data(), n));
  EXPECT_EQ(crc16_t10dif(0, data.data(), n), RefCrc16T10Dif(data.data(), n));
  EXPECT_EQ(crc64_ecma_refl(0, data.data(), n), RefCrc64Xz(data.data(), n));

  // Chaining: the CRC of the first part seeds the CRC of the rest.
  const size_t half = 1000;
  const uint32_t first = crc32_gzip_refl(0, data.data(), half);
  EXPECT_EQ(crc32_gzip_refl(first, data.data() + half, n - half),
            crc32_gzip_refl(0, data.data(), n));

  data[77] ^= 0x01;  // A single flipped bit changes the CRC.
  EXPECT_NE(~crc32_iscsi(data.data(), n, ~0u), crc32c);
}

}  // namespace
