// Parser for the Prometheus text exposition format (what GET /metrics returns): turns the body
// into samples and counts the lines it could not read instead of failing on them.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pollux::top {

using Labels = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  Labels labels;  // Values unescaped.
  double value = 0;
};

struct ParseResult {
  std::vector<Sample> samples;
  std::size_t malformed_lines = 0;
};

// Comments (# HELP, # TYPE, anything after '#') and blank lines are skipped; a sample's optional
// timestamp is validated and dropped. Every series is kept, histograms included: choosing the
// metrics of interest is the snapshot's job.
ParseResult parse_exposition(std::string_view text);

}  // namespace pollux::top
