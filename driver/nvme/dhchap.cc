#include "driver/nvme/dhchap.h"

#include <isa-l/crc.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <atomic>
#include <cstring>

namespace pollux::nvme::dhchap {

void wipe(void* p, std::size_t n) {
  if (p != nullptr && n != 0) OPENSSL_cleanse(p, n);
}

namespace {

const char* ossl_digest(uint8_t hash) {
  switch (hash) {
    case na::hash::kSha256:
      return "SHA256";
    case na::hash::kSha384:
      return "SHA384";
    case na::hash::kSha512:
      return "SHA512";
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------- identifiers ---

const char* hash_name(uint8_t id) {
  switch (id) {
    case na::hash::kSha256:
      return "sha256";
    case na::hash::kSha384:
      return "sha384";
    case na::hash::kSha512:
      return "sha512";
  }
  return nullptr;
}

const char* dhgroup_name(uint8_t id) {
  switch (id) {
    case na::dhgroup::kNull:
      return "null";
    case na::dhgroup::kFfdhe2048:
      return "ffdhe2048";
    case na::dhgroup::kFfdhe3072:
      return "ffdhe3072";
    case na::dhgroup::kFfdhe4096:
      return "ffdhe4096";
    case na::dhgroup::kFfdhe6144:
      return "ffdhe6144";
    case na::dhgroup::kFfdhe8192:
      return "ffdhe8192";
  }
  return nullptr;
}

std::optional<uint8_t> hash_from_name(std::string_view name) {
  if (name.starts_with("hmac(") && name.ends_with(")")) name = name.substr(5, name.size() - 6);
  for (uint8_t id : all_hashes())
    if (name == hash_name(id)) return id;
  return std::nullopt;
}

std::optional<uint8_t> dhgroup_from_name(std::string_view name) {
  for (uint8_t id : all_dhgroups())
    if (name == dhgroup_name(id)) return id;
  return std::nullopt;
}

const std::vector<uint8_t>& all_hashes() {
  static const std::vector<uint8_t> v = {na::hash::kSha512, na::hash::kSha384, na::hash::kSha256};
  return v;
}

const std::vector<uint8_t>& all_dhgroups() {
  static const std::vector<uint8_t> v = {na::dhgroup::kFfdhe8192, na::dhgroup::kFfdhe6144,
                                         na::dhgroup::kFfdhe4096, na::dhgroup::kFfdhe3072,
                                         na::dhgroup::kFfdhe2048, na::dhgroup::kNull};
  return v;
}

// ------------------------------------------------------------------- secrets ---

const char* failure_reason(uint8_t rescode_exp) {
  switch (rescode_exp) {
    case na::failure::kFailed:
      return "authentication failed";
    case na::failure::kProtocolUnusable:
      return "authentication protocol not usable";
    case na::failure::kConcatMismatch:
      return "secure channel concatenation mismatch";
    case na::failure::kHashUnusable:
      return "hash function not usable";
    case na::failure::kDhgroupUnusable:
      return "DH group not usable";
    case na::failure::kIncorrectPayload:
      return "incorrect payload";
    case na::failure::kIncorrectMessage:
      return "incorrect protocol message";
  }
  return "unknown reason";
}

namespace {

uint32_t crc32(const uint8_t* p, std::size_t n) {
  return crc32_gzip_refl(0, p, n);  // CRC-32 (ISO-HDLC): zlib's, the secret format's
}

bool base64_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

}  // namespace

Result<Key> parse_key(std::string_view text) {
  const std::string_view prefix = na::kSecretPrefix;
  auto bad = [](const std::string& why) {
    return make_error(EINVAL, "DH-HMAC-CHAP secret: " + why);
  };
  if (!text.starts_with(prefix))
    return bad("expected 'DHHC-1:hh:<base64>:' (as nvme gen-dhchap-key prints)");
  text.remove_prefix(prefix.size());
  if (text.size() < 3 || text[2] != ':' || text[0] != '0' || text[1] < '0' || text[1] > '3')
    return bad("the hash id after 'DHHC-1:' must be 00, 01, 02 or 03");
  Key k;
  k.hash = static_cast<uint8_t>(text[1] - '0');
  text.remove_prefix(3);
  if (text.ends_with(":")) text.remove_suffix(1);
  std::size_t pad = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=' && i + 2 >= text.size()) {
      ++pad;
      continue;
    }
    if (!base64_char(c) || pad > 0) return bad("the key is not valid base64");
  }
  if (text.empty() || text.size() % 4 != 0) return bad("the key is not valid base64");
  SecretBytes raw(text.size() / 4 * 3 + 1);
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return bad("the key is not valid base64");
  const std::size_t len = static_cast<std::size_t>(n) - pad;
  if (len != 32 + na::kSecretCrcLength && len != 48 + na::kSecretCrcLength &&
      len != 64 + na::kSecretCrcLength)
    return bad("it decodes to " + std::to_string(len) +
               " bytes; a secret is a 32, 48 or 64-byte key and its 4-byte CRC-32");
  const std::size_t key_len = len - na::kSecretCrcLength;
  uint32_t stored;
  std::memcpy(&stored, raw.data() + key_len, 4);  // little-endian
  if (crc32(raw.data(), key_len) != stored)
    return bad("its CRC-32 does not match the key (a mistyped or truncated secret?)");
  if (k.hash != 0 && key_len != na::hash::length(k.hash))
    return bad("a key transformed with " + std::string(hash_name(k.hash)) + " must be " +
               std::to_string(na::hash::length(k.hash)) + " bytes, this one is " +
               std::to_string(key_len));
  k.key.assign(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(key_len));
  return k;
}

std::string format_key(const Key& key) {
  SecretBytes raw(key.key.begin(), key.key.end());
  const uint32_t crc = crc32(key.key.data(), key.key.size());
  const auto* c = reinterpret_cast<const uint8_t*>(&crc);
  raw.insert(raw.end(), c, c + 4);
  std::string b64((raw.size() + 2) / 3 * 4 + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw.data(),
                                static_cast<int>(raw.size()));
  b64.resize(static_cast<std::size_t>(n));
  std::string out =
      std::string(na::kSecretPrefix) + "0" + static_cast<char>('0' + key.hash) + ":" + b64 + ":";
  wipe(b64.data(), b64.size());
  return out;
}

Result<Key> generate_key(uint8_t hash, std::size_t length) {
  if (hash != 0 && hash_name(hash) == nullptr) return make_error(EINVAL, "unknown hash id");
  if (length != 32 && length != 48 && length != 64)
    return make_error(EINVAL, "a key is 32, 48 or 64 bytes");
  if (hash != 0 && length != na::hash::length(hash))
    return make_error(EINVAL, "a transformed key is as long as its hash");
  Key k;
  k.hash = hash;
  k.key.resize(length);
  if (!random_bytes(k.key.data(), length)) return make_error(EIO, "no random bytes");
  return k;
}

SecretBytes transform(const Key& key, std::string_view nqn) {
  if (key.hash == 0) return key.key;
  static constexpr std::string_view kLabel = "NVMe-over-Fabrics";
  return hmac(key.hash, key.key,
              {ByteSpan(reinterpret_cast<const uint8_t*>(nqn.data()), nqn.size()),
               ByteSpan(reinterpret_cast<const uint8_t*>(kLabel.data()), kLabel.size())});
}

// ----------------------------------------------------------------- primitives ---

SecretBytes hmac(uint8_t hash, ByteSpan key, std::initializer_list<ByteSpan> parts) {
  const char* d = ossl_digest(hash);
  SecretBytes out(na::hash::length(hash));
  if (d == nullptr) return {};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(d), 0),
      OSSL_PARAM_construct_end()};
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, key.data(), key.size(), params) == 1;
  for (ByteSpan p : parts) ok = ok && EVP_MAC_update(ctx, p.data(), p.size()) == 1;
  std::size_t n = 0;
  ok = ok && EVP_MAC_final(ctx, out.data(), &n, out.size()) == 1 && n == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) return {};
  return out;
}

SecretBytes digest(uint8_t hash, ByteSpan data) {
  const char* d = ossl_digest(hash);
  SecretBytes out(na::hash::length(hash));
  unsigned int n = 0;
  EVP_MD* md = d ? EVP_MD_fetch(nullptr, d, nullptr) : nullptr;
  const bool ok = md != nullptr &&
                  EVP_Digest(data.data(), data.size(), out.data(), &n, md, nullptr) == 1 &&
                  n == out.size();
  EVP_MD_free(md);
  if (!ok) return {};
  return out;
}

bool random_bytes(uint8_t* out, std::size_t n) {
  return RAND_bytes(out, static_cast<int>(n)) == 1;
}

uint32_t next_seqnum() {
  static std::atomic<uint32_t> counter = [] {
    uint32_t v = 0;
    random_bytes(reinterpret_cast<uint8_t*>(&v), sizeof v);
    return v;
  }();
  for (;;) {
    const uint32_t v = counter.fetch_add(1, std::memory_order_relaxed) + 1;
    if (v != 0) return v;
  }
}

bool equal(ByteSpan a, ByteSpan b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// ------------------------------------------------------------------ responses ---

SecretBytes response(Role role, uint8_t hash, ByteSpan transformed_key, ByteSpan challenge,
                     ByteSpan session_key, uint32_t seqnum, uint16_t tid, uint8_t sc_c,
                     std::string_view own_nqn, std::string_view peer_nqn) {
  SecretBytes augmented;
  if (!session_key.empty()) {
    const SecretBytes hashed = digest(hash, session_key);
    augmented = hmac(hash, hashed, {challenge});
    challenge = augmented;
  }
  uint8_t s[4], t[2];
  std::memcpy(s, &seqnum, 4);  // little-endian, as on the wire
  std::memcpy(t, &tid, 2);
  const std::string_view label = role == Role::kHost ? "HostHost" : "Controller";
  static constexpr uint8_t kZero = 0;
  auto bytes = [](std::string_view v) {
    return ByteSpan(reinterpret_cast<const uint8_t*>(v.data()), v.size());
  };
  return hmac(hash, transformed_key,
              {challenge, ByteSpan(s, 4), ByteSpan(t, 2), ByteSpan(&sc_c, 1), bytes(label),
               bytes(own_nqn), ByteSpan(&kZero, 1), bytes(peer_nqn)});
}

// ---------------------------------------------------------------- Diffie-Hellman ---

namespace {

struct BnDeleter {
  void operator()(BIGNUM* b) const { BN_clear_free(b); }
};
using Bn = std::unique_ptr<BIGNUM, BnDeleter>;

Bn bn_param(const EVP_PKEY* key, const char* name) {
  BIGNUM* b = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &b) != 1) return nullptr;
  return Bn(b);
}

}  // namespace

Result<DhKey> DhKey::generate(uint8_t group) {
  const char* name = dhgroup_name(group);
  const std::size_t len = na::dhgroup::value_length(group);
  if (name == nullptr || len == 0)
    return make_error(EINVAL, "DH group " + std::to_string(group) + " is not an FFDHE group");
  DhKey k(group);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(name), 0),
      OSSL_PARAM_construct_end()};
  EVP_PKEY* pkey = nullptr;
  const bool ok = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
                  EVP_PKEY_CTX_set_params(ctx, params) == 1 && EVP_PKEY_generate(ctx, &pkey) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) return make_error(EIO, std::string("cannot generate an ") + name + " key");
  k.pkey_ = pkey;
  Bn pub = bn_param(pkey, OSSL_PKEY_PARAM_PUB_KEY);
  k.public_.resize(len);
  if (!pub || BN_bn2binpad(pub.get(), k.public_.data(), static_cast<int>(len)) < 0)
    return make_error(EIO, std::string("cannot read an ") + name + " public value");
  return k;
}

DhKey::DhKey(DhKey&& o) noexcept : group_(o.group_), public_(std::move(o.public_)), pkey_(o.pkey_) {
  o.pkey_ = nullptr;
}

DhKey& DhKey::operator=(DhKey&& o) noexcept {
  if (this != &o) {
    EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_));
    group_ = o.group_;
    public_ = std::move(o.public_);
    pkey_ = o.pkey_;
    o.pkey_ = nullptr;
  }
  return *this;
}

DhKey::~DhKey() {
  EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_));
}

Result<SecretBytes> DhKey::shared_secret(ByteSpan peer) const {
  auto* own = static_cast<EVP_PKEY*>(pkey_);
  const std::size_t len = public_.size();
  if (own == nullptr) return make_error(EINVAL, "no DH key");
  if (peer.size() != len)
    return make_error(EINVAL, "the peer's DH value is " + std::to_string(peer.size()) + " bytes, " +
                                  dhgroup_name(group_) + " needs " + std::to_string(len));
  Bn y(BN_bin2bn(peer.data(), static_cast<int>(peer.size()), nullptr));
  Bn p = bn_param(own, OSSL_PKEY_PARAM_FFC_P);
  Bn p_minus_1(BN_new());
  if (!y || !p || !p_minus_1 || BN_sub(p_minus_1.get(), p.get(), BN_value_one()) != 1)
    return make_error(ENOMEM, "no memory for the DH value");
  if (BN_cmp(y.get(), BN_value_one()) <= 0 || BN_cmp(y.get(), p_minus_1.get()) >= 0)
    return make_error(EINVAL, "the peer's DH value is outside 2 .. p-2");
  // The peer's public key: the group by name and y.
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM* params = nullptr;
  EVP_PKEY* peer_key = nullptr;
  EVP_PKEY_CTX* from = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  bool ok = bld != nullptr && from != nullptr &&
            OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, dhgroup_name(group_),
                                            0) == 1 &&
            OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PUB_KEY, y.get()) == 1 &&
            (params = OSSL_PARAM_BLD_to_param(bld)) != nullptr &&
            EVP_PKEY_fromdata_init(from) == 1 &&
            EVP_PKEY_fromdata(from, &peer_key, EVP_PKEY_PUBLIC_KEY, params) == 1;
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  EVP_PKEY_CTX_free(from);
  SecretBytes secret(len);
  EVP_PKEY_CTX* ctx = ok ? EVP_PKEY_CTX_new_from_pkey(nullptr, own, nullptr) : nullptr;
  std::size_t n = len;
  // validate_peer 0: the range check above is the check (see the header); OpenSSL's full check
  // (y^q mod p) costs a modular exponentiation as long as the prime on every connect.
  ok = ctx != nullptr && EVP_PKEY_derive_init(ctx) == 1 &&
       EVP_PKEY_derive_set_peer_ex(ctx, peer_key, 0) == 1 && EVP_PKEY_CTX_set_dh_pad(ctx, 1) == 1 &&
       EVP_PKEY_derive(ctx, secret.data(), &n) == 1 && n == len;
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(peer_key);
  if (!ok) return make_error(EIO, "cannot derive the DH shared secret");
  return secret;
}

}  // namespace pollux::nvme::dhchap
