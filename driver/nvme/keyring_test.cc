// The keyring: keys from owner-only files by name, refusals for files others may read, missing
// files, relative paths and duplicate names; resolve() tells a secret from a name.
#include "driver/nvme/keyring.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace pollux::nvme::keyring {
namespace {

constexpr const char* kSecret = "DHHC-1:00:ia4O3MbeRRUSexOxWGyF3HzA9Z9KMvIuakiW3m8XsZOYkgGR:";

std::string write(const std::string& name, const std::string& text, mode_t mode) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string p = std::string(t ? t : "/tmp") + "/" + name;
  std::ofstream(p) << text;
  ::chmod(p.c_str(), mode);
  return p;
}

TEST(Keyring, AddResolveListRemove) {
  const std::string p = write("key0", std::string(kSecret) + "\n", 0600);
  ASSERT_TRUE(add_file_key("key0", p).ok());
  auto r = resolve("key0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kSecret);                 // the file's trailing newline dropped
  EXPECT_EQ(*resolve(kSecret), kSecret);  // a secret resolves to itself
  EXPECT_TRUE(is_inline_secret(kSecret));
  EXPECT_FALSE(is_inline_secret("key0"));
  const auto l = list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].first, "key0");
  EXPECT_EQ(l[0].second, p);
  auto again = add_file_key("key0", p);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("exists already"), std::string::npos);
  EXPECT_TRUE(remove_key("key0").ok());
  auto gone = resolve("key0");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("no keyring key named 'key0'"), std::string::npos);
  EXPECT_FALSE(remove_key("key0").ok());
}

TEST(Keyring, Refusals) {
  const std::string open = write("key1", kSecret, 0644);
  auto r = add_file_key("key1", open);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("mode 0644"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find("DHHC"), std::string::npos) << "the key in an error";
  r = add_file_key("key1", "relative/path");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("absolute"), std::string::npos);
  r = add_file_key("key1", "/nonexistent/key");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("No such file"), std::string::npos);
  r = add_file_key("key1", write("empty", "\n", 0600));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("empty"), std::string::npos);
  EXPECT_FALSE(add_file_key(kSecret, write("key2", kSecret, 0600)).ok());
}

}  // namespace
}  // namespace pollux::nvme::keyring
