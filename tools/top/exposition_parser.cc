#include "tools/top/exposition_parser.h"

#include <charconv>
#include <cstdint>
#include <optional>
#include <system_error>

namespace pollux::top {
namespace {

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

// Reads one line's tokens left to right; every reader returns false on a syntax error.
class LineReader {
 public:
  explicit LineReader(std::string_view line) : s_(line) {}

  void skip_blanks() {
    while (pos_ < s_.size() && is_blank(s_[pos_])) ++pos_;
  }
  bool at_end() const { return pos_ == s_.size(); }
  bool consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // Metric names may contain ':'; label names may not (the format reserves it for recording rules).
  bool read_name(std::string& out, bool allow_colon) {
    std::size_t start = pos_;
    if (pos_ >= s_.size() || !is_name_start(s_[pos_]) || (!allow_colon && s_[pos_] == ':')) {
      return false;
    }
    while (pos_ < s_.size() && is_name_char(s_[pos_]) && (allow_colon || s_[pos_] != ':')) ++pos_;
    out.assign(s_.substr(start, pos_ - start));
    return true;
  }

  // A quoted label value with the format's three escapes: \\ \" \n.
  bool read_quoted(std::string& out) {
    if (!consume('"')) return false;
    out.clear();
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      if (e == '\\' || e == '"') {
        out.push_back(e);
      } else if (e == 'n') {
        out.push_back('\n');
      } else {
        return false;
      }
    }
    return false;  // Unterminated.
  }

  // The next run of non-blank characters.
  std::string_view read_token() {
    std::size_t start = pos_;
    while (pos_ < s_.size() && !is_blank(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

// Go's ParseFloat syntax as Prometheus writes it: decimals, exponents, NaN, +Inf, -Inf.
std::optional<double> parse_value(std::string_view token) {
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);  // from_chars rejects '+'.
  if (token.empty() || token.front() == '+') return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return v;
}

bool is_timestamp(std::string_view token) {
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), ms);
  return ec == std::errc() && end == token.data() + token.size();
}

bool read_labels(LineReader& r, Labels& labels) {
  r.skip_blanks();
  if (r.consume('}')) return true;
  while (true) {
    std::string name, value;
    r.skip_blanks();
    if (!r.read_name(name, /*allow_colon=*/false)) return false;
    r.skip_blanks();
    if (!r.consume('=')) return false;
    r.skip_blanks();
    if (!r.read_quoted(value)) return false;
    labels[name] = std::move(value);
    r.skip_blanks();
    if (r.consume('}')) return true;
    if (!r.consume(',')) return false;
    r.skip_blanks();
    if (r.consume('}')) return true;  // A trailing comma is allowed.
  }
}

std::optional<Sample> parse_sample_line(std::string_view line) {
  LineReader r(line);
  Sample s;
  r.skip_blanks();
  if (!r.read_name(s.name, /*allow_colon=*/true)) return std::nullopt;
  r.skip_blanks();
  if (r.consume('{') && !read_labels(r, s.labels)) return std::nullopt;
  r.skip_blanks();
  std::optional<double> value = parse_value(r.read_token());
  if (!value) return std::nullopt;
  s.value = *value;
  r.skip_blanks();
  if (!r.at_end()) {
    if (!is_timestamp(r.read_token())) return std::nullopt;
    r.skip_blanks();
    if (!r.at_end()) return std::nullopt;
  }
  return s;
}

bool is_blank_line(std::string_view line) {
  for (char c : line) {
    if (!is_blank(c)) return false;
  }
  return true;
}

bool is_comment(std::string_view line) {
  std::size_t i = line.find_first_not_of(" \t");
  return i != std::string_view::npos && line[i] == '#';
}

}  // namespace

ParseResult parse_exposition(std::string_view text) {
  ParseResult result;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank_line(line) || is_comment(line)) continue;
    if (std::optional<Sample> s = parse_sample_line(line)) {
      result.samples.push_back(std::move(*s));
    } else {
      ++result.malformed_lines;
    }
  }
  return result;
}

}  // namespace pollux::top
