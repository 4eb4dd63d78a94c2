// NVMe over Fabrics, RDMA transport binding (NVM Express RDMA Transport Specification 1.0,
// 3.3: RDMA_CM private data): what a host puts in its connect request, what a controller
// answers with in accept or reject. Command and response capsules travel as RDMA SENDs (the
// 64-byte SQE plus in-capsule data; the 16-byte CQE); data moves by RDMA READ and WRITE on
// Keyed SGL Data Blocks (spec/nvme_fabrics.h). No behaviour here.
//
// Multi-byte fields are little-endian; the structures are sent as they lie in memory.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace pollux::spec::nvme_rdma {

static_assert(std::endian::native == std::endian::little,
              "RDMA_CM private data is little-endian and sent as it lies in memory");

inline constexpr uint16_t kRecfmt10 = 0x0000;  // record format 1.0
inline constexpr uint16_t kIoPort = 4420;      // the same IANA port as TCP

// RDMA_CM_REQUEST (host -> controller). HSQSIZE is 0's based (SQ entries - 1); HRQSIZE is the
// number of receive buffers the host posted for responses (1's based).
struct CmRequest {
  uint16_t recfmt;
  uint16_t qid;      // 0: the admin queue
  uint16_t hrqsize;  // host receive queue size
  uint16_t hsqsize;  // host send queue size, 0's based
  uint16_t cntlid;   // 0xffff on the admin queue (dynamic model); I/O queues: the controller's
  uint8_t reserved[22];
};
static_assert(sizeof(CmRequest) == 32);
static_assert(offsetof(CmRequest, qid) == 2 && offsetof(CmRequest, hrqsize) == 4 &&
              offsetof(CmRequest, hsqsize) == 6 && offsetof(CmRequest, cntlid) == 8);

// RDMA_CM_ACCEPT (controller -> host). CRQSIZE: receive buffers the controller posted for
// command capsules (1's based): the host never has more commands outstanding.
struct CmAccept {
  uint16_t recfmt;
  uint16_t crqsize;
  uint8_t reserved[28];
};
static_assert(sizeof(CmAccept) == 32);
static_assert(offsetof(CmAccept, crqsize) == 2);

// RDMA_CM_REJECT (controller -> host).
struct CmReject {
  uint16_t recfmt;
  uint16_t sts;  // one of cm_status
};
static_assert(sizeof(CmReject) == 4);
static_assert(offsetof(CmReject, sts) == 2);

namespace cm_status {
inline constexpr uint16_t kInvalidLength = 0x01;  // private data too short
inline constexpr uint16_t kInvalidRecfmt = 0x02;
inline constexpr uint16_t kInvalidQid = 0x03;
inline constexpr uint16_t kInvalidHsqsize = 0x04;
inline constexpr uint16_t kInvalidHrqsize = 0x05;
inline constexpr uint16_t kNoResources = 0x06;
inline constexpr uint16_t kInvalidIrd = 0x07;
inline constexpr uint16_t kInvalidOrd = 0x08;
inline constexpr uint16_t kInvalidCntlid = 0x09;
}  // namespace cm_status

// Capsule sizes on the wire.
inline constexpr uint32_t kCommandCapsuleHeader = 64;  // the SQE; in-capsule data follows
inline constexpr uint32_t kResponseCapsule = 16;       // the CQE

}  // namespace pollux::spec::nvme_rdma
