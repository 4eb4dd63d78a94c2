// A generic vfio-user server (QEMU docs/interop/vfio-user.rst, version 0.1) in front of a PCI
// device model. Two transports, same messages:
//   - in-process: a connection from connect_in_process(), called directly; it is to an
//     in-process client what an accepted socket is to a remote one (see there);
//   - a UNIX stream socket: listen(path), then poll_once(timeout) from the device's own loop
//     (one client at a time; fds travel as SCM_RIGHTS; a disconnect drops the client's DMA
//     mappings and eventfds, keeps the device state, and the server accepts the next client).
// Fds that come with a command that takes none (anything but DMA_MAP and SET_IRQS) are closed
// and the command is handled as if they had not been sent (stats().stray_fds counts them).
//
// DMA: every DMA_MAP must carry an fd; the server mmaps it (MAP_SHARED) and translate() turns a
// device address range into a pointer into that mapping. The device model reaches host memory
// only through translate().
//
// Threading: single-threaded. handle(), poll_once(), translate() and the other methods are
// called from one thread at a time (the emulator's device loop); the device model's callbacks
// run on that thread, inside handle()/poll_once().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unix_socket.h"
#include "spec/vfio_user.h"

namespace pollux::emu::vfio_user {

// A part of a region the client may mmap: [offset, offset + size) of the region, found at
// region.fd_offset + offset in region.fd.
struct SparseArea {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// One VFIO PCI region as the device model describes it.
struct RegionDesc {
  uint64_t size = 0;   // 0: the region does not exist
  uint32_t flags = 0;  // spec::vfio_user::kRegionFlagRead | Write | Mmap
  // With kRegionFlagMmap: the backing fd (owned by the model; the server sends duplicates) and
  // where the region starts in it. Without sparse areas the whole region is mappable.
  int fd = -1;
  uint64_t fd_offset = 0;
  std::vector<SparseArea> sparse;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  // index < spec::vfio_user::region::kNumPciRegions (BAR0-5, ROM, config = 7, VGA).
  virtual RegionDesc region(uint32_t index) const = 0;
  // Access inside the region (the server checks index, bounds and R/W flags first).
  // 0 or a negative errno, which goes back to the client in an error reply.
  virtual int region_read(uint32_t index, uint64_t offset, void* buf, std::size_t len) = 0;
  virtual int region_write(uint32_t index, uint64_t offset, const void* buf, std::size_t len) = 0;
  // VFIO_USER_DEVICE_RESET (function-level reset). DMA mappings stay.
  virtual void on_reset() = 0;
  // Number of interrupts of a type (spec::vfio_user::irq::k*). 0: not supported.
  virtual uint32_t irq_count(uint32_t /*index*/) const { return 0; }
  // [iova, iova + size) is about to be unmapped (DMA_UNMAP or client disconnect): stop using
  // pointers into it. After return the memory is gone.
  virtual void on_dma_unmap(uint64_t /*iova*/, uint64_t /*size*/) {}
};

struct ServerOptions {
  uint32_t max_msg_fds = 8;                // fds the server accepts in one message
  uint32_t max_data_xfer_size = 1u << 20;  // largest REGION_READ/WRITE count
  uint32_t max_dma_maps = 4096;
  uint64_t pgsizes = 4096;
  int max_messages_per_poll = 4;  // poll_once() handles at most this many
  int send_timeout_ms = 5000;     // a client that does not read its replies is dropped
};

struct ServerStats {
  uint64_t messages = 0;     // commands handled
  uint64_t errors = 0;       // error replies (or errors of no-reply commands)
  uint64_t connections = 0;  // clients accepted
  uint64_t disconnects = 0;
  uint64_t stray_fds = 0;  // fds received with commands that take none, closed unused
};

class Server final : public spec::vfio_user::MessageEndpoint {
 public:
  explicit Server(DeviceModel& model, ServerOptions options = {});
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // ---- in-process transport ----
  // A connection for a client in this process: one client at a time, as on the socket
  // (nullptr while another is connected). Dropping it ends its session (DMA maps, IRQ
  // eventfds), as closing a socket does. Once the server drops it (disconnect(): surprise
  // removal, re-insertion), every message on it fails with ENODEV, as every send on a hung-up
  // socket does: a client that missed a removal and re-insertion still learns that its
  // function is gone, instead of talking to the fresh one as if nothing had happened.
  std::unique_ptr<spec::vfio_user::MessageEndpoint> connect_in_process();
  bool in_process_connected() const { return in_process_conn_ != 0; }
  // Connectionless access (MessageEndpoint): the messages of every caller share one session,
  // which only disconnect() ends. For tests that drive the protocol message by message.
  void handle(const uint8_t* request, std::size_t len, const int* fds, std::size_t nfds,
              std::vector<uint8_t>& reply, std::vector<int>& reply_fds) override;

  // ---- UNIX socket transport ----
  // Creates the socket (replacing a stale file at `path`) and listens. 0 or a negative errno.
  // The socket file is the owner's only (0600), or 0660 for `group` (common/unix_socket.h);
  // a negative errno with *why (if given) saying what is wrong.
  int listen(const std::string& path, const std::string& group = "", std::string* why = nullptr);
  // Waits up to timeout_ms (0: don't wait, -1: forever) for the listening socket or the
  // client, accepts a client or handles up to max_messages_per_poll complete messages, and
  // returns the number of messages handled (0 is normal), or a negative errno when the
  // server is not listening. Never blocks on a partial message.
  int poll_once(int timeout_ms);
  bool client_connected() const { return conn_fd_ >= 0; }
  // The fd to wait on (the client's, else the listening socket), for an external poll loop.
  int wait_fd() const { return conn_fd_ >= 0 ? conn_fd_ : listen_fd_; }
  // Drops the client (as if it had disconnected): the socket's, or the in-process
  // connection (which fails from then on), and the session state either way.
  void disconnect();
  const std::string& path() const { return path_; }

  // ---- DMA space for the device model ----
  // Host pointer for [iova, iova + len) if it lies wholly inside one readable and writable
  // mapping, else nullptr. Same signature as emulator/nvme DmaSpace::translate.
  uint8_t* translate(uint64_t iova, std::size_t len);
  std::size_t dma_map_count() const { return maps_.size(); }

  // ---- interrupts (polled mode does not need them; kept correct for clients that do) ----
  // Signals the eventfd configured for (index, sub) unless masked. 0, -ENOENT (none), -EBUSY
  // (masked) or -EINVAL.
  int trigger_irq(uint32_t index, uint32_t sub);
  bool irq_has_eventfd(uint32_t index, uint32_t sub) const;

  bool negotiated() const { return negotiated_; }
  const ServerStats& stats() const { return stats_; }

 private:
  struct Mapping {
    uint64_t iova;
    uint64_t size;
    uint32_t flags;
    uint8_t* host;   // iova maps here
    void* map_addr;  // what mmap returned
    std::size_t map_len;
  };
  struct IrqState {
    std::vector<int> eventfds;  // per sub-index, -1 none
    std::vector<bool> masked;
  };
  class Fds;  // received fds, closed unless taken
  class InProcessConnection;

  int dispatch(const spec::vfio_user::Header& h, const uint8_t* payload, std::size_t plen, Fds& fds,
               std::vector<uint8_t>& out, std::vector<int>& out_fds);
  int do_version(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_dma_map(const uint8_t* p, std::size_t n, Fds& fds);
  int do_dma_unmap(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_device_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_region_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out,
                     std::vector<int>& out_fds);
  int do_irq_info(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_set_irqs(const uint8_t* p, std::size_t n, Fds& fds);
  int do_region_read(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_region_write(const uint8_t* p, std::size_t n, std::vector<uint8_t>& out);
  int do_reset();

  void process(const uint8_t* request, std::size_t len, Fds& fds, std::vector<uint8_t>& reply,
               std::vector<int>& reply_fds);
  int check_region_access(uint32_t index, uint64_t offset, uint32_t count, uint32_t need_flag,
                          RegionDesc* desc) const;
  void drop_session();
  void unmap(std::size_t i);
  std::size_t max_message_size() const;

  // socket side
  int accept_client();
  int read_messages();
  void close_client();
  bool send_message(const std::vector<uint8_t>& msg, std::vector<int>& fds);
  void send_error_and_close(uint16_t msg_id, uint16_t command, int err);

  DeviceModel& model_;
  ServerOptions opt_;
  ServerStats stats_;
  bool negotiated_ = false;
  uint32_t client_max_msg_fds_ = spec::vfio_user::kDefaultMaxMsgFds;
  std::vector<Mapping> maps_;  // sorted by iova, non-overlapping
  std::size_t last_hit_ = 0;
  IrqState irqs_[spec::vfio_user::irq::kNumPciIrqs];

  uint64_t in_process_conn_ = 0;  // id of the live in-process connection, 0: none
  uint64_t next_conn_id_ = 1;

  std::string path_;
  common::SocketPathOwner path_owner_;
  int listen_fd_ = -1;
  int conn_fd_ = -1;
  // The message being received: bytes so far and the fds that came with them.
  std::vector<uint8_t> rx_;
  std::size_t rx_need_ = 0;  // total bytes of the current message (0: header not complete)
  std::vector<int> rx_fds_;
  bool rx_truncated_ = false;  // the kernel dropped fds (more than max_msg_fds)
};

}  // namespace pollux::emu::vfio_user
