// NVM command set and data transfer (PRP and SGL).
#include <algorithm>
#include <cstring>

#include "emulator/nvme/controller.h"
#include "emulator/nvme/controller_internal.h"

namespace pollux::emu::nvme {

namespace {
constexpr uint32_t kBroadcastNsid = 0xffffffff;
constexpr size_t kMaxSglDescriptors = 65536;  // bounds a walk through (possibly cyclic) segments
}  // namespace

uint16_t Controller::dispatch_io(const sp::SubmissionEntry& sqe, uint32_t* dw0) {
  (void)dw0;
  const uint8_t op = sqe.opcode;
  if (op == sp::nvm::kRead || op == sp::nvm::kWrite) {
    const bool write = op == sp::nvm::kWrite;
    ++(write ? counters_.io_writes : counters_.io_reads);
    if (sqe.fuse() != 0) return kInvalidField;  // FUSES = 0
    Namespace* ns = find_ns(sqe.nsid);
    if (!ns) return kInvalidNamespace;
    return io_read_write(sqe, *ns, write);
  }
  if (sqe.fuse() != 0) return kInvalidField;
  switch (op) {
    case sp::nvm::kFlush:
      ++counters_.io_flushes;
      return io_flush(sqe);
    case sp::nvm::kCompare:
    case sp::nvm::kWriteZeroes:
    case sp::nvm::kDatasetManagement: {
      ++(op == sp::nvm::kCompare        ? counters_.io_compares
         : op == sp::nvm::kWriteZeroes ? counters_.io_write_zeroes
                                       : counters_.io_dataset_management);
      Namespace* ns = find_ns(sqe.nsid);
      if (!ns) return kInvalidNamespace;
      if (op == sp::nvm::kCompare) return io_compare(sqe, *ns);
      if (op == sp::nvm::kWriteZeroes) return io_write_zeroes(sqe, *ns);
      return io_dsm(sqe, *ns);
    }
    default:
      ++counters_.io_other;
      return gen_err(sp::sc::kInvalidOpcode);
  }
}

// Checks shared by the commands that move data for an LBA range (Read, Write, Compare):
// CDW12 bits we do not support, MDTS (checked before the range, as the spec orders), range.
uint16_t Controller::check_lba_range(const sp::SubmissionEntry& sqe, const Namespace& ns,
                                     uint64_t* slba, uint64_t* bytes) {
  *slba = sqe.slba();
  const uint32_t nlb = sqe.nlb();
  // PRINFO (no protection information), directives, reserved bits: unsupported.
  if (sqe.cdw12 & 0x3fff0000) return kInvalidField;
  *bytes = uint64_t{nlb} << ns.shift;
  if (mdts_bytes_ && *bytes > mdts_bytes_) return kInvalidField;
  if (*slba >= ns.nsze || nlb > ns.nsze - *slba) {
    err_lba_ = *slba;
    return gen_err(sp::sc::kLbaOutOfRange);
  }
  return kOk;
}

uint16_t Controller::io_read_write(const sp::SubmissionEntry& sqe, Namespace& ns, bool write) {
  uint64_t slba, bytes;
  if (const uint16_t st = check_lba_range(sqe, ns, &slba, &bytes); st != kOk) return st;
  if (uint16_t st = map_dptr(sqe, bytes, write ? Dir::kFromHost : Dir::kToHost); st != kOk) {
    return st;
  }
  uint64_t off = slba << ns.shift;
  NamespaceStore& store = *ns.store;
  bool ok = true;
  if (write) {
    if (journal_on_) journal(sqe.nsid, off, bytes);
    for (const Segment& s : segments_) {
      ok &= store.write(off, s.ptr, s.len);
      off += s.len;
    }
    if (ok && (sqe.cdw12 & sp::nvm::kCdw12Fua)) ok = store.flush();  // force unit access
  } else {
    for (const Segment& s : segments_) {
      if (s.ptr && stream_to_host_) {
        ok &= store.read_to_host(off, s.ptr, s.len);
      } else if (s.ptr) {
        ok &= store.read(off, s.ptr, s.len);
      }
      off += s.len;
    }
  }
  if (!ok) {
    ++media_errors_;
    err_lba_ = slba;
    return media_err(write ? sp::sc_media::kWriteFault : sp::sc_media::kUnrecoveredReadError);
  }
  if (write) {
    ++host_write_commands_;
    bytes_written_ += bytes;
  } else {
    ++host_read_commands_;
    bytes_read_ += bytes;
  }
  return kOk;
}

uint16_t Controller::io_compare(const sp::SubmissionEntry& sqe, Namespace& ns) {
  uint64_t slba, bytes;
  if (const uint16_t st = check_lba_range(sqe, ns, &slba, &bytes); st != kOk) return st;
  if (uint16_t st = map_dptr(sqe, bytes, Dir::kFromHost); st != kOk) return st;
  uint64_t off = slba << ns.shift;
  for (const Segment& s : segments_) {
    bool equal = true;
    if (!ns.store->compare(off, s.ptr, s.len, &equal)) {
      ++media_errors_;
      err_lba_ = slba;
      return media_err(sp::sc_media::kUnrecoveredReadError);
    }
    if (!equal) {
      err_lba_ = slba;
      return media_err(sp::sc_media::kCompareFailure);
    }
    off += s.len;
  }
  ++host_read_commands_;
  return kOk;
}

// Not limited by MDTS: no data is transferred.
uint16_t Controller::io_write_zeroes(const sp::SubmissionEntry& sqe, Namespace& ns) {
  const uint64_t slba = sqe.slba();
  const uint32_t nlb = sqe.nlb();
  if (sqe.cdw12 & 0x3dff0000) return kInvalidField;  // all but DEAC (25), FUA (30), LR (31)
  if (slba >= ns.nsze || nlb > ns.nsze - slba) {
    err_lba_ = slba;
    return gen_err(sp::sc::kLbaOutOfRange);
  }
  const uint64_t off = slba << ns.shift, len = uint64_t{nlb} << ns.shift;
  const bool deac = sqe.cdw12 & sp::nvm::kCdw12Deac;
  if (journal_on_) journal(sqe.nsid, off, len);
  bool ok = deac ? ns.store->deallocate(off, len) : ns.store->write_zeroes(off, len);
  if (ok && (sqe.cdw12 & sp::nvm::kCdw12Fua)) ok = ns.store->flush();
  if (!ok) {
    ++media_errors_;
    err_lba_ = slba;
    return media_err(sp::sc_media::kWriteFault);
  }
  return kOk;
}

// Deallocate ranges read back as zeroes. The other attributes (IDR, IDW, context attributes)
// are hints and are accepted without effect. Every range is checked before any is applied.
uint16_t Controller::io_dsm(const sp::SubmissionEntry& sqe, Namespace& ns) {
  const uint32_t nr = (sqe.cdw10 & 0xff) + 1;
  const size_t len = size_t{nr} * sizeof(sp::nvm::DsmRange);
  if (uint16_t st = map_dptr(sqe, len, Dir::kFromHost); st != kOk) return st;
  copy_from_host(admin_buf_.data());
  if (!(sqe.cdw11 & sp::nvm::kDsmDeallocate)) return kOk;
  sp::nvm::DsmRange r;
  for (uint32_t i = 0; i < nr; ++i) {
    std::memcpy(&r, admin_buf_.data() + i * sizeof r, sizeof r);
    if (r.slba > ns.nsze || r.length > ns.nsze - r.slba) {
      err_lba_ = r.slba;
      return gen_err(sp::sc::kLbaOutOfRange);
    }
  }
  for (uint32_t i = 0; i < nr; ++i) {
    std::memcpy(&r, admin_buf_.data() + i * sizeof r, sizeof r);
    if (r.length == 0) continue;
    if (!ns.store->deallocate(r.slba << ns.shift, uint64_t{r.length} << ns.shift)) {
      ++media_errors_;
      err_lba_ = r.slba;
      return media_err(sp::sc_media::kWriteFault);
    }
  }
  return kOk;
}

// NSID FFFFFFFFh flushes every namespace (Identify VWC bits 2:1 = 11b).
uint16_t Controller::io_flush(const sp::SubmissionEntry& sqe) {
  if (sqe.nsid != kBroadcastNsid && !find_ns(sqe.nsid)) return kInvalidNamespace;
  for (auto& ns : namespaces_) {
    if (sqe.nsid != kBroadcastNsid && ns->nsid != sqe.nsid) continue;
    if (!ns->store->flush()) {
      ++media_errors_;
      return media_err(sp::sc_media::kWriteFault);
    }
  }
  return kOk;
}

// -------------------------------------------------------------------- data transfer ---

uint16_t Controller::map_dptr(const sp::SubmissionEntry& sqe, size_t len, Dir dir) {
  segments_.clear();
  switch (sqe.psdt()) {
    case sp::kPsdtPrp: return map_prp(sqe.dptr.prp.prp1, sqe.dptr.prp.prp2, len);
    case sp::kPsdtSglMptrContiguous: {
      sp::SglDescriptor d;
      std::memcpy(&d, &sqe.dptr, sizeof d);
      return map_sgl(d, len, dir);
    }
    default: return kInvalidField;  // MPTR as an SGL (SGLS bit 19) is not offered
  }
}

uint16_t Controller::add_segment(uint64_t iova, size_t len) {
  uint8_t* p = dma_.translate(iova, len);
  if (p == nullptr) {
    ++counters_.iommu_faults;
    return kDataTransferError;
  }
  if (!segments_.empty()) {
    Segment& b = segments_.back();
    if (b.ptr && b.ptr + b.len == p) {
      b.len += len;
      return kOk;
    }
  }
  segments_.push_back(Segment{p, len});
  return kOk;
}

// PRP1 may carry any dword-aligned offset. If the rest fits in one page, PRP2 is that page
// (offset 0); else PRP2 points to a PRP list (dword-aligned offset). A list fills the rest of
// its page; when more entries are needed, the page's last entry points to the next list page.
// Every data entry after PRP1 and every chain pointer must have offset 0.
uint16_t Controller::map_prp(uint64_t prp1, uint64_t prp2, size_t len) {
  if (len == 0) return kOk;
  const uint64_t page = page_size_, mask = page - 1;
  if (prp1 & 3) return gen_err(sp::sc::kPrpOffsetInvalid);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(len, page - (prp1 & mask)));
  if (uint16_t st = add_segment(prp1, first); st != kOk) return st;
  uint64_t rem = len - first;
  if (rem == 0) return kOk;
  if (rem <= page) {
    if (prp2 & mask) return gen_err(sp::sc::kPrpOffsetInvalid);
    return add_segment(prp2, static_cast<size_t>(rem));
  }
  if (prp2 & 3) return gen_err(sp::sc::kPrpOffsetInvalid);
  uint64_t list = prp2;
  while (rem) {
    const uint64_t slots = (page - (list & mask)) / 8;
    // A list pointer in its page's last dword leaves no room for an entry: nothing would be
    // read and nothing consumed, for ever (found by vfio_user_nvme's fuzzer: a hostile host
    // hung the device).
    if (slots == 0) return gen_err(sp::sc::kPrpOffsetInvalid);
    const uint64_t need = (rem + page - 1) / page;
    const uint64_t n = std::min(slots, need);
    const uint8_t* entries = dma_.translate(list, n * 8);
    if (entries == nullptr) {
      ++counters_.iommu_faults;
      return kDataTransferError;
    }
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t e;
      std::memcpy(&e, entries + i * 8, 8);
      if (e & mask) return gen_err(sp::sc::kPrpOffsetInvalid);
      if (i == slots - 1 && rem > page) {  // last slot of a full list page: next list page
        list = e;
        break;
      }
      const size_t take = static_cast<size_t>(std::min(rem, page));
      if (uint16_t st = add_segment(e, take); st != kOk) return st;
      rem -= take;
    }
  }
  return kOk;
}

// SGL (PSDT 01b): SGL1 is a Data Block, Bit Bucket, Segment or Last Segment descriptor.
// Segments hold descriptors; only a segment's last descriptor may point to the next segment,
// and a Last Segment holds none. The SGL must describe exactly the transfer length (SGLS bit
// 18, longer SGLs, is not offered): otherwise Data SGL Length Invalid. Bit Buckets only on
// reads (controller to host).
uint16_t Controller::map_sgl(const sp::SglDescriptor& first, size_t len, Dir dir) {
  uint64_t remaining = len;
  size_t budget = kMaxSglDescriptors;
  const uint16_t kTypeInvalid = gen_err(sp::sc::kSglDescriptorTypeInvalid);
  const uint16_t kLengthInvalid = gen_err(sp::sc::kDataSglLengthInvalid);
  const uint16_t kSegmentInvalid = gen_err(sp::sc::kInvalidSglSegmentDescriptor);

  auto data = [&](const sp::SglDescriptor& d) -> uint16_t {
    if (d.subtype() != sp::sgl::kSubtypeAddress) return kTypeInvalid;
    if (d.length > remaining) return kLengthInvalid;
    if (d.type() == sp::sgl::kTypeBitBucket) {
      if (dir != Dir::kToHost) return kTypeInvalid;
      if (d.length) segments_.push_back(Segment{nullptr, d.length});
    } else if (d.length) {
      if (uint16_t st = add_segment(d.address, d.length); st != kOk) return st;
    }
    remaining -= d.length;
    return kOk;
  };
  auto is_data = [](uint8_t t) {
    return t == sp::sgl::kTypeDataBlock || t == sp::sgl::kTypeBitBucket;
  };
  auto is_segment = [](uint8_t t) {
    return t == sp::sgl::kTypeSegment || t == sp::sgl::kTypeLastSegment;
  };

  if (is_data(first.type())) {
    if (uint16_t st = data(first); st != kOk) return st;
    return remaining ? kLengthInvalid : kOk;
  }
  if (!is_segment(first.type())) return kTypeInvalid;
  sp::SglDescriptor seg = first;
  for (;;) {
    if (seg.subtype() != sp::sgl::kSubtypeAddress) return kTypeInvalid;
    if (seg.length == 0 || seg.length % sizeof(sp::SglDescriptor)) return kSegmentInvalid;
    const size_t count = seg.length / sizeof(sp::SglDescriptor);
    const uint8_t* list = dma_.translate(seg.address, seg.length);
    if (list == nullptr) {
      ++counters_.iommu_faults;
      return kDataTransferError;
    }
    bool chained = false;
    for (size_t i = 0; i < count; ++i) {
      if (budget-- == 0) return gen_err(sp::sc::kInvalidNumberOfSglDescriptors);
      sp::SglDescriptor d;
      std::memcpy(&d, list + i * sizeof d, sizeof d);
      if (is_segment(d.type())) {
        if (seg.type() == sp::sgl::kTypeLastSegment || i != count - 1) return kSegmentInvalid;
        seg = d;
        chained = true;
        break;
      }
      if (!is_data(d.type())) return kTypeInvalid;
      if (uint16_t st = data(d); st != kOk) return st;
    }
    if (!chained) break;
  }
  return remaining ? kLengthInvalid : kOk;
}

uint16_t Controller::copy_to_host(const void* src, size_t src_len, size_t len) {
  (void)len;
  const auto* p = static_cast<const uint8_t*>(src);
  for (const Segment& s : segments_) {
    if (s.ptr == nullptr) {
      const size_t skip = std::min(s.len, src_len);
      p += skip;
      src_len -= skip;
      continue;
    }
    const size_t n = std::min(s.len, src_len);
    if (n) std::memcpy(s.ptr, p, n);
    if (n < s.len) std::memset(s.ptr + n, 0, s.len - n);
    p += n;
    src_len -= n;
  }
  return kOk;
}

void Controller::copy_from_host(void* dst) {
  auto* p = static_cast<uint8_t*>(dst);
  for (const Segment& s : segments_) {
    std::memcpy(p, s.ptr, s.len);
    p += s.len;
  }
}

}  // namespace pollux::emu::nvme
