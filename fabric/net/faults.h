// The fabric faults a network can apply to its links (a link: every connection to one listen
// address, both directions): SimNetwork in virtual time, FaultNetwork on real sockets on the
// wall clock. `link` is a listen address ("10.0.0.1", "127.0.0.1"); "" = every link.
#pragma once

#include <cstdint>
#include <string>

namespace pollux::fabric::net {

class NetworkFaults {
 public:
  virtual ~NetworkFaults() = default;
  // Connection drop: every connection on the link is reset, both ends (ECONNRESET), now.
  // Returns how many were.
  virtual uint32_t drop(const std::string& link) = 0;
  // Nothing crosses the link for `duration`; new connects do not complete before its end; a
  // partition of at least the user timeout ends the link's connections (ETIMEDOUT) once the
  // user timeout has passed.
  virtual void partition(const std::string& link, uint64_t duration_ns) = 0;
  // Extra one-way latency on what is sent in the next `duration`.
  virtual void add_latency(const std::string& link, uint64_t extra_ns, uint64_t duration_ns) = 0;
  // What is sent in the next `duration` is corrupted (a byte flipped past TCP's checksum) per
  // segment with probability `rate`.
  virtual void corrupt(const std::string& link, double rate, uint64_t duration_ns) = 0;
};

}  // namespace pollux::fabric::net
