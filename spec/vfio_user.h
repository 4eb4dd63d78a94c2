// vfio-user wire formats (QEMU docs/interop/vfio-user.rst, protocol version 0.1): the message
// header, command numbers, payload structures and the VFIO constants they carry (identical to
// <linux/vfio.h>, checked by vfio_user_layout_test). All data is in host byte order.
//
// No behaviour here. The vfio-user server (emulator/vfio_user) and client
// (driver/env/vfio_user_client) both include this and nothing of each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pollux::spec::vfio_user {

// ------------------------------------------------------------------------------ version ---
inline constexpr uint16_t kMajor = 0;
inline constexpr uint16_t kMinor = 1;

// Capability defaults when a peer does not state them (spec "Version").
inline constexpr uint32_t kDefaultMaxMsgFds = 1;
inline constexpr uint32_t kDefaultMaxDataXferSize = 1u << 20;
inline constexpr uint32_t kDefaultMaxDmaMaps = 65535;
inline constexpr uint64_t kDefaultPgsizes = 4096;

// ----------------------------------------------------------------------------- commands ---
namespace cmd {
inline constexpr uint16_t kVersion = 1;
inline constexpr uint16_t kDmaMap = 2;
inline constexpr uint16_t kDmaUnmap = 3;
inline constexpr uint16_t kDeviceGetInfo = 4;
inline constexpr uint16_t kDeviceGetRegionInfo = 5;
inline constexpr uint16_t kDeviceGetRegionIoFds = 6;
inline constexpr uint16_t kDeviceGetIrqInfo = 7;
inline constexpr uint16_t kDeviceSetIrqs = 8;
inline constexpr uint16_t kRegionRead = 9;
inline constexpr uint16_t kRegionWrite = 10;
inline constexpr uint16_t kDmaRead = 11;   // server -> client
inline constexpr uint16_t kDmaWrite = 12;  // server -> client
inline constexpr uint16_t kDeviceReset = 13;
inline constexpr uint16_t kDirtyPages = 14;  // earlier revisions; retired, number kept reserved
inline constexpr uint16_t kRegionWriteMulti = 15;
inline constexpr uint16_t kDeviceFeature = 16;  // migration + DMA (dirty page) logging
inline constexpr uint16_t kMigDataRead = 17;
inline constexpr uint16_t kMigDataWrite = 18;
inline constexpr uint16_t kMax = 18;

// Commands whose request may carry file descriptors (SCM_RIGHTS): DMA_MAP (the memory to
// map) and DEVICE_SET_IRQS (eventfds). Every other request carries none; a peer that attaches
// some anyway (SPDK's host sends the region's fd with DMA_UNMAP) is answered as if it had not,
// and the fds are closed, as libvfio-user does.
constexpr bool request_takes_fds(uint16_t command) {
  return command == kDmaMap || command == kDeviceSetIrqs;
}
}  // namespace cmd

// ------------------------------------------------------------------------------- header ---
struct Header {
  uint16_t msg_id;
  uint16_t command;
  uint32_t msg_size;  // the whole message, header included
  uint32_t flags;
  uint32_t error;  // errno (positive) in an error reply; reserved in a command
};
static_assert(sizeof(Header) == 16);
static_assert(offsetof(Header, command) == 2 && offsetof(Header, msg_size) == 4 &&
              offsetof(Header, flags) == 8 && offsetof(Header, error) == 12);

namespace flags {
inline constexpr uint32_t kTypeMask = 0xf;
inline constexpr uint32_t kTypeCommand = 0x0;
inline constexpr uint32_t kTypeReply = 0x1;
inline constexpr uint32_t kNoReply = 1u << 4;
inline constexpr uint32_t kError = 1u << 5;
}  // namespace flags

// ------------------------------------------------------------------------------ VERSION ---
// Followed by optional NUL-terminated UTF-8 JSON:
//   {"capabilities":{"max_msg_fds":N,"max_data_xfer_size":N,"max_dma_maps":N,"pgsizes":N}}
struct Version {
  uint16_t major;
  uint16_t minor;
};
static_assert(sizeof(Version) == 4);

// JSON capability names.
inline constexpr const char* kCapabilities = "capabilities";
inline constexpr const char* kCapMaxMsgFds = "max_msg_fds";
inline constexpr const char* kCapMaxDataXferSize = "max_data_xfer_size";
inline constexpr const char* kCapMaxDmaMaps = "max_dma_maps";
inline constexpr const char* kCapPgsizes = "pgsizes";
inline constexpr const char* kCapTwinSocket = "twin_socket";
inline constexpr const char* kCapWriteMultiple = "write_multiple";

// ------------------------------------------------------------------------ DMA_MAP/UNMAP ---
// DMA_MAP: one fd in the ancillary data when the server may mmap the memory.
struct DmaMap {
  uint32_t argsz;  // sizeof(DmaMap)
  uint32_t flags;  // kDmaRead | kDmaWrite
  uint64_t offset;  // file offset within the fd
  uint64_t address;  // IOVA
  uint64_t size;
};
static_assert(sizeof(DmaMap) == 32);
static_assert(offsetof(DmaMap, offset) == 8 && offsetof(DmaMap, address) == 16 &&
              offsetof(DmaMap, size) == 24);

inline constexpr uint32_t kDmaRead = 1u << 0;
inline constexpr uint32_t kDmaWrite = 1u << 1;

// DMA_UNMAP: request and reply (the reply echoes the entry).
struct DmaUnmap {
  uint32_t argsz;
  uint32_t flags;  // 0 in this version
  uint64_t address;
  uint64_t size;
};
static_assert(sizeof(DmaUnmap) == 24);
static_assert(offsetof(DmaUnmap, address) == 8 && offsetof(DmaUnmap, size) == 16);

// ---------------------------------------------------------------------- DEVICE_GET_INFO ---
struct DeviceInfo {
  uint32_t argsz;
  uint32_t flags;  // kDeviceFlagReset | kDeviceFlagPci
  uint32_t num_regions;
  uint32_t num_irqs;
};
static_assert(sizeof(DeviceInfo) == 16);

inline constexpr uint32_t kDeviceFlagReset = 1u << 0;  // VFIO_DEVICE_FLAGS_RESET
inline constexpr uint32_t kDeviceFlagPci = 1u << 1;    // VFIO_DEVICE_FLAGS_PCI

// ------------------------------------------------------------------------ PCI indices ---
// enum of VFIO_PCI_*_REGION_INDEX / VFIO_PCI_*_IRQ_INDEX.
namespace region {
inline constexpr uint32_t kBar0 = 0;  // BARn = n for n in 0..5
inline constexpr uint32_t kBar5 = 5;
inline constexpr uint32_t kRom = 6;
inline constexpr uint32_t kConfig = 7;
inline constexpr uint32_t kVga = 8;
inline constexpr uint32_t kNumPciRegions = 9;  // VFIO_PCI_NUM_REGIONS
}  // namespace region

namespace irq {
inline constexpr uint32_t kIntx = 0;
inline constexpr uint32_t kMsi = 1;
inline constexpr uint32_t kMsix = 2;
inline constexpr uint32_t kErr = 3;
inline constexpr uint32_t kReq = 4;
inline constexpr uint32_t kNumPciIrqs = 5;  // VFIO_PCI_NUM_IRQS
}  // namespace irq

// --------------------------------------------------------------- DEVICE_GET_REGION_INFO ---
// Reply: RegionInfo, then (when argsz allows) the capability chain at cap_offset. When the
// request's argsz is too small for the chain, the reply carries only RegionInfo with argsz =
// the size needed and cap_offset = 0. An mmappable region's fd travels with the reply.
struct RegionInfo {
  uint32_t argsz;
  uint32_t flags;  // kRegionFlag*
  uint32_t index;
  uint32_t cap_offset;  // from the start of RegionInfo; 0 = none
  uint64_t size;
  uint64_t offset;  // mmap offset of the region in its fd (base for sparse areas)
};
static_assert(sizeof(RegionInfo) == 32);
static_assert(offsetof(RegionInfo, size) == 16 && offsetof(RegionInfo, offset) == 24);

inline constexpr uint32_t kRegionFlagRead = 1u << 0;   // VFIO_REGION_INFO_FLAG_READ
inline constexpr uint32_t kRegionFlagWrite = 1u << 1;  // VFIO_REGION_INFO_FLAG_WRITE
inline constexpr uint32_t kRegionFlagMmap = 1u << 2;   // VFIO_REGION_INFO_FLAG_MMAP
inline constexpr uint32_t kRegionFlagCaps = 1u << 3;   // VFIO_REGION_INFO_FLAG_CAPS

// struct vfio_info_cap_header
struct CapHeader {
  uint16_t id;
  uint16_t version;
  uint32_t next;  // offset of the next capability from the start of RegionInfo; 0 = last
};
static_assert(sizeof(CapHeader) == 8);

inline constexpr uint16_t kCapSparseMmap = 1;  // VFIO_REGION_INFO_CAP_SPARSE_MMAP
inline constexpr uint16_t kCapSparseMmapVersion = 1;
inline constexpr uint16_t kCapType = 2;  // VFIO_REGION_INFO_CAP_TYPE

// struct vfio_region_info_cap_sparse_mmap, followed by nr_areas SparseMmapArea.
struct SparseMmapCap {
  CapHeader header;
  uint32_t nr_areas;
  uint32_t reserved;
};
static_assert(sizeof(SparseMmapCap) == 16);

// struct vfio_region_sparse_mmap_area: offset relative to RegionInfo::offset.
struct SparseMmapArea {
  uint64_t offset;
  uint64_t size;
};
static_assert(sizeof(SparseMmapArea) == 16);

// ------------------------------------------------------------ DEVICE_GET_REGION_IO_FDS ---
struct RegionIoFds {
  uint32_t argsz;
  uint32_t flags;
  uint32_t index;
  uint32_t count;  // followed (reply) by count SubRegionIoFd
};
static_assert(sizeof(RegionIoFds) == 16);

struct SubRegionIoFd {
  uint64_t offset;
  uint64_t size;
  uint32_t fd_index;
  uint32_t type;  // kIoFdTypeIoeventfd / kIoFdTypeIoregionfd
  uint32_t flags;
  uint32_t padding;
  uint64_t datamatch_or_user_data;
};
static_assert(sizeof(SubRegionIoFd) == 40);

inline constexpr uint32_t kIoFdTypeIoeventfd = 0;
inline constexpr uint32_t kIoFdTypeIoregionfd = 1;

// ----------------------------------------------------------------- DEVICE_GET_IRQ_INFO ---
struct IrqInfo {
  uint32_t argsz;
  uint32_t flags;  // kIrqInfo*
  uint32_t index;
  uint32_t count;
};
static_assert(sizeof(IrqInfo) == 16);

inline constexpr uint32_t kIrqInfoEventfd = 1u << 0;
inline constexpr uint32_t kIrqInfoMaskable = 1u << 1;
inline constexpr uint32_t kIrqInfoAutomasked = 1u << 2;
inline constexpr uint32_t kIrqInfoNoresize = 1u << 3;

// --------------------------------------------------------------------- DEVICE_SET_IRQS ---
// Followed by `count` bool bytes with kIrqSetDataBool; eventfds travel as ancillary data with
// kIrqSetDataEventfd (none = de-assign). count == 0 with DATA_NONE disables the whole index.
struct IrqSet {
  uint32_t argsz;
  uint32_t flags;
  uint32_t index;
  uint32_t start;
  uint32_t count;
};
static_assert(sizeof(IrqSet) == 20);

inline constexpr uint32_t kIrqSetDataNone = 1u << 0;
inline constexpr uint32_t kIrqSetDataBool = 1u << 1;
inline constexpr uint32_t kIrqSetDataEventfd = 1u << 2;
inline constexpr uint32_t kIrqSetActionMask = 1u << 3;
inline constexpr uint32_t kIrqSetActionUnmask = 1u << 4;
inline constexpr uint32_t kIrqSetActionTrigger = 1u << 5;
inline constexpr uint32_t kIrqSetDataTypeMask =
    kIrqSetDataNone | kIrqSetDataBool | kIrqSetDataEventfd;
inline constexpr uint32_t kIrqSetActionTypeMask =
    kIrqSetActionMask | kIrqSetActionUnmask | kIrqSetActionTrigger;

// ------------------------------------------------------------------ REGION_READ/WRITE ---
// REGION_READ: request = RegionAccess; reply = RegionAccess + count bytes.
// REGION_WRITE: request = RegionAccess + count bytes; reply = RegionAccess.
struct RegionAccess {
  uint64_t offset;
  uint32_t region;
  uint32_t count;
};
static_assert(sizeof(RegionAccess) == 16);

// REGION_WRITE_MULTI: uint64_t wr_cnt, then wr_cnt entries of:
struct RegionWriteMultiEntry {
  uint64_t offset;
  uint32_t region;
  uint32_t count;  // <= 8
  uint8_t data[8];
};
static_assert(sizeof(RegionWriteMultiEntry) == 24);

// --------------------------------------------------------------------- DMA_READ/WRITE ---
// Server -> client. DMA_READ: request = DmaAccess; reply = DmaAccess + data.
// DMA_WRITE: request = DmaAccess + data; reply = DmaAccess.
struct DmaAccess {
  uint64_t address;
  uint64_t count;
};
static_assert(sizeof(DmaAccess) == 16);

// ------------------------------------------------------------------- DEVICE_FEATURE etc ---
struct DeviceFeature {
  uint32_t argsz;
  uint32_t flags;  // bits 0-15 feature index, 16 GET, 17 SET, 18 PROBE; data follows
};
static_assert(sizeof(DeviceFeature) == 8);

struct MigData {  // MIG_DATA_READ / MIG_DATA_WRITE; data follows in a read reply / a write
  uint32_t argsz;
  uint32_t size;
};
static_assert(sizeof(MigData) == 8);

// ------------------------------------------------------------------ in-process transport ---
// A vfio-user server reachable by direct calls (no socket). `request` is one whole message
// (header + payload, len == header.msg_size). File descriptors are passed as they would be
// over SCM_RIGHTS: the endpoint owns `fds` from the call on (it closes any it does not keep);
// the caller owns `reply_fds`. `reply` receives the whole reply message, or stays empty when
// the command asked for no reply.
class MessageEndpoint {
 public:
  virtual ~MessageEndpoint() = default;
  virtual void handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
                      std::vector<uint8_t>& reply, std::vector<int>& reply_fds) = 0;
  // The other end dropped the connection (as poll() reports POLLHUP on a socket).
  virtual bool hung_up() const { return false; }
};

}  // namespace pollux::spec::vfio_user
