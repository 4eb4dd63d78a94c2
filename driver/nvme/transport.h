// The transport seam of the NVMe driver: what the transport-neutral controller and queue
// pairs (controller.h, qpair.h) need from whatever carries commands to a controller. PCIe
// (pcie.h: registers by MMIO, SQ/CQ rings in host memory, doorbells) is one transport; the
// fabrics (TCP, RDMA) are others: registers by Property Get/Set capsules, queues set up by a
// connection and a Connect command, commands and completions as messages.
//
// What stays out of a transport: the request pool and CIDs, submission order and the SQ's
// room (SQ tail/head/size are generic NVMe: a fabrics SQ has them too), timeouts, Aborts,
// error injection, statistics, the initialisation and reset state machines.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/env/result.h"
#include "driver/nvme/transport_id.h"
#include "spec/nvme.h"

namespace pollux::nvme {

namespace sn = spec::nvme;

// One queue pair's commands and completions. Called only by its Qpair, on the Qpair's owner
// thread. The hot path (map_data, place, flush, poll) takes no lock, allocates nothing and
// makes no syscall beyond a transport's own batched send and receive.
class QueueTransport {
 public:
  virtual ~QueueTransport() = default;

  // Set-up: the Qpair's requests are indexes 0 .. n-1 (per-request state, e.g. a PRP list
  // page, lives in the transport). 0 or a negative errno.
  virtual int init_requests(uint32_t n) = 0;
  // Describes the data of request `index` in `cmd` (PRPs or SGLs; a transport SGL...), for a
  // command that moves `len` bytes (the Qpair has checked them against the maximum transfer).
  // The iovecs stay valid until the request completes. 0, -EINVAL (a layout this transport
  // cannot describe, memory it cannot reach) or -E2BIG.
  virtual int map_data(uint16_t index, sn::SubmissionEntry& cmd, const iovec* iov, int iovcnt,
                       uint32_t len) = 0;
  // The submission queue: `entries` slots the Qpair writes commands into, at its SQ tail (it
  // keeps the SQ's room). PCIe: the SQ ring itself; a fabrics transport sends from it. Valid
  // after init_requests().
  virtual sn::SubmissionEntry* submission_queue() = 0;
  // Hands the commands written up to SQ tail `tail` to the controller (PCIe: the doorbell).
  virtual void flush(uint32_t tail) = 0;
  // Takes up to `max` completions into out[], in the order the controller posted them:
  // how many, or -ENODEV when the device or connection is gone.
  virtual int poll(sn::CompletionEntry* out, uint32_t max) = 0;
  // Recovery (set-up path, the Qpair stopped): back to the initial state, nothing in flight
  // (a fabrics queue connects again; the controller then sends its Connect).
  virtual void reset() = 0;
  // Recovery, fabrics (set-up path, the Qpair stopped): drop the connection now, before the
  // controller is disabled — the target quiesces a queue whose connection is gone at once,
  // while one still open waits for responses the stopped host would never read. reset()
  // connects it again.
  virtual void disconnect() {}
  // Recovery and set-up, fabrics, without blocking (SPDK's asynchronous qpair connect): the
  // same as reset() in two halves. The controller connects every fabrics queue this way (its
  // reset and new I/O queues run in steps from pollers); TCP and RDMA implement them.
  // start_connect() ends what was in flight and begins a new connection; poll_connect()
  // advances it: -EAGAIN while under way, 0 once connected, else a negative errno
  // (connect_error() says why). By default reset() does it all at once.
  virtual int start_connect() {
    reset();
    return 0;
  }
  virtual int poll_connect() { return broken() ? -ECONNREFUSED : 0; }
  virtual std::string connect_error() const { return "the connection could not be made"; }
  // Multipath: this I/O queue could not connect on its path; the next attempt goes to the
  // next path, unless another queue's failure moved it already.
  virtual void leave_path() {}
  // false: completions carry no SQ head (a fabrics queue with SQ flow control disabled), so
  // each completion frees one SQ slot.
  virtual bool reports_sq_head() const { return true; }
  // The connection under the queue broke (fabrics): nothing more will complete until the
  // controller resets, which the health check asks for. Any thread.
  virtual bool broken() const { return false; }
};

// What a queue is created with (the controller's findings and the caller's options).
struct QueueParams {
  uint16_t qid = 0;
  uint32_t entries = 0;        // SQ and CQ entries
  uint32_t page_size = 4096;   // CC.MPS
  bool prefer_sgl = false;     // describe data with SGLs where the controller takes them
  bool sgl_supported = false;  // Identify SGLS
  // Fabrics: false creates the queue without its connection (broken() until the controller's
  // reset() connects it with the others). Ignored by PCIe.
  bool connect = true;
};

// Admin commands a transport issues for itself while setting queues up (PCIe: Create and
// Delete I/O SQ/CQ): the controller's synchronous admin path.
using AdminCommand = std::function<Result<sn::CompletionEntry>(const sn::SubmissionEntry&)>;

// One controller's transport: a PCI function, or a fabrics association.
class Transport {
 public:
  virtual ~Transport() = default;

  // "vfio-user:/path.sock", "pcie:0000:01:00.0", "tcp:10.0.0.1:4420"...
  virtual std::string address() const = 0;

  // Gone for good (surprise removal, lost connection): queue pairs read this flag on every
  // submit and poll, so it is a flag, not a call.
  const std::atomic<bool>& gone_flag() const { return *gone_; }
  bool gone() const { return gone_->load(std::memory_order_acquire); }
  // Looks actively for it (may make a syscall): for the admin path. Returns gone().
  virtual bool probe_gone() { return gone(); }
  // The platform wants the device back while it still works (vfio-pci's request): the
  // controller stops it first, then calls finish_removal(), after which gone() holds.
  virtual bool removal_requested() const { return false; }
  virtual void finish_removal() { mark_gone(); }

  // Set-up before the first register access (PCIe: memory space, bus mastering, interrupts
  // off). 0 or a negative errno.
  virtual int prepare() { return 0; }

  // NVMe over Fabrics: the controller reaches registers as properties (Property Get/Set on
  // the admin queue, not through read32...), connects every queue with a Connect command of
  // its own (to subsystem_nqn()), and keeps the association alive (Keep Alive).
  virtual bool fabrics() const { return false; }
  virtual std::string subsystem_nqn() const { return ""; }
  // What Identify Controller said, for what a transport adapts to (fabrics: IOCCSZ, the
  // in-capsule data an I/O command may carry).
  virtual void identified(const sn::IdentifyController&) {}

  // Multipath, failover (SPDK's bdev_nvme multipath "failover"): more addresses of the same
  // subsystem. The queues connect on the active path; when it fails (a reset that failed:
  // path_failed(); an I/O queue whose connection could not be made: the transport itself)
  // the next path becomes active for the next attempt. add_path: "" or why not (a transport
  // without paths, a different subsystem, too many). Admin thread; readers of the paths may
  // be any thread.
  virtual std::string add_path(const TransportId&) { return "this transport has one path"; }
  virtual void path_failed() {}
  struct PathInfo {
    std::vector<std::string> addresses;  // in the order added; the first is the attach's
    std::size_t active = 0;
    uint64_t failovers = 0;  // times the active path changed
  };
  virtual PathInfo paths() const { return PathInfo{{address()}, 0, 0}; }

  // Controller registers by offset (spec::nvme::reg), 4 or 8 bytes, where the transport
  // reaches them itself (PCIe: MMIO). A device that is gone reads all ones. Set-up and admin
  // paths only. A fabrics transport leaves them: properties go through the admin queue.
  virtual uint32_t read32(uint32_t) { return ~0u; }
  virtual uint64_t read64(uint32_t) { return ~0ull; }
  virtual int write32(uint32_t, uint32_t) { return -ENOTSUP; }
  virtual int write64(uint32_t, uint64_t) { return -ENOTSUP; }

  // The largest transfer one command can describe on this transport (0: no limit of its own).
  virtual uint32_t max_transfer() const { return 0; }

  // Queues. The admin queue is created while the controller is disabled; program_admin_queue
  // runs before every enable (PCIe: AQA, ASQ, ACQ).
  virtual Result<std::unique_ptr<QueueTransport>> create_queue(const QueueParams& params) = 0;
  virtual void program_admin_queue(QueueTransport& admin) = 0;
  // An I/O queue comes into being on the controller (PCIe: Create I/O CQ, then SQ), and goes
  // (Delete I/O SQ, then CQ). "" or what failed.
  virtual std::string start_io_queue(QueueTransport& queue, const AdminCommand& admin) = 0;
  virtual std::string stop_io_queue(QueueTransport& queue, const AdminCommand& admin) = 0;

 protected:
  void mark_gone() { own_gone_.store(true, std::memory_order_release); }
  // A transport whose lower layer keeps the flag already (a PciDevice's removed()).
  void follow_gone_flag(const std::atomic<bool>* flag) { gone_ = flag; }

 private:
  std::atomic<bool> own_gone_{false};
  const std::atomic<bool>* gone_ = &own_gone_;
};

}  // namespace pollux::nvme
