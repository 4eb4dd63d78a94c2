#include "driver/nvme/emulator_status.h"

#include <cstdio>
#include <cstring>

#include "driver/nvme/status.h"

namespace pollux::nvme {

std::optional<spec::nvme::PolluxEmulatorStatus> emulator_status(Controller& ctrl) {
  if (ctrl.transport().address().rfind("vfio-user:", 0) != 0) return std::nullopt;
  spec::nvme::PolluxEmulatorStatus st{};
  spec::nvme::SubmissionEntry cmd{};
  cmd.opcode = spec::nvme::admin::kGetLogPage;
  cmd.nsid = 0xffffffff;
  cmd.cdw10 = spec::nvme::log::kPolluxEmulatorStatus | (sizeof st / 4 - 1) << 16;
  auto cpl = ctrl.admin_sync(cmd, &st, sizeof st);
  if (!cpl || cpl_is_error(*cpl) || std::memcmp(st.signature, "PLXE", 4) != 0)
    return std::nullopt;
  return st;
}

std::string emulator_lag_warning(const std::string& tool, const std::string& address,
                                 const spec::nvme::PolluxEmulatorStatus& st) {
  if (!st.realtime || !st.fell_behind) return "";
  char text[512];
  std::snprintf(text, sizeof text,
                "%s: WARNING: %s: the emulator's model fell up to %.0f us behind the wall clock "
                "(threshold %.0f us): the latency and IOPS above are this machine's, not the "
                "device profile's",
                tool.c_str(), address.c_str(), static_cast<double>(st.max_lag_ns) / 1e3,
                static_cast<double>(st.warn_lag_ns) / 1e3);
  return text;
}

}  // namespace pollux::nvme
