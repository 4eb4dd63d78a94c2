#include "scenarios/sim/rig.h"

#include "driver/env/vfio_user_client.h"

namespace pollux::sim {

std::unique_ptr<Rig> Rig::create(const RigOptions& o, std::string* error) {
  auto rig = std::unique_ptr<Rig>(new Rig());
  rig->sim_ = std::make_unique<emu::timing::Simulation>(o.seed);
  rig->sim_->set_fast_forward(o.fast_forward);
  rig->profiles_ = o.profiles;
  if (rig->profiles_.empty()) rig->profiles_.assign(o.devices, o.profile);
  rig->tune_ = o.tune_controller;
  for (uint32_t i = 0; i < rig->profiles_.size(); ++i) {
    emu::nvme::ControllerConfig cfg = rig->profiles_[i].controller;
    cfg.serial = cfg.serial.substr(0, 16) + std::to_string(1000 + i);
    auto dev = emu::device::NvmeDevice::create(cfg);
    if (!dev) {
      *error = "device " + std::to_string(i) + ": " + dev.error();
      return nullptr;
    }
    rig->devices_.push_back(std::move(dev).value());
    // The host stack runs on this thread too (the lockstep).
    rig->devices_.back()->controller().set_stream_to_host(true);
    auto added = rig->sim_->add_device(rig->profiles_[i], rig->devices_.back()->controller());
    if (!added) {
      *error = added.error();
      return nullptr;
    }
  }
  event::FrameworkOptions fo;
  fo.core_mask = "0x1";
  fo.step_mode = true;
  fo.pin_reactors = false;
  fo.clock = &rig->clock_;
  auto fw = event::Framework::create(fo);
  if (!fw) {
    *error = fw.error().message;
    return nullptr;
  }
  rig->fw_ = std::move(fw).value();
  rig->thread_ = rig->fw_->create_thread("sim-host", 0);
  rig->lockstep_ = std::make_unique<Lockstep>(*rig->sim_, *rig->fw_, rig->clock_, o.costs);
  rig->io_queues_ = o.io_queues;
  for (uint32_t i = 0; o.attach_controllers && i < rig->profiles_.size(); ++i) {
    std::unique_ptr<nvme::Controller> ctrl;
    if (std::string e = rig->attach(i, &ctrl); !e.empty()) {
      *error = e;
      return nullptr;
    }
    rig->controllers_.push_back(std::move(ctrl));
  }
  return rig;
}

std::string Rig::attach(uint32_t i, std::unique_ptr<nvme::Controller>* out) {
  // A connection of its own, as over a socket: a removal ends it for good.
  auto pci = env::VfioUserDevice::attach(devices_[i]->server().connect_in_process(), registry_);
  if (!pci) return pci.error().message;
  nvme::ControllerOptions co;
  co.registry = &registry_;
  co.clock = &clock_;
  co.io_queues_requested = io_queues_;
  Lockstep* ls = lockstep_.get();
  co.wait_hook = [ls] { ls->wait_turn(); };
  if (tune_) tune_(co);
  auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
  if (!ctrl) return "attach device " + std::to_string(i) + ": " + ctrl.error().message;
  *out = std::move(ctrl).value();
  return "";
}

std::string Rig::reattach(uint32_t i) {
  controllers_[i].reset();  // its device is gone: no shutdown handshake
  return attach(i, &controllers_[i]);
}

std::unique_ptr<nvme::Controller> Rig::connect(uint32_t i, std::string* error) {
  std::unique_ptr<nvme::Controller> ctrl;
  *error = attach(i, &ctrl);
  return ctrl;
}

Rig::~Rig() {
  // Controllers shut down through the lockstep (the device must keep running for that).
  controllers_.clear();
  lockstep_.reset();
  if (fw_) {
    fw_->stop(0);
    for (int i = 0; i < 1000 && !fw_->finished(); ++i) fw_->step();
  }
  fw_.reset();
  sim_.reset();
}

}  // namespace pollux::sim
