// The command line of every Pollux program, one convention: --help prints and exits 0; a
// parse or validation error is one line on stderr ("<program>: <why> (see --help)") and exit
// status 2, bad input — not CLI11's own codes (104-114).
//
// Numbers are also checked where CLI11 lets them through: an unsigned option refuses a sign
// and values beyond 64 bits (CLI11 wraps "-1" and 2^64 to 2^64-1), a floating-point one
// refuses nan and infinities (its Range and PositiveNumber validators pass nan).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace pollux::cli {

inline constexpr int kBadInput = 2;

// A number > 0 (CLI11's PositiveNumber names its range as "4.94066e-324 to 1.79769e+308").
extern const CLI::Validator kPositive;

// Parses argv. Returns the exit status when the program must stop now (help: 0 after
// printing it; an error: 2 after printing it), nullopt to carry on:
//   if (auto rc = cli::parse(app, argc, argv)) return *rc;
std::optional<int> parse(CLI::App& app, int argc, char** argv);

// An error found after parsing (a combination CLI11 cannot express): prints
// "<program>: <message>" on stderr and returns 2.
int bad_input(const CLI::App& app, const std::string& message);

}  // namespace pollux::cli
