// The libibverbs provider: verbs (verbs.h) over rdma-core's libibverbs, for real RDMA NICs and
// soft-RoCE (rxe). Every verb maps 1:1 onto its ibv_* call: post_send/post_recv translate the
// work request chain on the stack (scatter lists are passed as they lie: verbs::Sge has
// ibv_sge's layout) and call ibv_post_send/ibv_post_recv once per 16 requests; poll calls
// ibv_poll_cq into a stack array and copies out. No lock, no allocation of our own, and no
// system call of our own on the hot path (what the device's user-space provider does is its
// business: rxe's rings its doorbell with a write() system call, a hardware NIC's with a store).
//
// The address vector of a QP (the peer's GID, its UDP source port, the hop limit) comes from
// rdma_cm (fabric/rdma/rdma_cm.h moves the QP with rdma_init_qp_attr on the ibv_qp this
// provider exposes): Qp::modify with qp_attr::kAv is -EINVAL here, because a 64-bit
// dest_address cannot name a RoCE path. Enum values are libibverbs' own (spec/rnic.h), except
// the send flags, which are translated.
//
// get_async_event reads the context's async fd, made non-blocking (a system call: a control
// path). probe_removed asks the device (ibv_query_device): a disassociated device fails it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "driver/env/result.h"
#include "driver/rdma/verbs.h"

struct ibv_context;
struct ibv_pd;
struct ibv_qp;

namespace pollux::rdma {

// The names of the machine's libibverbs devices ("rxe0", "mlx5_0"); empty when there are none
// (or no RDMA subsystem at all).
std::vector<std::string> ibverbs_device_names();

// Opens libibverbs device `name` (ibv_open_device) on port 1; the Context closes it.
Result<std::unique_ptr<Context>> open_ibverbs(const std::string& name);

// A Context over an ibv_context opened by someone else (librdmacm's rdma_get_devices: rdma_cm
// ids and the QPs they connect must share the context); `release` runs when the Context goes.
using ReleaseFn = void (*)(void* arg);
Result<std::unique_ptr<Context>> wrap_ibverbs(ibv_context* ctx, ReleaseFn release, void* arg);

// The libibverbs objects behind this provider's objects; nullptr for another provider's.
ibv_context* ibverbs_context(Context& ctx);
ibv_pd* ibverbs_pd(Pd& pd);
ibv_qp* ibverbs_qp(Qp& qp);

}  // namespace pollux::rdma
