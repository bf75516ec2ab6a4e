// parity run prints each step's row as the step completes, not at the end: a
// run whose step 1 cannot begin before row 0 is on the output (a file
// handshake: the output stream creates the file the ranks wait for) ends
// only if row 0 was printed while it ran. The printed table is the one the
// ranks' results give (format_loss_table), byte for byte. Threads mode, and
// processes mode, where the parent reads the rows from the shared status file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"
#include "harness/cli/run_output.h"
#include "harness/driver/training_step.h"
#include "harness/runtime/launcher.h"
#include "tests/runtime/rank_programs.h"

namespace parity {
namespace {

// An output that creates `gate` once a line that is the table's row 0 has
// been written to it.
class GateOpeningOutput : public std::streambuf {
 public:
  explicit GateOpeningOutput(std::string gate) : gate_(std::move(gate)) {}
  const std::string& text() const { return text_; }
  bool opened() const { return opened_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    text_ += static_cast<char>(c);
    if (c == '\n') line_ended();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i) overflow(static_cast<unsigned char>(s[i]));
    return n;
  }

 private:
  std::string gate_, text_;
  bool opened_ = false;

  void line_ended() {
    const std::size_t begin = text_.rfind('\n', text_.size() - 2);
    const std::string line = text_.substr(begin == std::string::npos ? 0 : begin + 1);
    if (opened_ || line.rfind("    0  ", 0) != 0) return;
    files::write_atomically(gate_, "row 0 printed\n");
    opened_ = true;
  }
};

class RunStreamsRows : public ::testing::TestWithParam<LaunchMode> {
 protected:
  void SetUp() override {
    testing::register_test_rank_programs();
    testing::register_gated_model_as_model();  // threads mode; the worker does its own
    dir_.emplace("parity-run-streams");
    gate_ = dir_->path() + "/gate";
    ::setenv(testing::kStepGateVariable, gate_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv(testing::kStepGateVariable);
    register_rank_program(kModelProgram, run_model_program);
    dir_.reset();
  }
  std::optional<files::TempDir> dir_;
  std::string gate_;
};

TEST_P(RunStreamsRows, EachRowPrintsWhenEveryRankCompletedItsStep) {
  const std::string report = dir_->path() + "/report.json";
  std::vector<std::string> args = {
      "parity",   "run",       "--dp", "2",        "--steps",
      "3",        "--timeout", "20",   "--launch", std::string(launch_mode_name(GetParam())),
      "--report", report};
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  GateOpeningOutput buffer(gate_);
  std::ostream out(&buffer);
  std::ostringstream err;
  LaunchOptions options;
  options.worker_executable = PARITY_TEST_WORKER;
  const int code =
      cli::run_command_line(static_cast<int>(argv.size()), argv.data(), out, err, options);
  // Without rows printed during the run, step 1 waits for the gate until the
  // hang guard (--timeout) ends the run.
  ASSERT_TRUE(buffer.opened()) << "row 0 was not printed while the run ran:\n"
                               << buffer.text() << err.str();
  ASSERT_EQ(code, 0) << buffer.text() << err.str();

  // The table printed is the results' table, each row once, in order.
  const std::optional<std::string> text = files::read(report);
  ASSERT_TRUE(text);
  const nlohmann::json written = nlohmann::json::parse(*text);
  LaunchResult result;
  for (const nlohmann::json& r : written["launch"]["results"]) result.results.push_back(r);
  const std::string table = format_loss_table(result);
  ASSERT_EQ(loss_table_rows(result).size(), 3u);
  const std::string& printed = buffer.text();
  const std::size_t header_end = printed.find('\n');
  const std::size_t done = printed.find("run done: 2 rank(s), 3 step(s)");
  ASSERT_NE(done, std::string::npos) << printed;
  EXPECT_EQ(printed.substr(header_end + 1, done - header_end - 1), table) << printed;
}

INSTANTIATE_TEST_SUITE_P(Modes, RunStreamsRows,
                         ::testing::Values(LaunchMode::threads, LaunchMode::processes),
                         [](const auto& info) {
                           return std::string(launch_mode_name(info.param));
                         });

}  // namespace
}  // namespace parity
