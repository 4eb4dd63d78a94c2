// Result<T>: a value or an error (negative errno plus a readable message). Used on set-up
// paths, where a caller needs to know *why* something failed; hot paths return plain codes.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace pollux {

struct Error {
  int code = -EINVAL;  // negative errno
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

inline Error make_error(int code, std::string message) {
  return Error{code < 0 ? code : -code, std::move(message)};
}

}  // namespace pollux
