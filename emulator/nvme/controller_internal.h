// Private to the controller's .cc files: queue and namespace state, status helpers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "emulator/nvme/controller.h"
#include "spec/nvme.h"

namespace pollux::emu::nvme {

namespace sp = ::pollux::spec::nvme;

struct Controller::Sq {
  bool exists = false;
  uint16_t qid = 0;
  uint16_t cqid = 0;
  uint8_t prio = 0;  // QPRIO (used by a timing model's arbiter)
  uint64_t base = 0;
  uint32_t size = 0;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint32_t last_db = 0;  // last doorbell value seen (evaluated once per change)
  sp::SubmissionEntry* ring = nullptr;
  uint64_t ring_gen = 0;  // poll generation `ring` was translated in
  uint32_t n_aborts = 0;  // CIDs marked by Abort, completed as aborted when fetched
  uint16_t aborts[kAbortLimit] = {};
};

struct Controller::Cq {
  bool exists = false;
  uint16_t qid = 0;
  uint64_t base = 0;
  uint32_t size = 0;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint32_t last_db = 0;
  bool phase = true;
  bool ien = false;
  bool irq_pending = false;
  uint16_t iv = 0;
  uint32_t reserved = 0;    // slots promised to fetched commands not yet posted
  uint32_t bound_sqs = 0;
  sp::CompletionEntry* ring = nullptr;
  uint64_t ring_gen = 0;
  std::vector<sp::CompletionEntry> overflow;  // completions waiting for room (AER, layering)
};

struct Controller::Namespace {
  uint32_t nsid = 0;
  std::unique_ptr<NamespaceStore> store;
  uint64_t size_bytes = 0;
  uint32_t shift = 9;  // log2 of the LBA size in use
  uint8_t flbas = 0;   // 0: 512 B, 1: 4 KiB
  uint64_t nsze = 0;
  uint8_t nguid[16] = {};
  uint8_t eui64[8] = {};
  uint8_t uuid[16] = {};
};

// Status field values (phase bit clear). Errors a retry cannot fix carry DNR.
constexpr uint16_t kOk = 0;
constexpr uint16_t gen_err(uint8_t sc) { return sp::status::make(sp::sct::kGeneric, sc, true); }
constexpr uint16_t cmd_err(uint8_t sc) {
  return sp::status::make(sp::sct::kCommandSpecific, sc, true);
}
constexpr uint16_t media_err(uint8_t sc) { return sp::status::make(sp::sct::kMediaError, sc); }
constexpr uint16_t kDataTransferError = sp::status::make(sp::sct::kGeneric, sp::sc::kDataTransferError);
constexpr uint16_t kInvalidField = gen_err(sp::sc::kInvalidField);
constexpr uint16_t kInvalidNamespace = gen_err(sp::sc::kInvalidNamespaceOrFormat);

}  // namespace pollux::emu::nvme
