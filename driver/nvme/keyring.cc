#include "driver/nvme/keyring.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "driver/nvme/dhchap.h"

namespace pollux::nvme::keyring {

namespace {

struct Entry {
  std::string path;
  std::string text;
  ~Entry() { dhchap::wipe(text.data(), text.size()); }
};

std::mutex g_mu;
std::map<std::string, Entry>& keys() {
  static std::map<std::string, Entry> m;
  return m;
}

}  // namespace

bool is_inline_secret(const std::string& value) {
  return value.rfind(spec::nvme_auth::kSecretPrefix, 0) == 0;
}

Result<std::monostate> add_file_key(const std::string& name, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return make_error(EINVAL, "keyring_file_add_key " + name + ": " + why);
  };
  if (name.empty()) return make_error(EINVAL, "keyring_file_add_key: the key needs a name");
  if (is_inline_secret(name)) return bad("a name, not a secret");
  if (path.empty() || path[0] != '/') return bad("'" + path + "' is not an absolute path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return bad("'" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad("'" + path + "' is not a regular file");
  }
  if (st.st_mode & 077) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return bad("'" + path + "' has mode " + mode + ": others may read it (chmod 0600)");
  }
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 4096;)
    text.append(buf, static_cast<std::size_t>(n));
  dhchap::wipe(buf, sizeof buf);
  ::close(fd);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  text.erase(0, start);
  if (text.empty()) return bad("'" + path + "' is empty");
  std::lock_guard lock(g_mu);
  auto [it, fresh] = keys().try_emplace(name);
  if (!fresh) {
    dhchap::wipe(text.data(), text.size());
    return make_error(EEXIST, "keyring_file_add_key: a key named " + name + " exists already");
  }
  it->second.path = path;
  it->second.text = std::move(text);
  return std::monostate{};
}

Result<std::monostate> remove_key(const std::string& name) {
  std::lock_guard lock(g_mu);
  if (keys().erase(name) == 0) return make_error(ENOENT, "keyring: no key named " + name);
  return std::monostate{};
}

std::vector<std::pair<std::string, std::string>> list() {
  std::lock_guard lock(g_mu);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, e] : keys()) out.emplace_back(name, e.path);
  return out;
}

Result<std::string> resolve(const std::string& value) {
  if (is_inline_secret(value)) return value;
  std::lock_guard lock(g_mu);
  auto it = keys().find(value);
  if (it == keys().end())
    return make_error(ENOENT, "no keyring key named '" + value +
                                  "' (keyring_file_add_key adds one; or give the secret itself, "
                                  "DHHC-1:...)");
  return it->second.text;
}

}  // namespace pollux::nvme::keyring
