// Values the NVMe-oF target's core shares with its transports and its configuration: where a
// transport listens, the limits a transport sets, a namespace's identifiers, status helpers.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "spec/nvme.h"
#include "spec/nvme_fabrics.h"

namespace pollux::fabric::target {

namespace sn = spec::nvme;
namespace nf = spec::nvmf;

// A listener's address, in SPDK's JSON spelling (trtype "TCP", adrfam "IPv4").
struct ListenAddress {
  std::string trtype = "TCP";
  std::string adrfam = "IPv4";
  std::string traddr;
  std::string trsvcid;
  bool operator==(const ListenAddress& o) const {
    return trtype == o.trtype && adrfam == o.adrfam && traddr == o.traddr && trsvcid == o.trsvcid;
  }
  std::string to_string() const { return trtype + " " + traddr + ":" + trsvcid; }
};

// What a transport allows; the core advertises it (CAP.MQES, MDTS, IOCCSZ) and enforces it at
// Connect. Fixed once the transport exists.
struct TransportLimits {
  uint32_t max_queue_depth = 128;          // I/O queue entries (CAP.MQES + 1)
  uint32_t max_aq_depth = 128;             // admin queue entries
  uint32_t max_io_qpairs_per_ctrlr = 127;  // Number of Queues granted at most
  uint32_t in_capsule_data_size = 4096;    // I/O queues: IOCCSZ = (64 + this) / 16
  uint32_t max_io_size = 131072;           // bytes per command (MDTS)
  uint8_t discovery_trtype = nf::trtype::kTcp;
  bool keyed_sgl = false;  // data by Keyed SGL Data Blocks (RDMA): Identify SGLS bit 2
  uint8_t msdbd = 1;       // SGL data block descriptors a command may carry (Identify MSDBD)
};

// A namespace's identifiers (Identify Namespace NGUID/EUI64, the descriptor list's UUID).
// All-zero means "none".
struct NamespaceIds {
  std::array<uint8_t, 16> uuid{};
  std::array<uint8_t, 16> nguid{};
  std::array<uint8_t, 8> eui64{};
};

// Completion status without the phase bit, DNR set for errors a retry cannot fix.
constexpr uint16_t status(uint8_t sct, uint8_t sc, bool dnr = true) {
  return sn::status::make(sct, sc, dnr);
}
constexpr uint16_t generic(uint8_t sc) {
  return status(sn::sct::kGeneric, sc);
}
constexpr uint16_t specific(uint8_t sc) {
  return status(sn::sct::kCommandSpecific, sc);
}
inline constexpr uint16_t kSuccess = 0;

}  // namespace pollux::fabric::target
