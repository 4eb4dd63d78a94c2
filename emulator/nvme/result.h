// A tiny result type for set-up paths of the emulator (config loading, store opening).
// The emulator shares nothing with driver/, so it carries its own. Hot paths never use it.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace pollux::emu::nvme {

struct Error {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error e) : v_(std::move(e)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const std::string& error() const { return std::get<1>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

// Result without a value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : ok_(false), error_(std::move(e.message)) {}  // NOLINT
  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string& error() const { return error_; }

 private:
  bool ok_ = true;
  std::string error_;
};

}  // namespace pollux::emu::nvme
