// Smoke test for //third_party:openssl_crypto: HMAC-SHA-256/512 against RFC 4231's test case 1,
// and an RFC 7919 ffdhe2048 key agreement (two parties derive the same secret).
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

std::string hex(const std::vector<unsigned char>& v) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : v) s += {d[c >> 4], d[c & 15]};
  return s;
}

std::vector<unsigned char> hmac(const char* digest, const std::vector<unsigned char>& key,
                                const std::string& data) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(digest), 0),
      OSSL_PARAM_construct_end()};
  std::vector<unsigned char> out(64);
  size_t n = 0;
  EXPECT_EQ(EVP_MAC_init(ctx, key.data(), key.size(), params), 1);
  EXPECT_EQ(EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()),
            1);
  EXPECT_EQ(EVP_MAC_final(ctx, out.data(), &n, out.size()), 1);
  out.resize(n);
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return out;
}

TEST(OpensslSmokeTest, HmacRfc4231TestCase1) {
  const std::vector<unsigned char> key(20, 0x0b);
  EXPECT_EQ(hex(hmac("SHA256", key, "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac("SHA512", key, "Hi There")),
            "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde"
            "daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854");
}

EVP_PKEY* ffdhe2048_key() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  EVP_PKEY* key = nullptr;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
                                                          const_cast<char*>("ffdhe2048"), 0),
                         OSSL_PARAM_construct_end()};
  EXPECT_EQ(EVP_PKEY_keygen_init(ctx), 1);
  EXPECT_EQ(EVP_PKEY_CTX_set_params(ctx, params), 1);
  EXPECT_EQ(EVP_PKEY_generate(ctx, &key), 1);
  EVP_PKEY_CTX_free(ctx);
  return key;
}

std::vector<unsigned char> derive(EVP_PKEY* own, EVP_PKEY* peer) {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_pkey(nullptr, own, nullptr);
  EXPECT_EQ(EVP_PKEY_derive_init(ctx), 1);
  EXPECT_EQ(EVP_PKEY_derive_set_peer(ctx, peer), 1);
  size_t n = 0;
  EXPECT_EQ(EVP_PKEY_derive(ctx, nullptr, &n), 1);
  std::vector<unsigned char> out(n);
  EXPECT_EQ(EVP_PKEY_derive(ctx, out.data(), &n), 1);
  out.resize(n);
  EVP_PKEY_CTX_free(ctx);
  return out;
}

TEST(OpensslSmokeTest, Ffdhe2048BothSidesDeriveTheSameSecret) {
  EVP_PKEY* a = ffdhe2048_key();
  EVP_PKEY* b = ffdhe2048_key();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto ab = derive(a, b);
  EXPECT_GT(ab.size(), 200u);  // at most 256 bytes; leading zeros may be dropped unpadded
  EXPECT_EQ(ab, derive(b, a));
  EVP_PKEY_free(a);
  EVP_PKEY_free(b);
}

}  // namespace
