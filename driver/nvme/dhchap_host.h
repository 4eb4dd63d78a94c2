// The host's side of one DH-HMAC-CHAP transaction on one queue (spec/nvme_auth.h shows the
// exchange): negotiate, answer the controller's challenge, and in bidirectional mode check the
// controller's answer to ours. The controller (controller.h) runs it after the Connect of every
// queue, sending the messages with Authentication Send/Receive; here only the protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "driver/env/result.h"
#include "driver/nvme/dhchap.h"

namespace pollux::nvme::dhchap {

struct HostCredentials {
  Key host_key;
  std::optional<Key> ctrlr_key;   // set: authenticate the controller too (bidirectional)
  std::vector<uint8_t> hashes;    // offered, in order of preference
  std::vector<uint8_t> dhgroups;  // offered, in order of preference
  std::string hostnqn;
  std::string subnqn;
};

// Parses ControllerOptions' texts into credentials; the error names the option at fault.
Result<HostCredentials> make_host_credentials(const std::string& key, const std::string& ctrlr_key,
                                              const std::vector<uint8_t>& hashes,
                                              const std::vector<uint8_t>& dhgroups,
                                              const std::string& hostnqn,
                                              const std::string& subnqn);

// How the messages travel: Authentication Send of `len` bytes (TL), and Authentication Receive
// into `buf` with AL = `cap` (the buffer is zeroed first). An error: the command failed.
struct HostExchange {
  std::function<Result<std::monostate>(const uint8_t* msg, uint32_t len)> send;
  std::function<Result<std::monostate>(uint8_t* buf, uint32_t cap)> receive;
};

struct HostOutcome {
  uint8_t hash = 0;
  uint8_t dhgroup = 0;
  bool controller_authenticated = false;
};

// The largest message either side sends: a Reply with SHA-512 and ffdhe8192 (16 + 2 * 64 +
// 1024 bytes). Receives ask for this much (AL), as Linux's host asks for 4 KiB.
inline constexpr uint32_t kMessageBufferSize = 4096;

// Runs one transaction with transaction id `tid`, `buf` (kMessageBufferSize bytes, DMA memory
// for transports that need it) holding each message. Errors: EACCES — the controller refused
// this host's key (AUTH_Failure1), or the controller's answer to C2 was wrong (then this side
// sends AUTH_Failure2 first); EPROTO — a message that breaks the protocol (also answered with
// AUTH_Failure2 once the controller's challenge is in); or the exchange's own error. The message
// says which, never a key.
Result<HostOutcome> authenticate_host(const HostCredentials& creds, uint16_t tid, uint8_t* buf,
                                      const HostExchange& exchange);

}  // namespace pollux::nvme::dhchap
