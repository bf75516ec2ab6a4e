// The command line's errors, exit codes and outputs: violations one line each, naming
// where a value not typed came from; the exit codes; the report written atomically;
// the help.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"
#include "tests/support/command_line.h"
#include "tests/support/folder_entries.h"

namespace parity::cli {
namespace {

using testing::folder_entries;
using testing::parse_parity;
using testing::run_parity;

TEST(CommandLine, ViolationsAreOneLineEach) {
  ParsedCommand p = parse_parity({"run", "--tp", "3", "--dtype", "fp16"});
  // The model's rules name the field they constrain, and the values the user
  // did not type say where they came from.
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "--dtype fp16: must be one of fp32, fp64, bf16",
                          "--heads 4: must be divisible by tp (3) (the built-in default sets "
                          "--heads 4; pass --heads to override it)",
                          "--ffn-hidden 256: must be divisible by tp (3) (the built-in default "
                          "sets --ffn-hidden 256; pass --ffn-hidden to override it)",
                          "--vocab 128: must be divisible by tp (3) (the built-in default sets "
                          "--vocab 128; pass --vocab to override it)",
                      }));
  p = parse_parity({"selfcheck", "--inject", "crash-rank=1", "garbage"});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].find('\n'), std::string::npos);
  EXPECT_EQ(p.errors[0].rfind("parity: ", 0), 0u) << p.errors[0];
}

TEST(CommandLine, ExitCodes) {
  std::string out, err;
  auto run = [&](std::vector<std::string> a) { return run_parity(std::move(a), &out, &err); };
  EXPECT_EQ(run({"selfcheck", "--tp", "2"}), kExitOk) << err;
  EXPECT_NE(out.find("self-check passed: 2 rank(s)"), std::string::npos) << out;
  EXPECT_EQ(run({"run", "--sp"}), kExitBadInput);
  EXPECT_EQ(err, "--sp: sequence parallelism requires tp > 1 (tp = 1)\n");
  EXPECT_EQ(run({"selfcheck", "--tp", "2", "--inject", "throw-rank=1", "--timeout", "5"}),
            kExitRankFailure);
  EXPECT_NE(err.find("rank 1 (tp=1, cp=0, dp=0) threw: injected fault: throw-rank=1"),
            std::string::npos)
      << err;
  EXPECT_EQ(run({"mutants", "--fault", "boom"}), kExitBadInput);
  EXPECT_NE(err.find("--fault boom: not a code-path fault"), std::string::npos) << err;
  EXPECT_EQ(run({"check", "--help"}), kExitOk);
  EXPECT_NE(out.find("--ffn-hidden"), std::string::npos);
}

TEST(CommandLine, ReportIsWrittenAtomically) {
  const files::TempDir dir("parity-cli-test");
  const std::string path = dir.path() + "/report.json";
  std::string out, err;
  ASSERT_EQ(run_parity({"selfcheck", "--tp", "2", "--dp", "2", "--report", path}, &out, &err),
            kExitOk)
      << err;
  const nlohmann::json report = nlohmann::json::parse(files::read(path).value_or("null"));
  EXPECT_EQ(report["command"], "selfcheck");
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["config"]["tp"], 2);
  EXPECT_EQ(report["launch"]["results"].size(), 4u);
  EXPECT_TRUE(report["launch"]["ok"].get<bool>());
  // Only the report itself: the temp file was renamed over it.
  EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"report.json"});
}

// Every boolean has a negative spelling that wins when it comes last.

TEST(CommandLine, HelpListsNegationsAndOnlyRealCommands) {
  std::string out, err;
  ASSERT_EQ(run_parity({"--help"}, &out, &err), kExitOk);
  for (const char* command :
       {"check", "selfcheck", "run", "repro", "mutants", "diff", "sweep", "list"})
    EXPECT_NE(out.find(command), std::string::npos) << command;
  ASSERT_EQ(run_parity({"run", "--help"}, &out, &err), kExitOk);
  for (const char* negation : {"--no-sp", "--no-fp32-residual", "--no-gather-output",
                               "--no-check-collectives", "--backend"})
    EXPECT_NE(out.find(negation), std::string::npos) << negation << " in\n" << out;
  EXPECT_EQ(run_parity({"sweeps"}, &out, &err), kExitBadInput);
  EXPECT_EQ(err,
            "parity: unknown command \"sweeps\": did you mean \"sweep\"? (known: check, "
            "selfcheck, run, repro, mutants, diff, sweep, list; see parity --help)\n");
}

// The embedded default's values are named as such.
TEST(CommandLine, ErrorsNameTheSourceOfValuesNotTyped) {
  ParsedCommand p = parse_parity({"check", "--tp", "1", "--cp", "4"});
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "--sp: sequence parallelism requires tp > 1 (tp = 1) (the embedded "
                          "default sets --sp; pass --no-sp)"}));
  p = parse_parity({"check", "--recompute", "full-uniform"});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].rfind("--recompute full-uniform: full recompute cannot be combined with "
                              "per-layer graphs",
                              0),
            0u)
      << p.errors[0];
  EXPECT_NE(p.errors[0].find("(the embedded default sets --graphs per-layer; pass --graphs to "
                             "override it)"),
            std::string::npos)
      << p.errors[0];
  // A value the user typed carries no note.
  p = parse_parity({"run", "--sp"});
  EXPECT_EQ(p.errors,
            (std::vector<std::string>{"--sp: sequence parallelism requires tp > 1 (tp = 1)"}));
  // A scenario file names itself, for its own keys and for the keys a rule reads.
  files::TempDir dir("parity-cli-sources");
  const std::string file = dir.path() + "/s.json";
  files::write_atomically(file, R"({"graphs": "per-layer", "sp": true})");
  p = parse_parity({"check", file, "--recompute", "full-block"});
  ASSERT_EQ(p.errors.size(), 2u) << p.errors[0];
  EXPECT_EQ(p.errors[0], file + ": \"sp\" = true: sequence parallelism requires tp > 1 (tp = 1)");
  EXPECT_NE(
      p.errors[1].find("(" + file + " sets --graphs per-layer; pass --graphs to override it)"),
      std::string::npos)
      << p.errors[1];
}

TEST(CommandLine, MetricsTheModelCannotObserveAreRejected) {
  for (const char* metric :
       {"layer-router-logits-l2", "layer-router-decision-entropy", "global-mtp-logits-l2"}) {
    for (const char* command : {"run", "check"}) {
      const ParsedCommand p = parse_parity({command, "--metrics", metric});
      ASSERT_EQ(p.errors.size(), 1u) << command << " " << metric;
      EXPECT_EQ(p.errors[0].rfind(
                    "--metrics " + std::string(metric) + ": metric " + metric + " reads ", 0),
                0u)
          << p.errors[0];
      EXPECT_NE(p.errors[0].find("it needs "), std::string::npos) << p.errors[0];
    }
  }
  EXPECT_TRUE(
      parse_parity({"run", "--metrics", "layer-residual-contribution-l2,global-output-logits-l2"})
          .errors.empty());
}

}  // namespace
}  // namespace parity::cli
