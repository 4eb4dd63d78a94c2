#include "emulator/rtl/rtl_queue_engine.h"

#include "Vqueue_engine.h"
#include "verilated.h"

namespace pollux::emu::rtl {

RtlQueueEngine::RtlQueueEngine()
    : context_(std::make_unique<VerilatedContext>()),
      model_(std::make_unique<Vqueue_engine>(context_.get(), "queue_engine")) {
  model_->clk = 0;
  model_->eval();
  tick(QueueEngineInputs{.reset = true});
}

RtlQueueEngine::~RtlQueueEngine() { model_->final(); }

const QueueEngineOutputs& RtlQueueEngine::tick(const QueueEngineInputs& in) {
  Vqueue_engine& m = *model_;
  m.i_reset = in.reset;
  m.i_cfg_valid = in.cfg_valid;
  m.i_cfg_cq = in.cfg_cq;
  m.i_cfg_qid = in.cfg_qid;
  m.i_cfg_enable = in.cfg_enable;
  m.i_cfg_size = in.cfg_size;
  m.i_cfg_cqid = in.cfg_cqid;
  m.i_cfg_prio = static_cast<uint8_t>(in.cfg_prio) & 3;  // the port is 2 bits wide
  m.i_arb_valid = in.arb_valid;
  m.i_arb_wrr = in.arb_wrr;
  m.i_arb_burst = in.arb_burst & 7;  // 3 bits
  m.i_arb_lpw = in.arb_lpw;
  m.i_arb_mpw = in.arb_mpw;
  m.i_arb_hpw = in.arb_hpw;
  m.i_db_valid = in.db_valid;
  m.i_db_cq = in.db_cq;
  m.i_db_qid = in.db_qid;
  m.i_db_value = in.db_value;
  m.i_fetch_ready = in.fetch_ready;
  m.i_cpl_valid = in.cpl_valid;
  m.i_cpl_cqid = in.cpl_cqid;
  m.i_cpl_unreserved = in.cpl_unreserved;

  // The rising edge updates state and outputs; the falling edge only re-arms edge detection.
  m.clk = 1;
  m.eval();
  out_.fetch_valid = m.o_fetch_valid;
  out_.fetch_sqid = m.o_fetch_sqid;
  out_.fetch_slot = m.o_fetch_slot;
  out_.cpl_valid = m.o_cpl_valid;
  out_.cpl_cqid = m.o_cpl_cqid;
  out_.cpl_slot = m.o_cpl_slot;
  out_.cpl_phase = m.o_cpl_phase;
  out_.busy = m.o_busy;
  m.clk = 0;
  m.eval();
  return out_;
}

}  // namespace pollux::emu::rtl
