// DH-HMAC-CHAP's cryptography (dhchap.h) against answers computed independently at test time:
// the secret's text form by python3 (zlib's CRC-32, base64), HMACs, the key transformation
// and both responses by the openssl command-line tool over the bytes the specification
// concatenates, FFDHE shared secrets by `openssl pkeyutl -derive` with a key `openssl genpkey`
// made; plus every way a secret can be wrong, each refused with its own reason.
#include "driver/nvme/dhchap.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

namespace pollux::nvme::dhchap {
namespace {

// Runs a shell command, returns its stdout (trailing newline dropped); fails the test on a
// non-zero exit.
std::string run(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  EXPECT_NE(f, nullptr) << cmd;
  if (f == nullptr) return "";
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(f), 0) << cmd;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string hex(ByteSpan b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) s += {d[c >> 4], d[c & 15]};
  return s;
}

class Scratch {
 public:
  Scratch() {
    const char* t = std::getenv("TEST_TMPDIR");
    dir_ = std::string(t ? t : "/tmp") + "/dhchap." + std::to_string(::getpid());
    run("mkdir -p " + dir_);
  }
  ~Scratch() { run("rm -rf " + dir_); }
  std::string write(const std::string& name, ByteSpan data) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()),
               static_cast<std::streamsize>(data.size()));
    return p;
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

Bytes random(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

ByteSpan span(std::string_view s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// openssl's HMAC of a file's bytes.
std::string openssl_hmac(uint8_t hash, ByteSpan key, const std::string& file) {
  const std::string out = run(std::string("openssl dgst -") + hash_name(hash) +
                              " -mac HMAC -macopt hexkey:" + hex(key) + " -r " + file);
  return out.substr(0, out.find(' '));
}

// ------------------------------------------------------------------- secrets ---

// The text form of a key as python3 writes it (zlib.crc32, base64): independent of dhchap.cc.
std::string python_secret(uint8_t hash, ByteSpan key) {
  return run("python3 -c \"import base64,zlib,struct; k=bytes.fromhex('" + hex(key) +
             "'); print('DHHC-1:0" + std::to_string(hash) +
             ":'+base64.b64encode(k+struct.pack('<I',zlib.crc32(k))).decode()+':')\"");
}

TEST(DhchapSecret, ParsesAndFormatsWhatPythonWrites) {
  for (auto [hash, len] :
       {std::pair<uint8_t, std::size_t>{0, 32}, {0, 48}, {0, 64}, {1, 32}, {2, 48}, {3, 64}}) {
    const Bytes key = random(len, static_cast<uint32_t>(len + hash));
    const std::string text = python_secret(hash, key);
    auto k = parse_key(text);
    ASSERT_TRUE(k.ok()) << text << ": " << k.error().message;
    EXPECT_EQ(k->hash, hash);
    EXPECT_EQ(Bytes(k->key.begin(), k->key.end()), key);
    EXPECT_EQ(format_key(*k), text);
    // The trailing ':' may be left out (Linux takes both).
    EXPECT_TRUE(parse_key(text.substr(0, text.size() - 1)).ok());
  }
}

// Known answers from nvme-cli 2.3 (Debian 12), an independent implementation:
//   nvme gen-dhchap-key --secret=000102...1f --hmac=0 -l 32
//   nvme gen-dhchap-key --secret=000102...1f --hmac=1 -l 32 --nqn=nqn.2014-08.org.nvmexpress:uuid:x
// The second prints the key already transformed with the NQN (libnvme's gen-dhchap-key does).
TEST(DhchapSecret, NvmeCliKnownAnswers) {
  Key k;
  for (uint8_t i = 0; i < 32; ++i) k.key.push_back(i);
  EXPECT_EQ(format_key(k), "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:");
  auto t = parse_key("DHHC-1:01:aMEiHojvnlvfsiyqrYhzNfZsEEQ+uy63oD7L7AZE8b+GHLP0:");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->hash, 1);
  k.hash = na::hash::kSha256;
  EXPECT_EQ(hex(t->key), hex(transform(k, "nqn.2014-08.org.nvmexpress:uuid:x")));
  EXPECT_EQ(hex(t->key), "68c1221e88ef9e5bdfb22caaad887335f66c10443ebb2eb7a03ecbec0644f1bf");
}

TEST(DhchapSecret, GeneratedKeysRoundTrip) {
  for (uint8_t hash : {0, 1, 2, 3}) {
    auto k = generate_key(hash, hash ? na::hash::length(hash) : 48);
    ASSERT_TRUE(k.ok());
    auto back = parse_key(format_key(*k));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->key, k->key);
    EXPECT_EQ(back->hash, hash);
  }
  EXPECT_FALSE(generate_key(1, 64).ok());
  EXPECT_FALSE(generate_key(0, 40).ok());
}

TEST(DhchapSecret, EveryFaultHasItsOwnReasonAndNoKeyInIt) {
  const Bytes key = random(32, 1);
  const std::string good = python_secret(1, key);  // DHHC-1:01:<48 chars>:
  const std::string b64 = good.substr(10, 48);
  auto reason = [](const std::string& text) {
    auto k = parse_key(text);
    EXPECT_FALSE(k.ok()) << text;
    return k.ok() ? std::string() : k.error().message;
  };
  EXPECT_NE(reason("DHHC-2:01:" + b64 + ":").find("expected 'DHHC-1:"), std::string::npos);
  EXPECT_NE(reason(b64).find("expected 'DHHC-1:"), std::string::npos);
  EXPECT_NE(reason("DHHC-1:04:" + b64 + ":").find("hash id"), std::string::npos);
  EXPECT_NE(reason("DHHC-1:1:" + b64 + ":").find("hash id"), std::string::npos);
  EXPECT_NE(reason("DHHC-1:01:" + b64.substr(0, 47) + "!:").find("base64"), std::string::npos);
  EXPECT_NE(reason("DHHC-1:01:" + b64.substr(0, 46) + ":").find("base64"), std::string::npos);
  EXPECT_NE(reason("DHHC-1:01:" + b64 + ":x").find("base64"), std::string::npos);
  // 40 bytes of key: a length no secret has.
  const std::string long_one = python_secret(0, random(40, 2));
  EXPECT_NE(reason(long_one).find("decodes to 44 bytes"), std::string::npos);
  // One character changed: the CRC no longer matches.
  std::string typo = good;
  typo[20] = typo[20] == 'A' ? 'B' : 'A';
  const std::string crc = reason(typo);
  EXPECT_NE(crc.find("CRC-32"), std::string::npos);
  EXPECT_EQ(crc.find(b64.substr(0, 8)), std::string::npos) << "the error shows the key";
  // hh 01 (SHA-256) with a 48-byte key.
  EXPECT_NE(reason(python_secret(1, random(48, 3))).find("must be 32 bytes"), std::string::npos);
}

// ---------------------------------------------------------------- HMAC, keys ---

TEST(DhchapCrypto, HmacAndDigestMatchOpenssl) {
  Scratch s;
  for (uint8_t hash : all_hashes()) {
    const Bytes key = random(hash * 17, hash);  // any key length
    const Bytes a = random(100, 10 + hash), b = random(37, 20 + hash);
    Bytes ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    const std::string file = s.write("data", ab);
    EXPECT_EQ(hex(hmac(hash, key, {a, b})), openssl_hmac(hash, key, file)) << hash_name(hash);
    const std::string d = run(std::string("openssl dgst -") + hash_name(hash) + " -r " + file);
    EXPECT_EQ(hex(digest(hash, ab)), d.substr(0, d.find(' ')));
  }
}

TEST(DhchapCrypto, KeyTransformationMatchesOpenssl) {
  Scratch s;
  const std::string nqn = "nqn.2014-08.org.nvmexpress:uuid:00112233-4455-6677-8899-aabbccddeeff";
  for (uint8_t hash : all_hashes()) {
    Key k;
    k.hash = hash;
    const Bytes raw = random(na::hash::length(hash), 30 + hash);
    k.key.assign(raw.begin(), raw.end());
    const std::string file = s.write("t", span(nqn + "NVMe-over-Fabrics"));
    EXPECT_EQ(hex(transform(k, nqn)), openssl_hmac(hash, raw, file)) << hash_name(hash);
  }
  Key plain;
  plain.key.assign(48, 0x5a);
  EXPECT_EQ(transform(plain, "any"), plain.key);  // hh 00: the key as it is
}

// The message the specification concatenates, built here byte by byte.
Bytes message(ByteSpan challenge, uint32_t s, uint16_t tid, uint8_t scc, std::string_view label,
              std::string_view own, std::string_view peer) {
  Bytes m(challenge.begin(), challenge.end());
  for (int i = 0; i < 4; ++i) m.push_back(static_cast<uint8_t>(s >> (8 * i)));
  m.push_back(static_cast<uint8_t>(tid));
  m.push_back(static_cast<uint8_t>(tid >> 8));
  m.push_back(scc);
  m.insert(m.end(), label.begin(), label.end());
  m.insert(m.end(), own.begin(), own.end());
  m.push_back(0);
  m.insert(m.end(), peer.begin(), peer.end());
  return m;
}

TEST(DhchapCrypto, ResponsesMatchOpensslOverTheSpecifiedBytes) {
  Scratch s;
  const std::string host = "nqn.2026-11.io.pollux:host-a", sub = "nqn.2026-11.io.pollux:cnode1";
  for (uint8_t hash : all_hashes()) {
    const std::size_t hl = na::hash::length(hash);
    const Bytes key = random(hl, 40 + hash), c = random(hl, 50 + hash);
    // Null group: the challenge itself.
    const Bytes mh = message(c, 0x01020304, 0x0506, 0, "HostHost", host, sub);
    EXPECT_EQ(hex(response(Role::kHost, hash, key, c, {}, 0x01020304, 0x0506, 0, host, sub)),
              openssl_hmac(hash, key, s.write("mh", mh)));
    const Bytes mc = message(c, 0xfffffffe, 0xa0b0, 0, "Controller", sub, host);
    EXPECT_EQ(hex(response(Role::kController, hash, key, c, {}, 0xfffffffe, 0xa0b0, 0, sub, host)),
              openssl_hmac(hash, key, s.write("mc", mc)));
    // A DH group: Ca = HMAC(H(g^xy mod p), C), H and HMAC with the transaction's hash.
    const Bytes session = random(256, 60 + hash);
    const std::string hs =
        run(std::string("openssl dgst -") + hash_name(hash) + " -r " + s.write("ks", session));
    Bytes hashed;
    for (std::size_t i = 0; i < hl; ++i)
      hashed.push_back(static_cast<uint8_t>(std::stoi(hs.substr(2 * i, 2), nullptr, 16)));
    const std::string ca = openssl_hmac(hash, hashed, s.write("c", c));
    Bytes cab;
    for (std::size_t i = 0; i < hl; ++i)
      cab.push_back(static_cast<uint8_t>(std::stoi(ca.substr(2 * i, 2), nullptr, 16)));
    const Bytes ma = message(cab, 7, 1, 0, "HostHost", host, sub);
    EXPECT_EQ(hex(response(Role::kHost, hash, key, c, session, 7, 1, 0, host, sub)),
              openssl_hmac(hash, key, s.write("ma", ma)));
  }
}

TEST(DhchapCrypto, SequenceNumbersAreNeverZeroAndMove) {
  const uint32_t a = next_seqnum(), b = next_seqnum();
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(equal(span("abc"), span("abc")));
  EXPECT_FALSE(equal(span("abc"), span("abd")));
  EXPECT_FALSE(equal(span("abc"), span("ab")));
}

// ---------------------------------------------------------------- Diffie-Hellman ---

TEST(DhchapDh, EveryGroupAgreesWithItself) {
  for (uint8_t g : all_dhgroups()) {
    if (g == na::dhgroup::kNull) {
      EXPECT_FALSE(DhKey::generate(g).ok());
      continue;
    }
    auto a = DhKey::generate(g), b = DhKey::generate(g);
    ASSERT_TRUE(a.ok() && b.ok()) << dhgroup_name(g);
    EXPECT_EQ(a->public_value().size(), na::dhgroup::value_length(g));
    EXPECT_NE(a->public_value(), b->public_value());
    auto ab = a->shared_secret(b->public_value()), ba = b->shared_secret(a->public_value());
    ASSERT_TRUE(ab.ok() && ba.ok()) << dhgroup_name(g);
    EXPECT_EQ(ab->size(), na::dhgroup::value_length(g));
    EXPECT_EQ(*ab, *ba);
  }
}

TEST(DhchapDh, BadPeerValuesAreRefused) {
  auto a = DhKey::generate(na::dhgroup::kFfdhe2048);
  ASSERT_TRUE(a.ok());
  Bytes v(256, 0);
  EXPECT_FALSE(a->shared_secret(v).ok());  // 0
  v.back() = 1;
  EXPECT_FALSE(a->shared_secret(v).ok());  // 1
  v.assign(256, 0xff);
  auto big = a->shared_secret(v);  // above p
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("2 .. p-2"), std::string::npos);
  auto short_one = a->shared_secret(Bytes(255, 7));
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.error().message.find("255 bytes"), std::string::npos);
}

// Our public value as a PEM public key, for the openssl tool.
void write_pem(const std::string& path, const DhKey& k) {
  BIGNUM* y =
      BN_bin2bn(k.public_value().data(), static_cast<int>(k.public_value().size()), nullptr);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, dhgroup_name(k.group()), 0);
  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PUB_KEY, y);
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  EVP_PKEY* key = nullptr;
  ASSERT_EQ(EVP_PKEY_fromdata_init(ctx), 1);
  ASSERT_EQ(EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params), 1);
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(PEM_write_PUBKEY(f, key), 1);
  std::fclose(f);
  EVP_PKEY_free(key);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  BN_free(y);
}

// A PEM public key's DH value, padded to `len`.
Bytes read_pem_public(const std::string& path, std::size_t len) {
  FILE* f = std::fopen(path.c_str(), "r");
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return {};
  EVP_PKEY* key = PEM_read_PUBKEY(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  BIGNUM* y = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_PUB_KEY, &y), 1);
  Bytes out(len);
  BN_bn2binpad(y, out.data(), static_cast<int>(len));
  BN_free(y);
  EVP_PKEY_free(key);
  return out;
}

TEST(DhchapDh, SharedSecretMatchesOpensslPkeyutl) {
  Scratch s;
  for (uint8_t g : {na::dhgroup::kFfdhe2048, na::dhgroup::kFfdhe4096}) {
    const std::string name = dhgroup_name(g);
    const std::size_t len = na::dhgroup::value_length(g);
    run("openssl genpkey -algorithm DH -pkeyopt group:" + name + " -out " + s.path("peer.pem") +
        " 2>/dev/null");
    run("openssl pkey -in " + s.path("peer.pem") + " -pubout -out " + s.path("peer.pub"));
    auto ours = DhKey::generate(g);
    ASSERT_TRUE(ours.ok());
    write_pem(s.path("ours.pub"), *ours);
    run("openssl pkeyutl -derive -inkey " + s.path("peer.pem") + " -peerkey " + s.path("ours.pub") +
        " -out " + s.path("secret"));
    std::ifstream in(s.path("secret"), std::ios::binary);
    Bytes theirs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_LE(theirs.size(), len);
    theirs.insert(theirs.begin(), len - theirs.size(), 0);  // the tool may drop leading zeros
    auto mine = ours->shared_secret(read_pem_public(s.path("peer.pub"), len));
    ASSERT_TRUE(mine.ok()) << mine.error().message;
    EXPECT_EQ(hex(*mine), hex(theirs)) << name;
  }
}

TEST(DhchapNames, ParseBothWays) {
  for (uint8_t h : all_hashes()) {
    EXPECT_EQ(hash_from_name(hash_name(h)), h);
    EXPECT_EQ(hash_from_name(std::string("hmac(") + hash_name(h) + ")"), h);
  }
  for (uint8_t g : all_dhgroups()) EXPECT_EQ(dhgroup_from_name(dhgroup_name(g)), g);
  EXPECT_FALSE(hash_from_name("md5"));
  EXPECT_FALSE(dhgroup_from_name("ffdhe1024"));
}

}  // namespace
}  // namespace pollux::nvme::dhchap
