#include "scenarios/sim/rig.h"

#include "driver/env/vfio_user_client.h"

namespace pollux::sim {

std::unique_ptr<Rig> Rig::create(const RigOptions& o, std::string* error) {
  auto rig = std::unique_ptr<Rig>(new Rig());
  rig->sim_ = std::make_unique<emu::timing::Simulation>(o.seed);
  for (uint32_t i = 0; i < o.devices; ++i) {
    emu::nvme::ControllerConfig cfg = o.profile.controller;
    cfg.serial = cfg.serial.substr(0, 16) + std::to_string(1000 + i);
    auto dev = emu::device::NvmeDevice::create(cfg);
    if (!dev) {
      *error = "device " + std::to_string(i) + ": " + dev.error();
      return nullptr;
    }
    rig->devices_.push_back(std::move(dev).value());
    auto added = rig->sim_->add_device(o.profile, rig->devices_.back()->controller());
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
  for (uint32_t i = 0; i < o.devices; ++i) {
    auto pci = env::VfioUserDevice::attach(&rig->devices_[i]->server(), rig->registry_);
    if (!pci) {
      *error = pci.error().message;
      return nullptr;
    }
    nvme::ControllerOptions co;
    co.registry = &rig->registry_;
    co.clock = &rig->clock_;
    co.io_queues_requested = o.io_queues;
    Lockstep* ls = rig->lockstep_.get();
    co.wait_hook = [ls] { ls->wait_turn(); };
    auto ctrl = nvme::Controller::attach(std::move(pci).value(), co);
    if (!ctrl) {
      *error = "attach device " + std::to_string(i) + ": " + ctrl.error().message;
      return nullptr;
    }
    rig->controllers_.push_back(std::move(ctrl).value());
  }
  return rig;
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
