#include "common/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pollux::cli {
namespace {

std::string unsigned_check(std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first != std::string::npos && s[first] == '-') {
    return "expected a non-negative integer, got " + s;
  }
  errno = 0;
  char* end = nullptr;
  (void)std::strtoull(s.c_str(), &end, 0);
  if (errno == ERANGE) return s + " does not fit in 64 bits";
  return "";  // anything else is CLI11's to convert (or refuse)
}

std::string finite_check(std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() && !std::isfinite(v)) return "expected a finite number, got " + s;
  return "";
}

// CLI11 names an option's type after its C++ type: UINT for every unsigned integer, FLOAT for
// float and double (vectors of them too), followed by ":<validator>" for each validator.
void add_number_checks(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string full = o->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    if (type == "UINT") {
      o->check(CLI::Validator(unsigned_check, "", "pollux-unsigned"));
    } else if (type == "FLOAT") {
      o->check(CLI::Validator(finite_check, "", "pollux-finite"));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) add_number_checks(*sub);
}

std::string program(const CLI::App& app) {
  const std::string& n = app.get_name();
  const auto slash = n.rfind('/');
  return slash == std::string::npos ? n : n.substr(slash + 1);
}

}  // namespace

const CLI::Validator kPositive(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (end == s.c_str() || *end != '\0' || !(v > 0)) return "expected a number > 0, got " + s;
      return "";
    },
    "POSITIVE", "pollux-positive");

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  if (app.get_name().empty() && argc > 0) app.name(argv[0]);
  add_number_checks(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "%s: %s (see --help)\n", program(app).c_str(), e.what());
    return kBadInput;
  }
  return std::nullopt;
}

int bad_input(const CLI::App& app, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program(app).c_str(), message.c_str());
  return kBadInput;
}

}  // namespace pollux::cli
