// The block-device layer (after SPDK's bdev): named block devices provided by modules, opened
// through descriptors, used through per-(thread, bdev) channels. Hot path: bdev_io objects come
// from per-channel caches over a shared pool (no allocation per I/O), the module is reached
// through its own per-thread channel, completion runs on the submitting thread.
//
// Threading: register/unregister/open/close from any framework thread (they take the
// manager's mutex); submit and complete on the channel's thread only.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/env/histogram.h"
#include "driver/env/mpmc_queue.h"
#include "driver/env/result.h"
#include "driver/event/framework.h"

namespace pollux::bdev {

enum class IoType : uint8_t {
  kRead, kWrite, kWriteZeroes, kUnmap, kFlush, kReset, kCompare, kCompareAndWrite,
  kNvmePassthru, kCount
};
inline constexpr std::size_t kIoTypes = static_cast<std::size_t>(IoType::kCount);
const char* to_string(IoType t);

enum class IoStatus : int8_t {
  kPending = 1,
  kSuccess = 0,
  kFailed = -1,      // generic failure
  kNvmeError = -2,   // see BdevIo::nvme_status()
  kNoMemory = -3,    // the module is out of resources: the layer retries it later
  kAborted = -4,
  kRemoved = -5,     // the device is gone
  kMiscompare = -6,
};
const char* to_string(IoStatus s);

class Bdev;
class BdevIo;
class Desc;
class Manager;

using IoCompletionFn = void (*)(BdevIo& io, bool success, void* cb_arg);

// What a module provides for each bdev it registers.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual bool supports(IoType type) const = 0;
  // The module's io_device: the layer gets a channel of it on each thread that uses the bdev
  // (e.g. an NVMe queue pair). Its context is passed to submit().
  virtual void* io_device() = 0;
  // Must eventually call io.complete(status) on the same thread (possibly inside submit()).
  virtual void submit(BdevIo& io, void* module_channel_ctx) = 0;
  // The bdev is being unregistered: release the module's state. Called once, after every
  // descriptor has closed.
  virtual void destruct() {}
  // Bytes of per-I/O scratch the module wants in every BdevIo (≤ kMaxModuleCtx).
  virtual std::size_t io_ctx_size() const { return 0; }
  // Its submitter gave io up (Manager::abort; io.abort_requested() is true now). The module
  // must never issue it to the device again — a retry, the next piece of a multi-command I/O,
  // a resubmission after a reset end it with kAborted instead — and should end at once what
  // it holds waiting. What the device already holds completes as the device decides.
  virtual void abort(BdevIo& io, void* module_channel_ctx) {
    (void)io;
    (void)module_channel_ctx;
  }
};

struct BdevProperties {
  std::string name;
  std::vector<std::string> aliases;
  std::string product = "unknown";  // module name shown to users ("Malloc disk", ...)
  uint32_t block_size = 512;
  uint64_t num_blocks = 0;
  uint32_t optimal_io_boundary = 0;  // blocks; with split_on_optimal_io_boundary, I/O crossing
  bool split_on_optimal_io_boundary = false;  // it is split there
  uint32_t max_transfer_blocks = 0;  // the module's limit; larger I/O is split (0: none)
  uint32_t required_alignment = 0;   // log2 bytes of buffer alignment; else bounce buffers
  bool write_cache = false;
  // false: reads return no data (the null bdev): nothing written can be read back or checked.
  bool stores_data = true;
  std::string uuid;  // optional
};

// Rate limits (SPDK's four): 0 = unlimited.
struct QosLimits {
  uint64_t iops = 0;         // reads + writes + ...: I/Os per second
  uint64_t bps = 0;          // all data, bytes per second
  uint64_t read_bps = 0;
  uint64_t write_bps = 0;
};

enum class DescEvent { kRemove, kResize };
using DescEventFn = void (*)(DescEvent event, Bdev& bdev, void* ctx);

// Counters of one I/O type, per channel (owner-written) and merged per bdev.
struct IoTypeStats {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t latency_ticks = 0;
  void merge(const IoTypeStats& o) {
    ops += o.ops;
    bytes += o.bytes;
    errors += o.errors;
    latency_ticks += o.latency_ticks;
  }
};

struct IoStats {
  std::array<IoTypeStats, kIoTypes> by_type{};
  env::LatencyHistogram read_latency, write_latency, other_latency;
  uint64_t retries = 0, splits = 0, bounced = 0, qos_queued = 0, reset_queued = 0;
  void merge(const IoStats& o);
};

}  // namespace pollux::bdev

namespace pollux::bdev {

struct Channel;

// One I/O. Owned by the layer; valid until its completion callback returns.
class BdevIo {
 public:
  static constexpr std::size_t kMaxModuleCtx = 256;
  static constexpr int kMaxIovs = 32;

  IoType type() const { return type_; }
  Bdev& bdev() const { return *bdev_; }
  uint64_t offset_blocks() const { return offset_; }
  uint64_t num_blocks() const { return num_; }
  iovec* iovs() { return iovs_; }
  int iovcnt() const { return iovcnt_; }
  // Compare-and-write: iovs() hold the compare data, write_iovs() the data to write.
  iovec* write_iovs() { return write_iovs_; }
  int write_iovcnt() const { return write_iovcnt_; }
  // NVMe passthru: the command (64 bytes) the user gave.
  const void* nvme_cmd() const { return nvme_cmd_; }
  void* module_ctx() { return ctx_; }

  // The module's verdict. complete_nvme() keeps the NVMe status (SCT/SC/DNR) for the caller.
  void complete(IoStatus status);
  // Keeps the NVMe status (and DW0, for passthru); a compare failure becomes kMiscompare.
  void complete_nvme(uint16_t status_field, uint32_t cdw0 = 0);
  IoStatus status() const { return status_; }
  uint16_t nvme_status() const { return nvme_status_; }  // 0 unless complete_nvme()
  uint32_t nvme_cdw0() const { return nvme_cdw0_; }
  // Manager::abort asked for this I/O (or, for a split child, its parent) to end.
  bool abort_requested() const {
    return abort_requested_ || (parent_ != nullptr && parent_->abort_requested_);
  }

 private:
  friend class Manager;
  friend struct Channel;
  Channel* ch_ = nullptr;
  Bdev* bdev_ = nullptr;
  IoType type_ = IoType::kRead;
  IoStatus status_ = IoStatus::kPending;
  uint16_t nvme_status_ = 0;
  uint32_t nvme_cdw0_ = 0;
  uint32_t retries_ = 0;
  uint64_t offset_ = 0, num_ = 0;
  iovec* iovs_ = nullptr;
  int iovcnt_ = 0;
  iovec* write_iovs_ = nullptr;
  int write_iovcnt_ = 0;
  IoCompletionFn cb_ = nullptr;
  void* cb_arg_ = nullptr;
  uint64_t submit_tick_ = 0;
  BdevIo* parent_ = nullptr;       // a split child points at its parent
  uint64_t split_next_ = 0;        // a split parent: first block not yet given to a child
  bool resplit_ = false;           // a split parent waiting for bdev_ios to continue
  bool split_ = false;             // a split parent: its children go to the module, not it
  uint32_t children_left_ = 0;
  IoStatus children_status_ = IoStatus::kSuccess;
  void* bounce_ = nullptr;         // DMA bounce buffer when the caller's buffers are misaligned
  iovec* user_iovs_ = nullptr;     // the caller's iovecs while bouncing
  int user_iovcnt_ = 0;
  BdevIo* next_ = nullptr;         // free list / waiting queue
  bool queued_ = false;            // in the channel's waiting queue
  bool abort_requested_ = false;
  bool abort_told_ = false;        // the module has been told (Backend::abort), once
  BdevIo* sub_prev_ = nullptr;     // the channel's list of I/Os given to it (Manager::abort)
  BdevIo* sub_next_ = nullptr;
  bool linked_ = false;
  const void* nvme_cmd_ = nullptr;
  iovec iov_storage_[kMaxIovs];
  iovec bounce_iov_;
  alignas(64) uint8_t ctx_[kMaxModuleCtx];
};

class Bdev {
 public:
  const BdevProperties& props() const { return props_; }
  const std::string& name() const { return props_.name; }
  uint32_t block_size() const { return props_.block_size; }
  uint64_t num_blocks() const { return props_.num_blocks; }
  bool supports(IoType t) const { return backend_->supports(t); }
  Backend& backend() { return *backend_; }
  const std::string& module() const { return module_; }
  // Statistics of channels that have gone, plus (through Manager::get_stats) live ones.
  const IoStats& retired_stats() const { return retired_; }
  // The rate limits set_qos() installed (all zero: QoS off); readable from any thread.
  QosLimits qos_limits() const {
    auto at = [this](int i) { return qos_limit_[i].load(std::memory_order_relaxed); };
    return {at(0), at(1), at(2), at(3)};
  }

 private:
  friend class Manager;
  friend class Desc;
  friend class BdevIo;
  friend struct Channel;
  BdevProperties props_;
  std::unique_ptr<Backend> backend_;
  std::string module_;
  Manager* mgr_ = nullptr;
  std::vector<Desc*> descs_;
  Desc* claimed_by_ = nullptr;
  std::string claim_module_;
  bool removing_ = false;
  bool destructing_ = false;
  // Resets: one at a time; one arriving meanwhile waits and completes with it (off the hot
  // path, so a mutex).
  std::mutex reset_mu_;
  bool resetting_ = false;
  std::vector<BdevIo*> reset_waiters_;
  event::Thread* unregister_thread_ = nullptr;
  event::MsgFn unregister_done_ = nullptr;
  void* unregister_ctx_ = nullptr;
  IoStats retired_;
  // QoS: one token bucket per limit (I/Os, bytes, read bytes, write bytes), refilled each
  // millisecond by a timed poller, taken with atomics on submit.
  // Tokens may go negative (an I/O larger than a slice's budget is admitted when any token
  // is left); later refills pay the debt back.
  static constexpr int kQosBuckets = 4;
  std::array<std::atomic<uint64_t>, kQosBuckets> qos_limit_{};
  std::array<std::atomic<int64_t>, kQosBuckets> qos_tokens_{};
  std::array<uint64_t, kQosBuckets> qos_carry_{};  // refill thread only: sub-token remainder
  std::atomic<bool> qos_on_{false};
  event::Poller* qos_poller_ = nullptr;
  event::Thread* qos_thread_ = nullptr;
};

class Desc {
 public:
  Bdev& bdev() const { return *bdev_; }
  bool writable() const { return write_; }

 private:
  friend class Manager;
  Bdev* bdev_ = nullptr;
  uint64_t id_ = 0;  // events find their descriptor by id: it may have closed meanwhile
  bool write_ = false;
  DescEventFn event_fn_ = nullptr;
  void* event_ctx_ = nullptr;
  event::Thread* thread_ = nullptr;  // events are delivered here
};

// A module that builds virtual bdevs on others: told about every bdev that appears.
class VirtualModule {
 public:
  virtual ~VirtualModule() = default;
  virtual const char* name() const = 0;
  virtual void examine(Manager& mgr, Bdev& base) = 0;
};

struct ManagerOptions {
  std::size_t io_pool_size = 65536;     // BdevIo objects shared by all channels
  std::size_t io_cache_size = 256;      // per channel
  std::size_t bounce_buffer_size = 1 << 20;
  std::size_t bounce_buffers = 64;
};

class Manager {
 public:
  static Result<std::unique_ptr<Manager>> create(event::Framework& fw, ManagerOptions o = {});
  ~Manager();
  event::Framework& framework() { return fw_; }

  // Registration. The backend is owned by the bdev. Errors: duplicate name/alias, zero size.
  Result<Bdev*> register_bdev(BdevProperties props, std::unique_ptr<Backend> backend,
                              std::string module);
  // Every open descriptor is told kRemove; once all have closed, the backend's destruct()
  // runs and done(ctx) is called on the calling thread. Unknown name: -ENODEV.
  int unregister_bdev(const std::string& name, event::MsgFn done = nullptr, void* ctx = nullptr);
  Bdev* find(const std::string& name_or_alias);
  std::vector<Bdev*> bdevs();
  // The same, by name: safe to keep while another thread removes bdevs.
  std::vector<std::string> bdev_names();
  void add_virtual_module(VirtualModule* m);  // examines existing bdevs too

  // Descriptors. -ENODEV (unknown or being removed), -EPERM (write on a claimed bdev).
  Result<Desc*> open(const std::string& name, bool write, DescEventFn fn = nullptr,
                     void* ctx = nullptr);
  void close(Desc* desc);
  // Exclusive write claim for a module (a virtual bdev built on this one). -EPERM if claimed
  // or another descriptor already writes.
  int claim(Desc* desc, const std::string& module);
  void release_claim(Bdev& bdev);
  // The module that claims `bdev` ("" if none), for reports such as bdev_get_bdevs.
  std::string claim_module(Bdev& bdev);

  // Per-(thread, bdev) channel for I/O on the current thread.
  event::IoChannel* get_io_channel(Desc* desc);
  void put_io_channel(event::IoChannel* ch);

  // I/O. 0, or -EINVAL (bad range/arguments), -EBADF (descriptor not writable), -ENOTSUP
  // (type not supported), -ENOMEM (no bdev_io left: retry after completions).
  int read(Desc* d, event::IoChannel* ch, void* buf, uint64_t offset_blocks,
           uint64_t num_blocks, IoCompletionFn cb, void* arg);
  int readv(Desc* d, event::IoChannel* ch, const iovec* iov, int iovcnt, uint64_t offset_blocks,
            uint64_t num_blocks, IoCompletionFn cb, void* arg);
  int write(Desc* d, event::IoChannel* ch, const void* buf, uint64_t offset_blocks,
            uint64_t num_blocks, IoCompletionFn cb, void* arg);
  int writev(Desc* d, event::IoChannel* ch, const iovec* iov, int iovcnt,
             uint64_t offset_blocks, uint64_t num_blocks, IoCompletionFn cb, void* arg);
  int write_zeroes(Desc* d, event::IoChannel* ch, uint64_t offset_blocks, uint64_t num_blocks,
                   IoCompletionFn cb, void* arg);
  int unmap(Desc* d, event::IoChannel* ch, uint64_t offset_blocks, uint64_t num_blocks,
            IoCompletionFn cb, void* arg);
  int flush(Desc* d, event::IoChannel* ch, uint64_t offset_blocks, uint64_t num_blocks,
            IoCompletionFn cb, void* arg);
  int compare(Desc* d, event::IoChannel* ch, const void* buf, uint64_t offset_blocks,
              uint64_t num_blocks, IoCompletionFn cb, void* arg);
  int compare_and_write(Desc* d, event::IoChannel* ch, const void* compare_buf,
                        const void* write_buf, uint64_t offset_blocks, uint64_t num_blocks,
                        IoCompletionFn cb, void* arg);
  int nvme_passthru(Desc* d, event::IoChannel* ch, const void* cmd64, void* buf,
                    std::size_t len, IoCompletionFn cb, void* arg);
  // Gives up the I/Os submitted on ch with this cb_arg (SPDK's spdk_bdev_abort), so that
  // nothing issues them to the device again: one still waiting in the layer (a frozen channel,
  // QoS, a module out of resources) completes now with kAborted; one in the module is marked
  // (BdevIo::abort_requested) and the module ends it at its next decision instead of retrying
  // it. One the device holds completes as the device decides (it may still succeed). Their
  // callbacks run later, never inside this call. Returns how many I/Os were found.
  int abort(Desc* d, event::IoChannel* ch, void* cb_arg);
  // Quiesces every channel of the bdev (new I/O waits, not fails), resets through the
  // module, then resumes the waiting I/O.
  int reset(Desc* d, event::IoChannel* ch, IoCompletionFn cb, void* arg);

  // QoS, enforced by a poller on the calling thread (1 ms slices). All zero: off.
  int set_qos(Bdev& bdev, const QosLimits& limits);
  int set_qos(Bdev& bdev, uint64_t iops, uint64_t bytes_per_second) {
    return set_qos(bdev, QosLimits{iops, bytes_per_second, 0, 0});
  }

  // Merges the statistics of every live channel (walking them on their threads) with the
  // retired ones, then calls done(stats, ctx) on the calling thread.
  using StatsFn = void (*)(const IoStats& stats, void* ctx);
  void get_stats(Bdev& bdev, StatsFn done, void* ctx);
  // One channel's statistics so far (SPDK: spdk_bdev_get_io_stat with a channel,
  // spdk_bdev_channel_get_histogram), read on the channel's thread. What I/O through this
  // channel cost from submission to the completion callback: a user that wants its own
  // latency figures reads them here instead of reading the clock around every I/O again.
  const IoStats& channel_stats(event::IoChannel* ch) const;

  // Internal, used by BdevIo::complete.
  void io_done(BdevIo& io);

 private:
  explicit Manager(event::Framework& fw, ManagerOptions o);
  BdevIo* get_io(Channel& ch);
  void put_io(Channel& ch, BdevIo* io);
  int submit_rw(Desc* d, event::IoChannel* ch, IoType type, const iovec* iov, int iovcnt,
                uint64_t offset, uint64_t num, IoCompletionFn cb, void* arg);
  BdevIo* prepare(Desc* d, event::IoChannel* ch, IoType type, uint64_t offset, uint64_t num,
                  IoCompletionFn cb, void* arg, int* rc);
  void start(BdevIo* io);
  void dispatch(BdevIo* io);
  bool needs_split(const BdevIo& io) const;
  void split(BdevIo* parent);
  void split_continue(BdevIo* parent);
  bool bounce_in(BdevIo* io);
  void bounce_out(BdevIo* io);
  void finish(BdevIo* io);
  void complete_to_user(BdevIo* io);
  void maybe_destruct(Bdev* bdev);
  static int channel_create(void* io_device, void* ctx);
  static void channel_destroy(void* io_device, void* ctx);
  static event::PollStatus channel_poll(void* ctx);
  static event::PollStatus qos_refill(void* ctx);
  static bool qos_admit(Bdev& b, const BdevIo& io);
  // Unregisters the QoS poller on the thread that owns it, then runs then(ctx) there.
  void stop_qos_poller(Bdev& b, event::MsgFn then, void* ctx);
  void destruct_when_unused(Bdev* b);
  void notify(Desc* d, DescEvent e);

  event::Framework& fw_;
  ManagerOptions opts_;
  std::mutex mu_;  // the registry: bdevs_, names, descriptors, claims (set-up paths)
  std::vector<std::unique_ptr<Bdev>> bdevs_;
  std::vector<VirtualModule*> vmodules_;
  std::vector<std::unique_ptr<Desc>> descs_;
  uint64_t next_desc_id_ = 1;
  std::vector<std::unique_ptr<BdevIo[]>> io_chunks_;
  env::MpmcQueue<BdevIo*> io_pool_;
  struct Bounce;
  std::unique_ptr<Bounce> bounce_;
};

}  // namespace pollux::bdev
