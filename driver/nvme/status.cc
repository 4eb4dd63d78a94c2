#include "driver/nvme/status.h"

#include <cstdio>

namespace pollux::nvme {
namespace {
namespace sn = spec::nvme;

const char* generic_name(uint8_t sc) {
  switch (sc) {
    case sn::sc::kSuccess: return "SUCCESS";
    case sn::sc::kInvalidOpcode: return "INVALID OPCODE";
    case sn::sc::kInvalidField: return "INVALID FIELD";
    case sn::sc::kCommandIdConflict: return "COMMAND ID CONFLICT";
    case sn::sc::kDataTransferError: return "DATA TRANSFER ERROR";
    case sn::sc::kAbortedPowerLoss: return "ABORTED - POWER LOSS";
    case sn::sc::kInternalError: return "INTERNAL ERROR";
    case sn::sc::kAbortedByRequest: return "ABORTED - BY REQUEST";
    case sn::sc::kAbortedSqDeletion: return "ABORTED - SQ DELETION";
    case sn::sc::kAbortedFailedFused: return "ABORTED - FAILED FUSED";
    case sn::sc::kAbortedMissingFused: return "ABORTED - MISSING FUSED";
    case sn::sc::kInvalidNamespaceOrFormat: return "INVALID NAMESPACE OR FORMAT";
    case sn::sc::kCommandSequenceError: return "COMMAND SEQUENCE ERROR";
    case sn::sc::kInvalidSglSegmentDescriptor: return "INVALID SGL SEGMENT DESCRIPTOR";
    case sn::sc::kInvalidNumberOfSglDescriptors: return "INVALID NUMBER OF SGL DESCRIPTORS";
    case sn::sc::kDataSglLengthInvalid: return "DATA SGL LENGTH INVALID";
    case sn::sc::kMetadataSglLengthInvalid: return "METADATA SGL LENGTH INVALID";
    case sn::sc::kSglDescriptorTypeInvalid: return "SGL DESCRIPTOR TYPE INVALID";
    case sn::sc::kInvalidUseOfCmb: return "INVALID USE OF CONTROLLER MEMORY BUFFER";
    case sn::sc::kPrpOffsetInvalid: return "PRP OFFSET INVALID";
    case sn::sc::kAtomicWriteUnitExceeded: return "ATOMIC WRITE UNIT EXCEEDED";
    case sn::sc::kOperationDenied: return "OPERATION DENIED";
    case sn::sc::kSglOffsetInvalid: return "SGL OFFSET INVALID";
    case sn::sc::kKeepAliveExpired: return "KEEP ALIVE TIMER EXPIRED";
    case sn::sc::kKeepAliveInvalid: return "KEEP ALIVE TIMEOUT INVALID";
    case sn::sc::kAbortedPreempt: return "ABORTED - PREEMPT AND ABORT";
    case sn::sc::kSanitizeFailed: return "SANITIZE FAILED";
    case sn::sc::kSanitizeInProgress: return "SANITIZE IN PROGRESS";
    case sn::sc::kSglDataBlockGranularityInvalid: return "SGL DATA BLOCK GRANULARITY INVALID";
    case sn::sc::kNamespaceWriteProtected: return "NAMESPACE IS WRITE PROTECTED";
    case sn::sc::kCommandInterrupted: return "COMMAND INTERRUPTED";
    case sn::sc::kTransientTransportError: return "TRANSIENT TRANSPORT ERROR";
    case sn::sc::kLbaOutOfRange: return "LBA OUT OF RANGE";
    case sn::sc::kCapacityExceeded: return "CAPACITY EXCEEDED";
    case sn::sc::kNamespaceNotReady: return "NAMESPACE NOT READY";
    case sn::sc::kReservationConflict: return "RESERVATION CONFLICT";
    case sn::sc::kFormatInProgress: return "FORMAT IN PROGRESS";
  }
  return nullptr;
}

const char* command_specific_name(uint8_t sc) {
  switch (sc) {
    case sn::sc_cmd::kCompletionQueueInvalid: return "COMPLETION QUEUE INVALID";
    case sn::sc_cmd::kInvalidQueueIdentifier: return "INVALID QUEUE IDENTIFIER";
    case sn::sc_cmd::kInvalidQueueSize: return "INVALID QUEUE SIZE";
    case sn::sc_cmd::kAbortCommandLimitExceeded: return "ABORT COMMAND LIMIT EXCEEDED";
    case sn::sc_cmd::kAsyncEventRequestLimitExceeded: return "ASYNC EVENT REQUEST LIMIT EXCEEDED";
    case sn::sc_cmd::kInvalidFirmwareSlot: return "INVALID FIRMWARE SLOT";
    case sn::sc_cmd::kInvalidFirmwareImage: return "INVALID FIRMWARE IMAGE";
    case sn::sc_cmd::kInvalidInterruptVector: return "INVALID INTERRUPT VECTOR";
    case sn::sc_cmd::kInvalidLogPage: return "INVALID LOG PAGE";
    case sn::sc_cmd::kInvalidFormat: return "INVALID FORMAT";
    case sn::sc_cmd::kInvalidQueueDeletion: return "INVALID QUEUE DELETION";
    case sn::sc_cmd::kFeatureIdNotSaveable: return "FEATURE ID NOT SAVEABLE";
    case sn::sc_cmd::kFeatureNotChangeable: return "FEATURE NOT CHANGEABLE";
    case sn::sc_cmd::kFeatureNotNamespaceSpecific: return "FEATURE NOT NAMESPACE SPECIFIC";
    case sn::sc_cmd::kConflictingAttributes: return "CONFLICTING ATTRIBUTES";
    case sn::sc_cmd::kInvalidProtectionInformation: return "INVALID PROTECTION INFORMATION";
    case sn::sc_cmd::kWriteToReadOnlyRange: return "ATTEMPTED WRITE TO READ ONLY RANGE";
  }
  return nullptr;
}

const char* media_name(uint8_t sc) {
  switch (sc) {
    case sn::sc_media::kWriteFault: return "WRITE FAULT";
    case sn::sc_media::kUnrecoveredReadError: return "UNRECOVERED READ ERROR";
    case sn::sc_media::kGuardCheckError: return "END-TO-END GUARD CHECK ERROR";
    case sn::sc_media::kApplicationTagCheckError: return "END-TO-END APPLICATION TAG CHECK ERROR";
    case sn::sc_media::kReferenceTagCheckError: return "END-TO-END REFERENCE TAG CHECK ERROR";
    case sn::sc_media::kCompareFailure: return "COMPARE FAILURE";
    case sn::sc_media::kAccessDenied: return "ACCESS DENIED";
    case sn::sc_media::kDeallocatedOrUnwritten: return "DEALLOCATED OR UNWRITTEN LOGICAL BLOCK";
  }
  return nullptr;
}

}  // namespace

const char* status_type_name(uint8_t sct) {
  switch (sct) {
    case sn::sct::kGeneric: return "GENERIC";
    case sn::sct::kCommandSpecific: return "COMMAND SPECIFIC";
    case sn::sct::kMediaError: return "MEDIA";
    case sn::sct::kPath: return "PATH";
    case sn::sct::kVendor: return "VENDOR";
  }
  return "RESERVED";
}

const char* status_code_name(uint8_t sct, uint8_t sc) {
  switch (sct) {
    case sn::sct::kGeneric: return generic_name(sc);
    case sn::sct::kCommandSpecific: return command_specific_name(sc);
    case sn::sct::kMediaError: return media_name(sc);
  }
  return nullptr;
}

std::string describe(Status s) {
  char buf[128];
  const char* name = status_code_name(s.sct, s.sc);
  if (name != nullptr) {
    std::snprintf(buf, sizeof buf, "%s/%s (%02x/%02x)%s", status_type_name(s.sct), name, s.sct,
                  s.sc, s.dnr ? " DNR" : "");
  } else {
    std::snprintf(buf, sizeof buf, "%s/0x%02x (%02x/%02x)%s", status_type_name(s.sct), s.sc,
                  s.sct, s.sc, s.dnr ? " DNR" : "");
  }
  return buf;
}

}  // namespace pollux::nvme
