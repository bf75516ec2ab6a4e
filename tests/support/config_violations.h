#pragma once
// validate_run_config's violations as the command line prints them, for tests of
// the rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/config/run_config.h"

namespace parity::testing {

inline std::vector<std::string> cli_lines(const RunConfig& c) {
  std::vector<std::string> out;
  for (const ConfigViolation& v : validate_run_config(c)) out.push_back(format_for_cli(v));
  return out;
}

// Exactly one violation, with this text.
inline void expect_only(const RunConfig& c, const std::string& line) {
  EXPECT_EQ(cli_lines(c), std::vector<std::string>{line});
}

}  // namespace parity::testing
