// A run's result as a table for the terminal, report.json (everything, machine-readable) and a
// self-contained report.html (IOPS, errors and latency over time as inline SVG, every fault
// marked, the verdicts and the replay command).
#pragma once

#include <string>

#include "scenarios/runner/runner.h"

namespace pollux::scenarios {

std::string result_table(const RunResult& r);
std::string report_json(const RunResult& r);
std::string report_html(const RunResult& r);
// Writes report.json and report.html into `dir` (created if missing). "" or the error.
std::string write_reports(const RunResult& r, const std::string& dir);

}  // namespace pollux::scenarios
