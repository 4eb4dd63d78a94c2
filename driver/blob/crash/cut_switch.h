// A pass-through test bdev over any base bdev (e.g. bdev_nvme on the timed emulator) that
// counts device commands and "cuts power" right after the k-th completes: from then on it
// fails every command (the host cannot reach a dead device) and tells the harness, whose job
// is to cut the real device (the emulator's power_loss()) before anything else runs. It may
// expose only the first max_blocks of the base (a small store on a large namespace).
#pragma once

#include <cstdint>
#include <string>

#include "driver/bdev/bdev.h"

namespace pollux::blob::crash {

class CutSwitch {
 public:
  // Opens base (write) and registers `name` over it. The object lives as long as the bdev.
  static Result<CutSwitch*> create(bdev::Manager& mgr, const std::string& base,
                                   const std::string& name, uint64_t max_blocks);
  void arm(uint64_t after) { cut_after_ = after; }
  // True once after the cut: the harness now cuts the device's power.
  bool take_cut_request() {
    const bool r = cut_requested_;
    cut_requested_ = false;
    return r;
  }
  bool cut() const { return dead_; }
  void power_on() { dead_ = false, commands_ = 0, cut_after_ = 0, cut_requested_ = false; }
  uint64_t commands() const { return commands_; }

  struct Backend;

 private:
  // The base went away (its controller detached, the drive pulled): the switch goes with it,
  // as a vbdev does, so the base's close completes the removal.
  static void on_base_event(bdev::DescEvent e, bdev::Bdev& base, void* ctx);

  bdev::Manager* mgr_ = nullptr;
  std::string name_;
  uint64_t commands_ = 0, cut_after_ = 0;
  bool dead_ = false, cut_requested_ = false;
};

}  // namespace pollux::blob::crash
