// The queue engine as verilated RTL (queue_engine.sv, Verilator --cc) behind the QueueEngine
// interface. Each tick() drives the inputs and clocks one rising and one falling edge.
// The Verilator headers stay out of this header, so a user may include it anywhere (but must not
// link a --sc model into the same binary: the two Verilator runtime variants conflict).
#pragma once

#include <memory>

#include "emulator/rtl/queue_engine.h"

class Vqueue_engine;
class VerilatedContext;

namespace pollux::emu::rtl {

class RtlQueueEngine final : public QueueEngine {
 public:
  RtlQueueEngine();  // clocks one reset edge: the state after it equals a fresh RefQueueEngine
  ~RtlQueueEngine() override;
  RtlQueueEngine(const RtlQueueEngine&) = delete;
  RtlQueueEngine& operator=(const RtlQueueEngine&) = delete;

  const QueueEngineOutputs& tick(const QueueEngineInputs& in) override;

 private:
  std::unique_ptr<VerilatedContext> context_;
  std::unique_ptr<Vqueue_engine> model_;
  QueueEngineOutputs out_;
};

}  // namespace pollux::emu::rtl
