// The blobstore's on-disk format (docs/BLOBSTORE.md describes it byte by byte): the super
// block, the mask region and 4 KiB metadata pages of descriptors. Everything here is pure
// (bytes in, structures or a readable error out) so the parser can be fuzzed on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "driver/env/result.h"

namespace pollux::blob {

using BlobId = uint64_t;
inline constexpr BlobId kInvalidBlobId = 0;

inline constexpr uint32_t kPageSize = 4096;
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kNoPage = 0xffffffffu;
inline constexpr std::size_t kBstypeLen = 16;
// The largest blob, in clusters: bounds the cluster map a bad metadata page (or a request) can
// make the store allocate (32 MiB).
inline constexpr uint64_t kMaxBlobClusters = uint64_t{1} << 22;

uint32_t crc32c(const void* data, std::size_t len);

// ---- super block (page 0) ----
struct SuperBlock {
  uint32_t version = kFormatVersion;
  bool clean = false;
  uint32_t page_size = kPageSize;
  uint32_t io_unit_size = 512;
  uint32_t cluster_size = 1 << 20;
  uint64_t total_clusters = 0;
  uint64_t page_mask_start = 0, page_mask_pages = 0;        // used-page mask (md pages)
  uint64_t cluster_mask_start = 0, cluster_mask_pages = 0;  // used-cluster mask
  uint64_t md_start = 0, md_pages = 0;                      // metadata region (pages)
  uint64_t first_data_cluster = 0;  // clusters below hold the super, masks and md region
  BlobId super_blob = kInvalidBlobId;
  std::string bstype;  // up to 16 bytes
  uint64_t device_bytes = 0;
  uint32_t page_mask_crc = 0, cluster_mask_crc = 0;  // valid when clean
};
void encode_super(const SuperBlock& sb, uint8_t* page);
Result<SuperBlock> decode_super(const uint8_t* page);

// ---- metadata pages ----
enum BlobFlag : uint64_t {
  kFlagThin = 1u << 0,
  kFlagReadOnly = 1u << 1,
  kFlagSnapshot = 1u << 2,
  kFlagClone = 1u << 3,
};
inline constexpr uint64_t kKnownFlags = kFlagThin | kFlagReadOnly | kFlagSnapshot | kFlagClone;

enum class ClearMethod : uint8_t { kDefault = 0, kNone = 1, kUnmap = 2, kWriteZeroes = 3 };

enum DescriptorType : uint8_t {
  kDescFlags = 1,
  kDescExtents = 2,
  kDescXattr = 3,
  kDescXattrInternal = 4,
};

struct Xattr {
  std::string name;
  std::vector<uint8_t> value;
  bool operator==(const Xattr&) const = default;
};

// A blob's whole metadata, as one version of it is stored (and as it lives in memory).
struct BlobMetadata {
  BlobId id = kInvalidBlobId;
  uint64_t flags = 0;
  ClearMethod clear_method = ClearMethod::kDefault;
  uint64_t num_clusters = 0;
  BlobId parent = kInvalidBlobId;
  std::vector<uint64_t> clusters;  // per blob cluster: device cluster, 0 = not allocated
  std::vector<Xattr> xattrs, internal_xattrs;
};

// Header of one metadata page.
struct PageHeader {
  BlobId id = 0;
  uint64_t sequence = 0;
  uint32_t next_page = kNoPage;  // md-region index of the next page of this version
  uint32_t index = 0;            // position in the chain
  uint32_t count = 0;            // pages in the chain
  uint16_t descriptor_bytes = 0;
};
inline constexpr std::size_t kPageHeaderBytes = 32;
inline constexpr std::size_t kPageCrcOffset = kPageSize - 4;
inline constexpr std::size_t kDescriptorArea = kPageCrcOffset - kPageHeaderBytes;

// Serialises md into as many page images as it takes (each kPageSize bytes, header and CRC
// filled in; next_page left to the caller via link_pages()). -E2BIG if one xattr cannot fit
// in a page.
Result<std::vector<std::vector<uint8_t>>> encode_blob(const BlobMetadata& md, uint64_t sequence);
// Writes the chain links (page i -> where[i+1]) and recomputes each CRC.
void link_pages(std::vector<std::vector<uint8_t>>& pages, const std::vector<uint32_t>& where);

// Checks one page's CRC and header; false with *why on failure.
bool decode_header(const uint8_t* page, PageHeader* h, std::string* why);
// Parses a complete chain (pages in chain order, headers already checked to match) into md.
// total_clusters bounds the extents; errors name the page and descriptor.
Result<BlobMetadata> decode_blob(const std::vector<const uint8_t*>& chain, uint64_t total_clusters);

// Bit masks, stored as little-endian 64-bit words.
std::size_t mask_bytes(uint64_t bits);

}  // namespace pollux::blob
