// DH-HMAC-CHAP, the NVMe in-band authentication protocol (NVMe Base 2.0, 8.13; messages in
// spec/nvme_auth.h): the cryptography both ends share — the secret's text form, the key
// transformation, HMAC, the responses, FFDHE Diffie-Hellman — over OpenSSL 3's libcrypto. The
// host runs it in controller.cc (on every queue it connects), the target in fabric/target.
// Set-up paths only: nothing here is on an I/O path.
//
// Secrets live in SecretBytes, which wipe their memory when freed. Nothing here prints a key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "driver/env/result.h"
#include "spec/nvme_auth.h"

namespace pollux::nvme::dhchap {

namespace na = spec::nvme_auth;

void wipe(void* p, std::size_t n);

// An allocator that wipes memory before giving it back (secret keys, DH secrets).
template <typename T>
struct WipingAllocator {
  using value_type = T;
  WipingAllocator() = default;
  template <typename U>
  WipingAllocator(const WipingAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, std::size_t n) {
    wipe(p, n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const WipingAllocator<U>&) const {
    return true;
  }
};
using Bytes = std::vector<uint8_t>;
using SecretBytes = std::vector<uint8_t, WipingAllocator<uint8_t>>;
using ByteSpan = std::span<const uint8_t>;

// ---------------------------------------------------------------- identifiers ---
// "sha256", "sha384", "sha512" / "null", "ffdhe2048" ... "ffdhe8192" (the names of Linux's
// nvmet configfs and SPDK's options; "hmac(sha256)" is taken too). nullptr / nullopt: unknown.
const char* hash_name(uint8_t id);
const char* dhgroup_name(uint8_t id);
std::optional<uint8_t> hash_from_name(std::string_view name);
std::optional<uint8_t> dhgroup_from_name(std::string_view name);
// Every hash / DH group, strongest first (the order a controller picks in).
const std::vector<uint8_t>& all_hashes();
const std::vector<uint8_t>& all_dhgroups();

// "hash function not usable" ...: AUTH_Failure1/2's reason code explanation (na::failure).
const char* failure_reason(uint8_t rescode_exp);

// ------------------------------------------------------------------- secrets ---
// A DH-HMAC-CHAP secret: the key, and the hash its owner's NQN transforms it with (0: none).
struct Key {
  uint8_t hash = 0;
  SecretBytes key;  // 32, 48 or 64 bytes
};

// "DHHC-1:hh:base64(key || CRC-32(key)):" (the trailing ':' may be left out; nothing may
// follow it). The error names what is wrong — the prefix, the hash id, the base64, the length,
// the CRC — and never contains the key. A key transformed by a hash must be as long as that
// hash's output (what nvme-cli's gen-dhchap-key makes; Linux keys the HMAC with that length).
Result<Key> parse_key(std::string_view text);
// The text form of `key` (as nvme-cli gen-dhchap-key prints it).
std::string format_key(const Key& key);
// A random key of `length` bytes (32, 48, 64) to be transformed with `hash` (0: none).
Result<Key> generate_key(uint8_t hash, std::size_t length);

// The key an end proves itself with: the key itself (hash 0), or HMAC(hash, key, NQN ||
// "NVMe-over-Fabrics") — NQN the owner's (the host's NQN for a host key, the subsystem's for a
// controller key).
SecretBytes transform(const Key& key, std::string_view nqn);

// ----------------------------------------------------------------- primitives ---
// HMAC with hash `hash` (na::hash::k*) over the concatenation of `parts`.
SecretBytes hmac(uint8_t hash, ByteSpan key, std::initializer_list<ByteSpan> parts);
SecretBytes digest(uint8_t hash, ByteSpan data);
bool random_bytes(uint8_t* out, std::size_t n);
// A fresh sequence number (S1, S2): a process-wide counter that starts at random, never 0.
uint32_t next_seqnum();
// Compares in constant time.
bool equal(ByteSpan a, ByteSpan b);

// ------------------------------------------------------------------ responses ---
enum class Role { kHost, kController };
// The response a `role` proves itself with (Base 2.0, 8.13.5: DH-HMAC-CHAP protocol):
//   R = HMAC(hash, K, Ca || S (LE32) || T_ID (LE16) || SC_C || "HostHost"|"Controller" ||
//            own NQN || 00h || peer's NQN)
// K the transformed key of that role, S its sequence number (S1 for the host, S2 for the
// controller), Ca the challenge — or, with a DH group, the augmented challenge
// HMAC(hash, H(session_key), C), session_key = g^xy mod p. session_key empty: the null group.
SecretBytes response(Role role, uint8_t hash, ByteSpan transformed_key, ByteSpan challenge,
                     ByteSpan session_key, uint32_t seqnum, uint16_t tid, uint8_t sc_c,
                     std::string_view own_nqn, std::string_view peer_nqn);

// ---------------------------------------------------------------- Diffie-Hellman ---
// An ephemeral FFDHE key pair (RFC 7919 group, as DHgroupID names it).
class DhKey {
 public:
  static Result<DhKey> generate(uint8_t group);
  DhKey(DhKey&&) noexcept;
  DhKey& operator=(DhKey&&) noexcept;
  ~DhKey();

  uint8_t group() const { return group_; }
  // g^x mod p, big-endian, as long as the prime (the DH value a message carries).
  const Bytes& public_value() const { return public_; }
  // g^xy mod p from the peer's DH value, as long as the prime. The peer's value must be as long
  // as the prime and lie in 2 .. p-2 (1 and p-1 would confine the secret to a subgroup of order
  // 2; FFDHE primes are safe primes, so no smaller subgroup exists).
  Result<SecretBytes> shared_secret(ByteSpan peer) const;

 private:
  explicit DhKey(uint8_t group) : group_(group) {}
  uint8_t group_ = 0;
  Bytes public_;
  void* pkey_ = nullptr;  // EVP_PKEY*
};

}  // namespace pollux::nvme::dhchap
