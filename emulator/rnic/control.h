// pollux-rnic's fault commands: one JSON object per line on its control socket, one JSON reply
// ({"ok":true,...} or {"ok":false,"error":"..."} naming the bad field). What scenarios/sim's
// RdmaFabric does to NICs in process, for NICs in their own program:
//
//   {"cmd":"link_down","nic":0,"duration_us":2000}   the NIC's link down (then up by itself)
//   {"cmd":"link_up","nic":0}
//   {"cmd":"loss","rate":0.01}   {"cmd":"corrupt","rate":0.001}   (the wire's, until changed)
//   {"cmd":"qp_error","nic":1,"qpn":3}   the QP fails as after an internal error
//   {"cmd":"nic_reset","nic":1}          a function-level reset (every resource gone)
//   {"cmd":"stats"}                      per NIC counters and QPs by state, the wire's counts
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/rnic/cluster.h"

namespace pollux::emu::rnic {

class RnicControl {
 public:
  // `faults`: the wire's faults the cluster was made with (loss and corrupt change them).
  RnicControl(Cluster& cluster, WireFaults faults) : c_(cluster), faults_(faults) {}
  // One command at the cluster's time now_ns. Never throws, whatever the text.
  std::string apply(std::string_view json_text, uint64_t now_ns);
  // Links whose down time has passed come back up (each loop turn).
  void tick(uint64_t now_ns);

 private:
  Cluster& c_;
  WireFaults faults_;
  std::vector<uint64_t> down_until_;  // per NIC, 0: not taken down here
};

}  // namespace pollux::emu::rnic
