// Controller initialisation against a scripted controller: the PCI command register a polled
// driver leaves (Interrupt Disable set), and a controller that reports fatal status (CSTS.CFS)
// while it is being initialised — with RDY, or later while it still completes commands, the
// way SPDK's vfio-user target behaves after it failed to raise an interrupt. Attach must fail
// with the reason, not carry on.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "driver/env/memory_registry.h"
#include "driver/nvme/controller.h"
#include "driver/nvme/scripted_device.h"
#include "spec/pci.h"

namespace pollux::nvme {
namespace {

namespace sn = spec::nvme;
namespace pc = spec::pci::command;

// What the fake controller does, and what it saw (outlives the device the controller owns).
struct Script {
  bool fatal_with_ready = false;  // CSTS reads RDY | CFS as soon as it is enabled
  // Sets CFS when completing a command it matches; commands keep completing all the same.
  std::function<bool(const sn::SubmissionEntry&)> fatal_after;
  // Left by an earlier user: enabled and fatal; RDY and CFS clear only once EN is cleared and
  // CSTS has been read a few times.
  bool start_enabled_fatal = false;
  uint16_t command_register = 0;
  int commands_seen = 0;
};

// Just enough of an NVMe controller for initialisation: CC.EN/SHN drive CSTS, admin commands
// are answered when the admin SQ doorbell is written (Identify: zeroes, Number of Queues: one
// pair, AERs held), and the script sets CFS at chosen points.
class FakeController : public testing::ScriptedDevice {
 public:
  explicit FakeController(Script& script) : script_(script) {
    mapped_doorbells = false;  // doorbell writes come through bar_write: we answer there
    set64(sn::reg::kCap, sn::cap::make(63, true, 1, 0, false, sn::cap::kCssNvm, 0, 0));
    set32(sn::reg::kVs, sn::make_version(1, 4));
  }
  void start() {
    if (!script_.start_enabled_fatal) return;
    set32(sn::reg::kCc, sn::cc::kEn);
    set32(sn::reg::kCsts, sn::csts::kRdy | sn::csts::kCfs);
  }

  int config_read(uint32_t off, void* buf, std::size_t len) override {
    if (off != spec::pci::kCommand || len != 2) return -EINVAL;
    std::memcpy(buf, &script_.command_register, 2);
    return 0;
  }
  int config_write(uint32_t off, const void* buf, std::size_t len) override {
    if (off != spec::pci::kCommand || len != 2) return -EINVAL;
    std::memcpy(&script_.command_register, buf, 2);
    return 0;
  }
  int bar_read(int bar, uint64_t off, void* buf, std::size_t len) override {
    if (off == sn::reg::kCsts && disabling_ > 0 && --disabling_ == 0) set32(sn::reg::kCsts, 0);
    return ScriptedDevice::bar_read(bar, off, buf, len);
  }
  int bar_write(int bar, uint64_t off, const void* buf, std::size_t len) override {
    const uint32_t old_cc = get32(sn::reg::kCc);
    if (const int rc = ScriptedDevice::bar_write(bar, off, buf, len); rc != 0) return rc;
    if (off == sn::reg::kCc) on_cc(old_cc, get32(sn::reg::kCc));
    if (off == sn::reg::sq_tail_doorbell(0, 0)) on_admin_doorbell(get32(off));
    return 0;
  }

 private:
  uint32_t get32(uint64_t off) {
    uint32_t v = 0;
    ScriptedDevice::bar_read(0, off, &v, 4);
    return v;
  }
  uint64_t get64(uint64_t off) {
    uint64_t v = 0;
    ScriptedDevice::bar_read(0, off, &v, 8);
    return v;
  }
  void set32(uint64_t off, uint32_t v) { ScriptedDevice::bar_write(0, off, &v, 4); }
  void set64(uint64_t off, uint64_t v) { ScriptedDevice::bar_write(0, off, &v, 8); }

  void on_cc(uint32_t old_cc, uint32_t cc) {
    if ((old_cc & sn::cc::kEn) && !(cc & sn::cc::kEn)) {
      if (script_.start_enabled_fatal && !recovered_) {
        disabling_ = 3;  // RDY and CFS stay for a few reads
        recovered_ = true;
      } else {
        set32(sn::reg::kCsts, 0);
      }
      return;
    }
    if (!(old_cc & sn::cc::kEn) && (cc & sn::cc::kEn)) {
      sq_head_ = cq_tail_ = 0;
      phase_ = 1;
      set32(sn::reg::kCsts, sn::csts::kRdy | (script_.fatal_with_ready ? sn::csts::kCfs : 0));
    }
    if (sn::cc::shn(cc) == sn::cc::kShnNormal) {
      set32(sn::reg::kCsts, get32(sn::reg::kCsts) | sn::csts::kShstComplete << 2);
    }
  }

  void on_admin_doorbell(uint32_t tail) {
    const uint32_t entries = sn::aqa::asqs(get32(sn::reg::kAqa)) + 1;
    auto* sq = reinterpret_cast<const sn::SubmissionEntry*>(get64(sn::reg::kAsq));
    auto* cq = reinterpret_cast<sn::CompletionEntry*>(get64(sn::reg::kAcq));
    for (; sq_head_ != tail; sq_head_ = (sq_head_ + 1) % entries) {
      const sn::SubmissionEntry cmd = sq[sq_head_];
      ++script_.commands_seen;
      if (cmd.opcode == sn::admin::kAsyncEventRequest) continue;  // held
      if (cmd.opcode == sn::admin::kIdentify) {
        std::memset(reinterpret_cast<void*>(cmd.dptr.prp.prp1), 0, 4096);
      }
      sn::CompletionEntry c{};
      c.cid = cmd.cid;
      c.sqhd = static_cast<uint16_t>((sq_head_ + 1) % entries);
      c.status = phase_;  // success, phase tag
      cq[cq_tail_] = c;
      if (++cq_tail_ == entries) {
        cq_tail_ = 0;
        phase_ ^= 1;
      }
      if (script_.fatal_after && script_.fatal_after(cmd)) {
        set32(sn::reg::kCsts, get32(sn::reg::kCsts) | sn::csts::kCfs);
      }
    }
  }

  Script& script_;
  uint32_t sq_head_ = 0, cq_tail_ = 0;
  uint16_t phase_ = 1;
  int disabling_ = 0;
  bool recovered_ = false;
};

struct Attach {
  env::MemoryRegistry registry{env::IovaMode::kVirtualAddress};
  Script script;

  Result<std::unique_ptr<Controller>> run() {
    auto dev = std::make_unique<FakeController>(script);
    dev->start();
    ControllerOptions o;
    o.registry = &registry;
    return Controller::attach(std::move(dev), o);
  }
};

TEST(ControllerInit, PolledDriverSetsInterruptDisable) {
  Attach a;
  auto ctrl = a.run();
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  // Memory space and bus mastering for DMA; Interrupt Disable: no INTx the driver would not
  // be listening to (SPDK's target fails the controller when it cannot signal one).
  EXPECT_EQ(a.script.command_register & (pc::kMemorySpace | pc::kBusMaster | pc::kInterruptDisable),
            pc::kMemorySpace | pc::kBusMaster | pc::kInterruptDisable);
}

TEST(ControllerInit, FatalStatusWithReadyFailsAttach) {
  Attach a;
  a.script.fatal_with_ready = true;
  auto ctrl = a.run();
  ASSERT_FALSE(ctrl.ok());
  EXPECT_NE(ctrl.error().message.find("CSTS.CFS"), std::string::npos) << ctrl.error().message;
  EXPECT_NE(ctrl.error().message.find("wait for CSTS.RDY = 1"), std::string::npos)
      << ctrl.error().message;
}

// SPDK's vfio-user target sets CFS while completing the first admin command and goes on
// completing the rest: every command succeeds, only CSTS tells.
TEST(ControllerInit, FatalStatusWhileCommandsStillCompleteFailsAttach) {
  Attach a;
  a.script.fatal_after = [](const sn::SubmissionEntry& c) {
    return c.opcode == sn::admin::kIdentify;
  };
  auto ctrl = a.run();
  ASSERT_FALSE(ctrl.ok());
  EXPECT_NE(ctrl.error().message.find("CSTS.CFS"), std::string::npos) << ctrl.error().message;
  EXPECT_NE(ctrl.error().message.find("set number of queues"), std::string::npos)
      << ctrl.error().message;
  EXPECT_EQ(a.script.commands_seen, 1);  // nothing sent after the fatal status was seen
}

TEST(ControllerInit, FatalStatusAtTheLastStepFailsAttach) {
  Attach a;
  a.script.fatal_after = [](const sn::SubmissionEntry& c) {  // the last step's command
    return c.opcode == sn::admin::kSetFeatures &&
           (c.cdw10 & 0xff) == sn::feature::kAsyncEventConfig;
  };
  auto ctrl = a.run();
  ASSERT_FALSE(ctrl.ok());
  EXPECT_NE(ctrl.error().message.find("CSTS.CFS"), std::string::npos) << ctrl.error().message;
  EXPECT_NE(ctrl.error().message.find("after initialisation"), std::string::npos)
      << ctrl.error().message;
}

// Fatal status left by an earlier user is what disabling recovers from: CFS while waiting for
// RDY = 0 is not an error, and the controller initialises.
TEST(ControllerInit, FatalControllerIsRecoveredByDisabling) {
  Attach a;
  a.script.start_enabled_fatal = true;
  auto ctrl = a.run();
  ASSERT_TRUE(ctrl.ok()) << ctrl.error().message;
  EXPECT_EQ((*ctrl)->io_queues_granted(), 1u);
}

}  // namespace
}  // namespace pollux::nvme
