#include "driver/bdev/modules/uring.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <liburing.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace pollux::bdev {
namespace {

// Per-I/O module context: the link of the channel's queue of I/O waiting for ring space.
struct UringIoCtx {
  BdevIo* next;
};

class UringBackend;

struct UringChannel {
  io_uring ring{};
  BdevIo* wait_head = nullptr;  // more I/O than ring entries: waits here, in order
  BdevIo* wait_tail = nullptr;
  event::Poller* poller = nullptr;
  uint32_t depth = 0;
  UringBackend* backend = nullptr;
  uint32_t inflight = 0;  // prepared or submitted, not yet reaped
  uint32_t unsubmitted = 0;
};

class UringBackend final : public Backend {
 public:
  UringBackend(event::Framework& fw, int fd, uint32_t bs, uint32_t depth, std::string name)
      : fw_(fw), fd_(fd), bs_(bs), depth_(depth) {
    fw_.register_io_device(this, channel_create, channel_destroy, sizeof(UringChannel),
                           "bdev_uring_" + name);
  }
  ~UringBackend() override {
    if (!destructed_) fw_.unregister_io_device(this, nullptr, nullptr);  // registration failed
    if (fd_ >= 0) ::close(fd_);
  }
  bool supports(IoType t) const override {
    return t == IoType::kRead || t == IoType::kWrite || t == IoType::kFlush ||
           t == IoType::kUnmap || t == IoType::kReset;
  }
  void* io_device() override { return this; }
  std::size_t io_ctx_size() const override { return sizeof(UringIoCtx); }
  // The bdev's channels are gone; ours follow (their destroy touches only the channel).
  // The layer deletes this backend (closing the file) when destruct() returns.
  void destruct() override {
    destructed_ = true;
    fw_.unregister_io_device(this, nullptr, nullptr);
  }

  void submit(BdevIo& io, void* chctx) override {
    auto* ch = static_cast<UringChannel*>(chctx);
    if (io.type() == IoType::kReset) {
      io.complete(IoStatus::kSuccess);
      return;
    }
    // The ring is full: wait (in order) for the poller to reap completions. Queued here
    // rather than kNoMemory, whose retries are bounded by count, not by completions.
    if (ch->wait_head != nullptr || !prepare(ch, io)) {
      auto* c = static_cast<UringIoCtx*>(io.module_ctx());
      c->next = nullptr;
      if (ch->wait_tail) static_cast<UringIoCtx*>(ch->wait_tail->module_ctx())->next = &io;
      else ch->wait_head = &io;
      ch->wait_tail = &io;
    }
  }

 private:
  // Fills an SQE for io; false if the ring has no room.
  bool prepare(UringChannel* ch, BdevIo& io) {
    if (ch->inflight >= ch->depth) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ch->ring);
    if (sqe == nullptr) return false;
    const uint64_t off = io.offset_blocks() * bs_;
    const uint64_t len = io.num_blocks() * bs_;
    switch (io.type()) {
      case IoType::kRead:
        io_uring_prep_readv(sqe, fd_, io.iovs(), static_cast<unsigned>(io.iovcnt()), off);
        break;
      case IoType::kWrite:
        io_uring_prep_writev(sqe, fd_, io.iovs(), static_cast<unsigned>(io.iovcnt()), off);
        break;
      case IoType::kFlush: io_uring_prep_fsync(sqe, fd_, 0); break;
      case IoType::kUnmap:
        io_uring_prep_fallocate(sqe, fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                static_cast<off_t>(off), static_cast<off_t>(len));
        break;
      default:  // not offered (supports()): keep the SQE harmless
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
        ++ch->inflight;
        ++ch->unsubmitted;
        io.complete(IoStatus::kFailed);
        return true;
    }
    io_uring_sqe_set_data(sqe, &io);
    ++ch->inflight;
    ++ch->unsubmitted;
    return true;
  }

  static int channel_create(void* io_device, void* ctx) {
    auto* self = static_cast<UringBackend*>(io_device);
    auto* ch = new (ctx) UringChannel;
    ch->depth = self->depth_;
    ch->backend = self;
    if (const int rc = io_uring_queue_init(self->depth_, &ch->ring, 0); rc < 0) {
      ch->~UringChannel();
      return rc;
    }
    ch->poller = event::Thread::current()->register_poller(poll, ch, 0, "bdev_uring");
    return 0;
  }
  static void channel_destroy(void*, void* ctx) {
    auto* ch = static_cast<UringChannel*>(ctx);
    event::Thread::current()->unregister_poller(ch->poller);
    // Nothing should be in flight (the bdev channel above is gone); drain if something is.
    while (BdevIo* io = ch->wait_head) {
      ch->wait_head = static_cast<UringIoCtx*>(io->module_ctx())->next;
      io->complete(IoStatus::kAborted);
    }
    while (ch->inflight > 0) {
      if (ch->unsubmitted) {
        io_uring_submit(&ch->ring);
        ch->unsubmitted = 0;
      }
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ch->ring, &cqe) < 0) break;
      complete_one(ch, cqe);
      io_uring_cqe_seen(&ch->ring, cqe);
    }
    io_uring_queue_exit(&ch->ring);
    ch->~UringChannel();
  }
  static void complete_one(UringChannel* ch, io_uring_cqe* cqe) {
    --ch->inflight;
    auto* io = static_cast<BdevIo*>(io_uring_cqe_get_data(cqe));
    if (io == nullptr) return;
    IoStatus s = IoStatus::kSuccess;
    if (cqe->res < 0) {
      s = IoStatus::kFailed;
    } else if (io->type() == IoType::kRead || io->type() == IoType::kWrite) {
      const uint64_t want = io->num_blocks() * io->bdev().block_size();
      if (static_cast<uint64_t>(cqe->res) != want) s = IoStatus::kFailed;  // short transfer
    }
    io->complete(s);
  }
  // One io_uring_enter for everything prepared since the last poll, then the CQEs.
  static event::PollStatus poll(void* arg) {
    auto* ch = static_cast<UringChannel*>(arg);
    int work = 0;
    while (ch->wait_head != nullptr) {  // room was freed by the last reap
      BdevIo* io = ch->wait_head;
      BdevIo* next = static_cast<UringIoCtx*>(io->module_ctx())->next;
      if (!ch->backend->prepare(ch, *io)) break;
      ch->wait_head = next;
      if (next == nullptr) ch->wait_tail = nullptr;
      ++work;
    }
    if (ch->unsubmitted) {
      const int rc = io_uring_submit(&ch->ring);
      if (rc > 0) {
        ch->unsubmitted -= std::min<uint32_t>(ch->unsubmitted, static_cast<uint32_t>(rc));
        ++work;
      }
    }
    io_uring_cqe* cqes[64];
    unsigned n;
    while ((n = io_uring_peek_batch_cqe(&ch->ring, cqes, 64)) > 0) {
      // Copy what we need first: a completion callback may prepare new SQEs, never reap.
      for (unsigned i = 0; i < n; ++i) complete_one(ch, cqes[i]);
      io_uring_cq_advance(&ch->ring, n);
      work += static_cast<int>(n);
      if (n < 64) break;
    }
    return work ? event::PollStatus::kBusy : event::PollStatus::kIdle;
  }

  event::Framework& fw_;
  int fd_;
  uint32_t bs_;
  uint32_t depth_;
  bool destructed_ = false;
};

}  // namespace

Result<Bdev*> create_uring_bdev(Manager& mgr, const UringOptions& o) {
  if (o.name.empty() || o.filename.empty())
    return make_error(EINVAL, "uring bdev: name and filename are required");
  if (o.queue_depth == 0) return make_error(EINVAL, "uring bdev: queue depth 0");
  const int fd = ::open(o.filename.c_str(), O_RDWR | O_CLOEXEC | (o.direct ? O_DIRECT : 0));
  if (fd < 0) return make_error(errno, "uring bdev: open " + o.filename + ": " + std::strerror(errno));
  auto fail = [fd](int err, const std::string& what) {
    ::close(fd);
    return make_error(err, "uring bdev: " + what + ": " + std::strerror(err));
  };
  struct stat st{};
  if (::fstat(fd, &st) != 0) return fail(errno, "fstat " + o.filename);
  uint64_t size = 0;
  uint32_t bs = o.block_size;
  if (S_ISBLK(st.st_mode)) {
    if (::ioctl(fd, BLKGETSIZE64, &size) != 0) return fail(errno, "BLKGETSIZE64");
    int lbs = 0;
    if (bs == 0 && ::ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs > 0) bs = static_cast<uint32_t>(lbs);
  } else if (S_ISREG(st.st_mode)) {
    size = static_cast<uint64_t>(st.st_size);
  } else {
    return fail(EINVAL, o.filename + " is neither a regular file nor a block device");
  }
  if (bs == 0) bs = 512;
  if (bs % 512 != 0) return fail(EINVAL, "block size must be a multiple of 512");
  uint64_t blocks = o.num_blocks ? o.num_blocks : size / bs;
  if (o.num_blocks && o.num_blocks * bs > size) {
    if (!S_ISREG(st.st_mode)) return fail(ENOSPC, "device smaller than num_blocks");
    if (::ftruncate(fd, static_cast<off_t>(o.num_blocks * bs)) != 0)
      return fail(errno, "extend " + o.filename);
  }
  if (blocks == 0) return fail(EINVAL, o.filename + " is smaller than one block");
  BdevProperties p;
  p.name = o.name;
  p.product = "URING bdev";
  p.block_size = bs;
  p.num_blocks = blocks;
  p.write_cache = true;  // the page cache (or the device's cache): flush is fsync
  if (o.direct) {
    uint32_t log2 = 0;
    while ((1u << log2) < bs) ++log2;
    p.required_alignment = log2;
  }
  return mgr.register_bdev(
      std::move(p),
      std::make_unique<UringBackend>(mgr.framework(), fd, bs, o.queue_depth, o.name), "uring");
}

int delete_uring_bdev(Manager& mgr, const std::string& name, event::MsgFn done, void* ctx) {
  Bdev* b = mgr.find(name);
  if (b == nullptr || b->module() != "uring") return -ENODEV;
  return mgr.unregister_bdev(name, done, ctx);
}

}  // namespace pollux::bdev
