#include "driver/blob/format.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "isa-l/crc.h"

namespace pollux::blob {
namespace {

constexpr char kMagic[8] = {'P', 'L', 'X', 'B', 'L', 'O', 'B', 'S'};

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }  // the format is little-endian,
void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // like every host Pollux runs on
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint16_t get16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Appends descriptors to pages, starting a new page when one would not fit.
class PageWriter {
 public:
  uint8_t* reserve(std::size_t len) {
    if (pages_.empty() || used_ + len > kDescriptorArea) {
      pages_.emplace_back(kPageSize, 0);
      used_ = 0;
    }
    uint8_t* p = pages_.back().data() + kPageHeaderBytes + used_;
    used_ += len;
    put16(pages_.back().data() + 28, static_cast<uint16_t>(used_));
    return p;
  }
  std::vector<std::vector<uint8_t>> take() { return std::move(pages_); }

 private:
  std::vector<std::vector<uint8_t>> pages_;
  std::size_t used_ = 0;
};

void descriptor_header(uint8_t* p, DescriptorType t, std::size_t payload) {
  p[0] = t;
  p[1] = 0;
  put16(p + 2, static_cast<uint16_t>(payload));
}

constexpr std::size_t kDescHeader = 4;
constexpr std::size_t kFlagsPayload = 32;
constexpr std::size_t kExtentHeader = 16;
constexpr std::size_t kExtentRun = 16;
constexpr std::size_t kRunsPerDescriptor = (kDescriptorArea - kDescHeader - kExtentHeader) / kExtentRun;
constexpr std::size_t kXattrHeader = 4;

struct Run {
  uint64_t device_cluster;
  uint32_t length;
};

std::vector<Run> runs_of(const std::vector<uint64_t>& clusters) {
  std::vector<Run> runs;
  for (uint64_t c : clusters) {
    if (!runs.empty()) {
      Run& r = runs.back();
      const bool hole_continues = r.device_cluster == 0 && c == 0;
      const bool extent_continues = r.device_cluster != 0 && c == r.device_cluster + r.length;
      if ((hole_continues || extent_continues) && r.length < 0xffffffffu) {
        ++r.length;
        continue;
      }
    }
    runs.push_back({c, 1});
  }
  return runs;
}

Error page_error(uint32_t page, const std::string& what) {
  return make_error(EILSEQ, "md page " + std::to_string(page) + " of the chain: " + what);
}

}  // namespace

uint32_t crc32c(const void* data, std::size_t len) {
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)),
                      static_cast<int>(len), ~0u);
}

std::size_t mask_bytes(uint64_t bits) { return (bits + 63) / 64 * 8; }

// ------------------------------------------------------------------------ super block ---

void encode_super(const SuperBlock& sb, uint8_t* p) {
  std::memset(p, 0, kPageSize);
  std::memcpy(p, kMagic, 8);
  put32(p + 8, sb.version);
  put32(p + 12, sb.clean ? 1 : 0);
  put32(p + 16, sb.page_size);
  put32(p + 20, sb.io_unit_size);
  put32(p + 24, sb.cluster_size);
  put64(p + 32, sb.total_clusters);
  put64(p + 40, sb.page_mask_start);
  put64(p + 48, sb.page_mask_pages);
  put64(p + 56, sb.cluster_mask_start);
  put64(p + 64, sb.cluster_mask_pages);
  put64(p + 72, sb.md_start);
  put64(p + 80, sb.md_pages);
  put64(p + 88, sb.first_data_cluster);
  put64(p + 96, sb.super_blob);
  std::memcpy(p + 104, sb.bstype.data(), std::min(sb.bstype.size(), kBstypeLen));
  put64(p + 120, sb.device_bytes);
  put32(p + 128, sb.page_mask_crc);
  put32(p + 132, sb.cluster_mask_crc);
  put32(p + kPageCrcOffset, crc32c(p, kPageCrcOffset));
}

Result<SuperBlock> decode_super(const uint8_t* p) {
  if (std::memcmp(p, kMagic, 8) != 0) return make_error(EILSEQ, "no blobstore here (bad magic)");
  if (get32(p + kPageCrcOffset) != crc32c(p, kPageCrcOffset))
    return make_error(EILSEQ, "super block CRC mismatch");
  SuperBlock sb;
  sb.version = get32(p + 8);
  if (sb.version != kFormatVersion)
    return make_error(EPROTONOSUPPORT, "super block version " + std::to_string(sb.version) +
                                           " (this build reads " + std::to_string(kFormatVersion) + ")");
  const uint32_t clean = get32(p + 12);
  if (clean > 1) return make_error(EILSEQ, "super block clean flag " + std::to_string(clean));
  sb.clean = clean == 1;
  sb.page_size = get32(p + 16);
  sb.io_unit_size = get32(p + 20);
  sb.cluster_size = get32(p + 24);
  sb.total_clusters = get64(p + 32);
  sb.page_mask_start = get64(p + 40);
  sb.page_mask_pages = get64(p + 48);
  sb.cluster_mask_start = get64(p + 56);
  sb.cluster_mask_pages = get64(p + 64);
  sb.md_start = get64(p + 72);
  sb.md_pages = get64(p + 80);
  sb.first_data_cluster = get64(p + 88);
  sb.super_blob = get64(p + 96);
  const char* t = reinterpret_cast<const char*>(p + 104);
  sb.bstype.assign(t, strnlen(t, kBstypeLen));
  sb.device_bytes = get64(p + 120);
  sb.page_mask_crc = get32(p + 128);
  sb.cluster_mask_crc = get32(p + 132);
  if (sb.page_size != kPageSize) return make_error(EILSEQ, "page size " + std::to_string(sb.page_size));
  if (sb.io_unit_size == 0 || kPageSize % sb.io_unit_size != 0)
    return make_error(EILSEQ, "io_unit size " + std::to_string(sb.io_unit_size));
  if (sb.cluster_size < kPageSize || sb.cluster_size % kPageSize != 0)
    return make_error(EILSEQ, "cluster size " + std::to_string(sb.cluster_size));
  const uint64_t pages_per_cluster = sb.cluster_size / kPageSize;
  const uint64_t layout_pages = sb.first_data_cluster * pages_per_cluster;
  const bool layout_ok =
      sb.total_clusters > 0 && sb.total_clusters <= sb.device_bytes / sb.cluster_size &&
      sb.first_data_cluster < sb.total_clusters && sb.md_pages > 0 &&
      sb.md_pages < (uint64_t{1} << 31) && sb.page_mask_start == 1 &&
      sb.page_mask_pages == (mask_bytes(sb.md_pages) + kPageSize - 1) / kPageSize &&
      sb.cluster_mask_start == sb.page_mask_start + sb.page_mask_pages &&
      sb.cluster_mask_pages == (mask_bytes(sb.total_clusters) + kPageSize - 1) / kPageSize &&
      sb.md_start == sb.cluster_mask_start + sb.cluster_mask_pages &&
      sb.md_start + sb.md_pages <= layout_pages;
  if (!layout_ok) return make_error(EILSEQ, "super block layout is inconsistent");
  return sb;
}

// --------------------------------------------------------------------- metadata pages ---

Result<std::vector<std::vector<uint8_t>>> encode_blob(const BlobMetadata& md, uint64_t sequence) {
  PageWriter w;
  uint8_t* f = w.reserve(kDescHeader + kFlagsPayload);
  descriptor_header(f, kDescFlags, kFlagsPayload);
  put64(f + 4, md.flags);
  f[12] = static_cast<uint8_t>(md.clear_method);
  put64(f + 20, md.num_clusters);
  put64(f + 28, md.parent);

  const std::vector<Run> runs = runs_of(md.clusters);
  uint64_t blob_cluster = 0;
  for (std::size_t i = 0; i < runs.size(); i += kRunsPerDescriptor) {
    const std::size_t n = std::min(kRunsPerDescriptor, runs.size() - i);
    const std::size_t payload = kExtentHeader + n * kExtentRun;
    uint8_t* e = w.reserve(kDescHeader + payload);
    descriptor_header(e, kDescExtents, payload);
    put64(e + 4, blob_cluster);
    put32(e + 12, static_cast<uint32_t>(n));
    for (std::size_t k = 0; k < n; ++k) {
      uint8_t* r = e + 4 + kExtentHeader + k * kExtentRun;
      put64(r, runs[i + k].device_cluster);
      put32(r + 8, runs[i + k].length);
      blob_cluster += runs[i + k].length;
    }
  }
  auto put_xattrs = [&](const std::vector<Xattr>& xs, DescriptorType t) -> bool {
    for (const Xattr& x : xs) {
      const std::size_t payload = kXattrHeader + x.name.size() + x.value.size();
      if (kDescHeader + payload > kDescriptorArea || x.name.size() > 0xffff) return false;
      uint8_t* d = w.reserve(kDescHeader + payload);
      descriptor_header(d, t, payload);
      put16(d + 4, static_cast<uint16_t>(x.name.size()));
      put16(d + 6, static_cast<uint16_t>(x.value.size()));
      std::memcpy(d + 8, x.name.data(), x.name.size());
      if (!x.value.empty()) std::memcpy(d + 8 + x.name.size(), x.value.data(), x.value.size());
    }
    return true;
  };
  if (!put_xattrs(md.xattrs, kDescXattr) || !put_xattrs(md.internal_xattrs, kDescXattrInternal))
    return make_error(E2BIG, "an xattr does not fit in one metadata page");

  auto pages = w.take();
  for (std::size_t i = 0; i < pages.size(); ++i) {
    uint8_t* p = pages[i].data();
    put64(p, md.id);
    put64(p + 8, sequence);
    put32(p + 16, kNoPage);
    put32(p + 20, static_cast<uint32_t>(i));
    put32(p + 24, static_cast<uint32_t>(pages.size()));
  }
  return pages;
}

void link_pages(std::vector<std::vector<uint8_t>>& pages, const std::vector<uint32_t>& where) {
  for (std::size_t i = 0; i < pages.size(); ++i) {
    uint8_t* p = pages[i].data();
    put32(p + 16, i + 1 < pages.size() ? where[i + 1] : kNoPage);
    put32(p + kPageCrcOffset, crc32c(p, kPageCrcOffset));
  }
}

bool decode_header(const uint8_t* p, PageHeader* h, std::string* why) {
  if (get32(p + kPageCrcOffset) != crc32c(p, kPageCrcOffset)) {
    *why = "CRC mismatch";
    return false;
  }
  h->id = get64(p);
  h->sequence = get64(p + 8);
  h->next_page = get32(p + 16);
  h->index = get32(p + 20);
  h->count = get32(p + 24);
  h->descriptor_bytes = get16(p + 28);
  if (h->id == kInvalidBlobId) *why = "blob id 0";
  else if (h->sequence == 0) *why = "sequence 0";
  else if (h->count == 0 || h->index >= h->count) *why = "chain position out of range";
  else if ((h->next_page == kNoPage) != (h->index + 1 == h->count)) *why = "chain link does not match position";
  else if (h->descriptor_bytes > kDescriptorArea) *why = "descriptor bytes past the page";
  else if (get16(p + 30) != 0) *why = "reserved header bytes set";
  else return true;
  return false;
}

Result<BlobMetadata> decode_blob(const std::vector<const uint8_t*>& chain, uint64_t total_clusters) {
  BlobMetadata md;
  bool have_flags = false;
  uint64_t covered = 0;
  std::set<std::string> names[2];
  for (uint32_t pi = 0; pi < chain.size(); ++pi) {
    const uint8_t* p = chain[pi];
    if (pi == 0) md.id = get64(p);
    const std::size_t used = get16(p + 28);
    std::size_t at = 0;
    while (at < used) {
      if (used - at < kDescHeader) return page_error(pi, "truncated descriptor header");
      const uint8_t* d = p + kPageHeaderBytes + at;
      const std::size_t len = get16(d + 2);
      if (d[1] != 0) return page_error(pi, "descriptor reserved byte set");
      if (len > used - at - kDescHeader) return page_error(pi, "descriptor runs past the page");
      const uint8_t* body = d + kDescHeader;
      switch (d[0]) {
        case kDescFlags: {
          if (have_flags || pi != 0 || at != 0) return page_error(pi, "flags descriptor not first or repeated");
          if (len != kFlagsPayload) return page_error(pi, "flags descriptor length");
          have_flags = true;
          md.flags = get64(body);
          const uint8_t cm = body[8];
          if (md.flags & ~kKnownFlags) return page_error(pi, "unknown blob flags");
          if (cm > static_cast<uint8_t>(ClearMethod::kWriteZeroes)) return page_error(pi, "unknown clear method");
          for (int i = 9; i < 16; ++i)
            if (body[i] != 0) return page_error(pi, "flags descriptor padding set");
          md.clear_method = static_cast<ClearMethod>(cm);
          md.num_clusters = get64(body + 16);
          md.parent = get64(body + 24);
          if (md.num_clusters > kMaxBlobClusters) return page_error(pi, "blob size out of range");
          if ((md.parent != kInvalidBlobId) != ((md.flags & kFlagClone) != 0))
            return page_error(pi, "clone flag and parent disagree");
          if (md.parent == md.id) return page_error(pi, "blob is its own parent");
          if ((md.flags & kFlagSnapshot) && !(md.flags & kFlagReadOnly))
            return page_error(pi, "writable snapshot");
          md.clusters.assign(md.num_clusters, 0);
          break;
        }
        case kDescExtents: {
          if (!have_flags) return page_error(pi, "extents before flags");
          if (len < kExtentHeader) return page_error(pi, "extent descriptor too short");
          const uint64_t start = get64(body);
          const uint32_t n = get32(body + 8);
          if (get32(body + 12) != 0) return page_error(pi, "extent padding set");
          if (len != kExtentHeader + uint64_t{n} * kExtentRun) return page_error(pi, "extent run count vs length");
          if (start != covered) return page_error(pi, "extents out of order or overlapping");
          for (uint32_t k = 0; k < n; ++k) {
            const uint8_t* r = body + kExtentHeader + k * kExtentRun;
            const uint64_t dev = get64(r);
            const uint32_t rl = get32(r + 8);
            if (get32(r + 12) != 0) return page_error(pi, "extent run padding set");
            if (rl == 0) return page_error(pi, "empty extent run");
            if (covered + rl > md.num_clusters) return page_error(pi, "extent past the blob's size");
            if (dev != 0 && (dev >= total_clusters || rl > total_clusters - dev))
              return page_error(pi, "cluster out of range (" + std::to_string(dev) + "+" +
                                        std::to_string(rl) + " of " + std::to_string(total_clusters) + ")");
            for (uint32_t c = 0; c < rl; ++c) md.clusters[covered + c] = dev ? dev + c : 0;
            covered += rl;
          }
          break;
        }
        case kDescXattr:
        case kDescXattrInternal: {
          if (!have_flags) return page_error(pi, "xattr before flags");
          if (len < kXattrHeader) return page_error(pi, "xattr descriptor too short");
          const std::size_t nl = get16(body), vl = get16(body + 2);
          if (nl == 0 || kXattrHeader + nl + vl != len) return page_error(pi, "xattr lengths");
          Xattr x;
          x.name.assign(reinterpret_cast<const char*>(body + 4), nl);
          x.value.assign(body + 4 + nl, body + 4 + nl + vl);
          const int k = d[0] == kDescXattr ? 0 : 1;
          if (!names[k].insert(x.name).second) return page_error(pi, "duplicate xattr");
          (k == 0 ? md.xattrs : md.internal_xattrs).push_back(std::move(x));
          break;
        }
        default:
          return page_error(pi, "unknown descriptor type " + std::to_string(d[0]));
      }
      at += kDescHeader + len;
    }
    for (std::size_t i = kPageHeaderBytes + used; i < kPageCrcOffset; ++i)
      if (p[i] != 0) return page_error(pi, "bytes after the descriptors");
  }
  if (!have_flags) return make_error(EILSEQ, "no flags descriptor");
  if (covered != md.num_clusters)
    return make_error(EILSEQ, "extents cover " + std::to_string(covered) + " of " +
                                  std::to_string(md.num_clusters) + " clusters");
  if (!(md.flags & kFlagThin))
    for (uint64_t c : md.clusters)
      if (c == 0) return make_error(EILSEQ, "thick blob with an unallocated cluster");
  return md;
}

}  // namespace pollux::blob
