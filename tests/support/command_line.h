#pragma once
// `parity ...` run (or parsed) in this process through run_command_line, argv built as
// the binary gets it, both streams captured.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/cli/cli.h"

namespace parity::testing {

// Runs `parity <args>`; returns the exit code, stdout in *out and stderr in *err.
// `options` as run_command_line's (e.g. the worker executable for processes mode).
inline int run_parity(std::vector<std::string> args, std::string* out, std::string* err,
                      const LaunchOptions& options = LaunchOptions()) {
  args.insert(args.begin(), "parity");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out_stream, err_stream;
  const int code = cli::run_command_line(static_cast<int>(argv.size()), argv.data(), out_stream,
                                         err_stream, options);
  *out = out_stream.str();
  *err = err_stream.str();
  return code;
}

// `parity <args>` parsed, not run: the command, its config and its errors (one line each).
inline cli::ParsedCommand parse_parity(std::vector<std::string> args) {
  args.insert(args.begin(), "parity");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out;
  return cli::parse_command_line(static_cast<int>(argv.size()), argv.data(), out);
}

// "check --tp 2 --seq 8" -> {"check", "--tp", "2", "--seq", "8"}: a command line
// written as one string (no quoting: no argument holds a space).
inline std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// As above, with stdout then stderr in one string (for a failure message).
inline int run_parity(std::vector<std::string> args, std::string* output) {
  std::string out, err;
  const int code = run_parity(std::move(args), &out, &err);
  *output = out + err;
  return code;
}

}  // namespace parity::testing
