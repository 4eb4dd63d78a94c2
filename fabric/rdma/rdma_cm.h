// Connection set-up through librdmacm (the RDMA connection manager of rdma-core), for
// libibverbs devices (driver/rdma/ibverbs_provider.h): the same CmId/CmListener seam as the
// stream CM (cm.h), but the CM messages are the real ones (IB CM REQ/REP/REJ/RTU/DREQ as MADs
// on QP1 of the RDMA port, carried over RoCEv2), so any RDMA peer understands them: the Linux
// kernel's nvme-rdma host and nvmet-rdma target, SPDK, hardware.
//
// Active side: rdma_create_id (RDMA_PS_TCP) on its own event channel, rdma_resolve_addr,
// rdma_resolve_route, rdma_connect with the QP number and the NVMe/RDMA private data; on the
// CONNECT_RESPONSE event the owner readies its QP (ready_qp: rdma_init_qp_attr for INIT, RTR
// and RTS, then ibv_modify_qp: the path, PSNs and timers are rdma_cm's) and calls
// establish() (rdma_establish: the RTU). Passive side: rdma_bind_addr + rdma_listen; each
// CONNECT_REQUEST's new id moves to an event channel of its own (rdma_migrate_id), so the
// thread that owns the connection polls its events alone; ready_qp before rdma_accept. The
// QPs are created by the owner through the verbs provider (not rdma_create_qp), on the
// device the id resolved to, which must be the Context's: otherwise the connection is
// refused, saying which device the address belongs to.
//
// Event channels are non-blocking: poll() is one read of the channel (a system call; the CM
// is never on the hot path), wait() a poll(2) on its fd.
#pragma once

#include <memory>

#include "driver/env/result.h"
#include "driver/rdma/verbs.h"
#include "fabric/rdma/cm.h"

namespace pollux::fabric::rdma {

// For a Context of the libibverbs provider; -EINVAL for any other. t: the QP's limits that the
// CM exchange negotiates (RDMA READs in flight each way, retry counts).
Result<std::unique_ptr<ConnectionManager>> make_rdma_cm(verbs::Context& ctx, const QpTiming& t);

}  // namespace pollux::fabric::rdma
