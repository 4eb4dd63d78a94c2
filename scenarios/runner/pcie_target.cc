// The qemu target: every device a PCI function bound to vfio-pci (QEMU's NVMe controller in
// the HIL guest), the unchanged driver on it through driver/env's vfio backend, one
// step-mode reactor on CLOCK_MONOTONIC (1 tick = 1 ns), real time only.
//
// Hot-plug goes through QEMU's monitor. The runner writes a request line on a serial port
// whose other end (tests/hil/qmp_hotplug.py on the host) turns it into QMP and answers:
//   "remove <qemu_id>"  ->  device_del          "ok remove <qemu_id>" | "error remove <id>: why"
//   "insert <qemu_id>"  ->  device_add, once the slot is empty    "ok insert <qemu_id>" | ...
// A function that comes back is bound to vfio-pci by `pollux-setup bind BDF` (a udev rule's
// job on a real machine); bdev_nvme's hot-plug poller then attaches it.
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "driver/env/vfio_pci.h"
#include "driver/nvme/connect.h"
#include "scenarios/runner/target.h"

extern char** environ;

namespace pollux::scenarios {
namespace {

constexpr const char* kSysfs = "/sys/bus/pci/devices";
constexpr uint64_t kComeBackNs = 60'000'000'000;  // device_add to a bound function, at most
constexpr uint64_t kBindRetryNs = 1'000'000'000;
constexpr int kBindAttempts = 3;

// NVMe functions (class 01:08:02) in BDF order.
std::vector<std::string> nvme_functions() {
  std::vector<std::string> out;
  DIR* dir = opendir(kSysfs);
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string(kSysfs) + "/" + e->d_name + "/class");
    std::string cls;
    if (in >> cls && cls == "0x010802") out.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

// One line-oriented channel to QEMU's monitor agent (a serial port, raw).
class Monitor {
 public:
  ~Monitor() {
    if (fd_ >= 0) close(fd_);
  }
  std::string open_path(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) return "monitor " + path + ": " + std::strerror(errno);
    termios t{};
    if (isatty(fd_) && tcgetattr(fd_, &t) == 0) {
      cfmakeraw(&t);
      tcsetattr(fd_, TCSANOW, &t);
      tcflush(fd_, TCIOFLUSH);  // nothing stale from an earlier run
    }
    path_ = path;
    return "";
  }
  std::string send(const std::string& line) {
    const std::string s = line + "\n";
    const ssize_t n = write(fd_, s.data(), s.size());
    if (n != static_cast<ssize_t>(s.size())) {
      return "monitor " + path_ + ": write: " + (n < 0 ? std::strerror(errno) : "short");
    }
    return "";
  }
  // Complete lines received so far.
  std::vector<std::string> receive() {
    char buf[512];
    for (ssize_t n; (n = read(fd_, buf, sizeof buf)) > 0;) partial_.append(buf, n);
    std::vector<std::string> lines;
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
      std::string l = partial_.substr(0, nl);
      partial_.erase(0, nl + 1);
      if (!l.empty() && l.back() == '\r') l.pop_back();
      if (!l.empty()) lines.push_back(l);
    }
    return lines;
  }

 private:
  int fd_ = -1;
  std::string path_, partial_;
};

struct Device {
  DeviceSpec spec;
  std::string bdf;
  Monitor* monitor = nullptr;  // opened when the timeline hot-plugs this device
  bool inserting = false, insert_acked = false;
  uint64_t insert_asked_ns = 0, last_bind_ns = 0;
  int bind_attempts = 0;
  pid_t binder = -1;
};

class PcieTarget final : public Target {
 public:
  explicit PcieTarget(TuneController tune) : tune_(std::move(tune)) {}
  ~PcieTarget() override {
    for (Device& d : devices_) {
      if (d.binder > 0) waitpid(d.binder, nullptr, 0);
    }
    if (fw_) {
      fw_->stop(0);
      for (int i = 0; i < 1000 && !fw_->finished(); ++i) fw_->step();
    }
  }
  std::string init(const Scenario& sc);

  event::Framework& framework() override { return *fw_; }
  event::Thread& thread() override { return *thread_; }
  // The process-wide registry: POLLUX_IOVA_MODE applies (docs/HARDWARE.md).
  env::MemoryRegistry& registry() override { return env::MemoryRegistry::global(); }
  const env::Clock& clock() override { return env::MonotonicClock::instance(); }
  uint32_t devices() const override { return static_cast<uint32_t>(devices_.size()); }

  Result<std::unique_ptr<nvme::Controller>> connect(uint32_t d) override {
    nvme::TransportId trid;
    trid.trtype = nvme::TransportType::kPcie;
    trid.traddr = devices_[d].bdf;
    nvme::ControllerOptions co;
    co.registry = &registry();
    co.clock = &clock();
    co.wait_hook = [this] {
      if (after_advance_) after_advance_();
      sched_yield();
    };
    if (tune_) tune_(co);
    return nvme::connect(trid, co);
  }
  bool present(uint32_t d) override { return env::vfio_pci_bound(devices_[d].bdf, kSysfs); }
  // Unknown: QEMU's write cache is the host's page cache; it survives the guest, and this
  // target has no power-loss fault.
  bool power_loss_protected(uint32_t) const override { return true; }
  bool starts_zeroed() const override { return false; }  // an earlier run's data is there
  void watch(nvme::Qpair*, bool) override {}

  void step() override {
    for (auto& [path, m] : monitors_) {
      for (const std::string& line : m->receive()) on_reply(line);
    }
    for (Device& d : devices_) follow_insertion(d);
    fw_->step();
    ++steps_;
    if (after_advance_) after_advance_();
  }
  std::string set_realtime(bool on) override {
    return on ? "" : "qemu devices run in real time (not --time virtual)";
  }
  void set_after_advance(std::function<void()> fn) override { after_advance_ = std::move(fn); }
  uint64_t settle_ns() const override { return kComeBackNs; }

  std::string hot_remove(uint32_t d) override { return request(devices_[d], "remove"); }
  std::string hot_insert(uint32_t d) override {
    Device& dev = devices_[d];
    if (std::string e = request(dev, "insert"); !e.empty()) return e;
    dev.inserting = true;
    dev.insert_acked = false;
    dev.insert_asked_ns = clock().now();
    dev.bind_attempts = 0;
    return "";
  }
  bool coming_back(uint32_t d) const override { return devices_[d].inserting; }
  InjectResult inject(uint32_t, const FaultSpec& s, uint64_t, uint64_t) override {
    InjectResult r;  // validate() refuses these for qemu devices: this is the backstop
    r.error = std::string(to_string(s.kind)) + " needs an emulated device";
    return r;
  }
  void poll_states(bool, const std::function<void(uint32_t, const char*)>&) override {}

  std::string describe(uint32_t d) override {
    const Device& dev = devices_[d];
    return " " + dev.bdf + (present(d) ? " bound" : " not bound to vfio-pci") +
           (dev.inserting ? " coming back" : "");
  }
  void outcome(uint32_t, DeviceOutcome* out) override { out->device_counters = false; }
  void collect_metrics(metrics::Builder&, uint64_t) const override {}
  uint64_t steps() const override { return steps_; }
  std::vector<std::string> errors() const override { return errors_; }

 private:
  std::string request(Device& d, const char* what) {
    if (d.monitor == nullptr) return "device " + d.spec.name + ": no monitor opened";
    return d.monitor->send(std::string(what) + " " + d.spec.qemu_id);
  }
  void on_reply(const std::string& line) {
    for (Device& d : devices_) {
      if (line == "ok insert " + d.spec.qemu_id) d.insert_acked = true;
      if (line.rfind("error remove " + d.spec.qemu_id + ":", 0) == 0 ||
          line.rfind("error insert " + d.spec.qemu_id + ":", 0) == 0) {
        errors_.push_back("QEMU's monitor: " + line);
        d.inserting = false;
      }
    }
  }
  // After device_add: the function appears (the guest's pciehp enumerates it) without a
  // driver; bind it to vfio-pci, then the hot-plug poller sees it present.
  void follow_insertion(Device& d) {
    if (d.binder > 0) {
      int status = 0;
      if (waitpid(d.binder, &status, WNOHANG) == 0) return;
      d.binder = -1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errors_.push_back("device " + d.spec.name + ": pollux-setup bind " + d.bdf +
                          " failed (attempt " + std::to_string(d.bind_attempts) + ")");
      }
    }
    if (!d.inserting || !d.insert_acked) return;
    const uint64_t now = clock().now();
    if (present(static_cast<uint32_t>(&d - devices_.data()))) {
      d.inserting = false;
      return;
    }
    if (now - d.insert_asked_ns > kComeBackNs) {
      errors_.push_back("device " + d.spec.name + " (" + d.bdf + ") was not back on vfio-pci " +
                        format_ns(kComeBackNs) + " after device_add");
      d.inserting = false;
      return;
    }
    struct stat st {};
    if (stat((std::string(kSysfs) + "/" + d.bdf).c_str(), &st) != 0) return;
    if (d.bind_attempts >= kBindAttempts || now - d.last_bind_ns < kBindRetryNs) return;
    ++d.bind_attempts;
    d.last_bind_ns = now;
    const char* argv[] = {"pollux-setup", "bind", d.bdf.c_str(), nullptr};
    if (int rc = posix_spawnp(&d.binder, argv[0], nullptr, nullptr, const_cast<char**>(argv),
                              environ);
        rc != 0) {
      d.binder = -1;
      errors_.push_back("device " + d.spec.name + ": cannot run pollux-setup bind: " +
                        std::strerror(rc));
      d.inserting = false;
    }
  }

  TuneController tune_;
  std::unique_ptr<event::Framework> fw_;
  event::Thread* thread_ = nullptr;
  std::vector<Device> devices_;
  std::map<std::string, std::unique_ptr<Monitor>> monitors_;
  std::function<void()> after_advance_;
  std::vector<std::string> errors_;
  uint64_t steps_ = 0;
};

std::string PcieTarget::init(const Scenario& sc) {
  const std::vector<std::string> found = nvme_functions();
  size_t next_auto = 0;
  for (const DeviceSpec& spec : sc.devices) {
    Device d;
    d.spec = spec;
    if (spec.traddr == "auto") {
      if (next_auto >= found.size()) {
        return "device " + spec.name + ": traddr auto: the machine has " +
               std::to_string(found.size()) + " NVMe function(s) for " +
               std::to_string(next_auto + 1) + " auto device(s)";
      }
      d.bdf = found[next_auto++];
    } else {
      auto bdf = env::normalise_bdf(spec.traddr);
      if (!bdf) return "device " + spec.name + ": traddr: " + bdf.error().message;
      d.bdf = *bdf;
    }
    if (!env::vfio_pci_bound(d.bdf, kSysfs)) {
      return "device " + spec.name + ": " + d.bdf +
             " is not bound to vfio-pci (tools/pollux-setup bind " + d.bdf + ")";
    }
    devices_.push_back(d);
  }
  // Monitors: opened now, for the devices the timeline hot-plugs, so a missing agent fails
  // the set-up rather than the run.
  for (Device& d : devices_) {
    bool hotplugged = false;
    for (const FaultSpec& f : sc.faults) {
      const std::string& target = f.device.empty() ? sc.devices.front().name : f.device;
      hotplugged |= target == d.spec.name &&
                    (f.kind == FaultKind::kHotRemove || f.kind == FaultKind::kHotInsert);
    }
    if (!hotplugged) continue;
    auto& m = monitors_[d.spec.monitor];
    if (!m) {
      m = std::make_unique<Monitor>();
      if (std::string e = m->open_path(d.spec.monitor); !e.empty()) {
        return "device " + d.spec.name + ": " + e;
      }
    }
    d.monitor = m.get();
  }
  event::FrameworkOptions fo;
  fo.core_mask = "0x1";
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &clock();
  auto fw = event::Framework::create(fo);
  if (!fw) return fw.error().message;
  fw_ = std::move(fw).value();
  thread_ = fw_->create_thread("scenario-host", 0);
  return "";
}

}  // namespace

std::unique_ptr<Target> make_pcie_target(const Scenario& sc, TuneController tune,
                                         std::string* error) {
  auto t = std::make_unique<PcieTarget>(std::move(tune));
  if (std::string e = t->init(sc); !e.empty()) {
    *error = e;
    return nullptr;
  }
  return t;
}

}  // namespace pollux::scenarios
