// Shared machinery of the virtual bdev modules (passthru, error, delay, split): a bdev built
// on a base bdev that it opens and claims.
//
// - VbdevModule is a VirtualModule holding configurations ("build X on base B"). A
//   configuration is built at once if B exists, else when B appears (examine()).
// - VirtualBdev is one virtual bdev. It is an io_device: its channel on a thread (VbdevChannel)
//   holds a channel of the base obtained with Manager::get_io_channel(base descriptor). The bdev
//   layer reaches the module through it; forward() sends an I/O on to the base.
// - VbdevBase is the open, claimed descriptor of one base, shared by the vbdevs built from one
//   configuration (the parts of a split share it).
//
// Teardown chain when the base goes: base unregistered → the base descriptor gets kRemove →
// every vbdev on it runs remove(): each of its channels is quiesced (the module completes
// what it holds) and the vbdev unregisters itself → once its users have closed and its
// channels are gone, its io_device is unregistered (its base channels are put) → the base
// descriptor is closed when the last vbdev on it is gone. Module delete APIs use the same
// remove(). Do not unregister a vbdev with Manager::unregister_bdev directly if its module
// holds I/O (error's "pending" mode, delay): remove() is what completes them.
//
// Threading: configuration and removal from any framework thread (module mutex on set-up
// paths only); submit and completions on the channel's thread, without locks.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"

namespace pollux::bdev {

class VbdevBase;
class VbdevModule;
class VirtualBdev;

// Per-thread context of a virtual bdev's io_device.
struct VbdevChannel {
  VirtualBdev* vbdev = nullptr;
  event::IoChannel* base_ch = nullptr;  // a channel of the base bdev on this thread
  void* priv = nullptr;                 // the module's per-channel state
};

class VirtualBdev {
 public:
  virtual ~VirtualBdev() = default;
  VirtualBdev(const VirtualBdev&) = delete;
  VirtualBdev& operator=(const VirtualBdev&) = delete;

  const std::string& name() const { return name_; }
  Manager& mgr() const { return mgr_; }
  VbdevModule& module() const { return module_; }
  Desc* base_desc() const;
  Bdev& base() const;
  Bdev* bdev() const { return bdev_; }
  bool removing() const { return removing_.load(std::memory_order_acquire); }

  // Quiesces every channel (channel_quiesce), then unregisters the bdev; done(ctx) runs on
  // the calling thread once it is unregistered. -EALREADY if a removal is under way.
  int remove(event::MsgFn done = nullptr, void* ctx = nullptr);

  // Sends io on to the base, `shift` blocks further (split). cb(base_io, success, arg) runs on
  // completion; pass complete_from_base (arg = &io) to complete io with the base's status. If
  // the base refuses (e.g. -ENOMEM, out of bdev_io), io is completed at once (kNoMemory: the
  // layer retries it; else kFailed) and cb never runs.
  void forward(BdevIo& io, VbdevChannel& ch, uint64_t shift, IoCompletionFn cb, void* arg);
  // Completes the vbdev's I/O (cb_arg) with the status of the base I/O (NVMe status kept).
  static void complete_from_base(BdevIo& base_io, bool success, void* cb_arg);
  static void complete_like(BdevIo& io, const BdevIo& base_io);
  // Completes io with a status saved from a base I/O (NVMe status and DW0 kept).
  static void complete_with(BdevIo& io, IoStatus status, uint16_t nvme_status, uint32_t nvme_cdw0);

 protected:
  VirtualBdev(VbdevModule& module, std::string name);

  // The module's hooks. submit() must eventually complete io on this thread.
  virtual void submit(BdevIo& io, VbdevChannel& ch) = 0;
  virtual bool supports(IoType t) const;  // default: what the base supports
  virtual std::size_t io_ctx_size() const { return 0; }
  // io's submitter gave it up (Backend::abort): by default the abort goes on to the base I/O
  // forward() made (its cb_arg is &io, as every module here passes). I/O a module holds itself
  // (error's "pending" mode) ends when the module releases it, as before.
  virtual void abort(BdevIo& io, VbdevChannel& ch);
  virtual int channel_create(VbdevChannel&) { return 0; }
  virtual void channel_destroy(VbdevChannel&) {}
  // On the channel's thread, before teardown: complete everything the module holds.
  virtual void channel_quiesce(VbdevChannel&) {}

 private:
  friend class VbdevModule;
  friend class VbdevBackend;
  static int io_channel_create(void* io_device, void* ctx);
  static void io_channel_destroy(void* io_device, void* ctx);
  void on_destruct();  // the bdev is unregistered: unregister the io_device, then detach

  VbdevModule& module_;
  Manager& mgr_;
  std::string name_;
  VbdevBase* base_ = nullptr;
  Bdev* bdev_ = nullptr;
  bool registered_ = false;  // set (under the module mutex) once register_bdev succeeded
  std::atomic<bool> removing_{false};
};

// One open, claimed base descriptor and the vbdevs built on it. Owned by its module.
class VbdevBase {
 public:
  Desc* desc() const { return desc_; }
  Bdev& bdev() const { return desc_->bdev(); }
  const std::string& config_id() const { return config_id_; }

 private:
  friend class VbdevModule;
  friend class VirtualBdev;
  static void on_event(DescEvent e, Bdev& bdev, void* ctx);
  VbdevModule* module_ = nullptr;
  Desc* desc_ = nullptr;
  std::string config_id_;
  std::vector<VirtualBdev*> vbdevs_;  // guarded by the module's mutex
};

class VbdevModule : public VirtualModule {
 public:
  // Registers itself with mgr (Manager::add_virtual_module). The module must outlive every
  // bdev it built, or the manager: tear its vbdevs down first, or destroy the manager first.
  VbdevModule(Manager& mgr, std::string name);
  ~VbdevModule() override;
  VbdevModule(const VbdevModule&) = delete;
  VbdevModule& operator=(const VbdevModule&) = delete;

  const char* name() const override { return name_.c_str(); }
  void examine(Manager& mgr, Bdev& base) override;
  Manager& manager() const { return mgr_; }

  // The live vbdev called name (built by this module), or nullptr.
  VirtualBdev* find_vbdev(const std::string& name);
  std::vector<std::string> vbdev_names();
  // Configurations (their ids) and whether each is built now.
  std::vector<std::pair<std::string, bool>> configs();
  // Configurations not built now, as (id, base name): their base does not exist (or could
  // not take them).
  std::vector<std::pair<std::string, std::string>> unbuilt();

 protected:
  // Builds the vbdevs of one configuration on an open, claimed base (register_vbdev for each).
  // Returns how many it registered; an error undoes what it registered.
  using BuildFn = std::function<Result<int>(VbdevBase& base)>;

  // Stores configuration `id` (unique in the module: -EEXIST) on base_name. Built now if the
  // base exists (true) — an error then drops the configuration again and removes whatever
  // part of it was registered — else when it appears (false).
  Result<bool> add_config(std::string id, std::string base_name, BuildFn build);
  // Drops configuration id (-ENOENT) and removes its vbdevs; done(ctx) on the calling thread
  // once they are all unregistered (at once if none was built).
  int remove_config(const std::string& id, event::MsgFn done, void* ctx);

  // Registers v on base with props (name = v's name). Copies nothing from the base: pass what
  // the vbdev should look like.
  Result<Bdev*> register_vbdev(std::unique_ptr<VirtualBdev> v, VbdevBase& base,
                               BdevProperties props);

 private:
  friend class VirtualBdev;
  friend class VbdevBase;
  struct Config {
    std::string id, base_name;
    BuildFn build;
    VbdevBase* base = nullptr;  // while built (or being built)
    bool building = false;
  };
  Result<int> build(Config* c);  // c is marked building; called without the mutex
  void detach(VirtualBdev* v);   // v is gone; closes the base with its last vbdev
  void remove_all(VbdevBase* b);

  Manager& mgr_;
  std::string name_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Config>> configs_;
  std::vector<std::unique_ptr<VbdevBase>> bases_;
  std::vector<VirtualBdev*> vbdevs_;
};

// Copies what a vbdev that forwards 1:1 should show of its base: block size, count, optimal
// I/O boundary, write cache. (Splitting and bouncing are left to the base's own layer.)
BdevProperties inherit_properties(const Bdev& base, std::string name, std::string product);

}  // namespace pollux::bdev
