#include <gtest/gtest.h>

#include <dirent.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"

namespace parity::cli {
namespace {

struct Args {
  std::vector<std::string> strings;
  std::vector<const char*> argv;
  explicit Args(std::vector<std::string> a) : strings(std::move(a)) {
    strings.insert(strings.begin(), "parity");
    for (const std::string& s : strings) argv.push_back(s.c_str());
  }
  int argc() const { return static_cast<int>(argv.size()); }
};

ParsedCommand parse(std::vector<std::string> a) {
  Args args(std::move(a));
  std::ostringstream out;
  return parse_command_line(args.argc(), args.argv.data(), out);
}

TEST(CommandLine, EveryFlagMapsIntoRunConfig) {
  const ParsedCommand p = parse(
      {"run", "--tp", "2", "--cp", "2", "--dp", "3", "--sp", "--launch", "processes", "--seed",
       "99", "--timeout", "2.5", "--report", "r.json", "--inject", "crash-rank=1", "--inject",
       "hang-rank=2", "--check-collectives", "--hidden", "96", "--heads", "6", "--ffn-hidden",
       "128", "--layers", "5", "--seq", "32", "--micro-batch", "3", "--microbatches", "4",
       "--steps", "7", "--vocab", "200", "--dtype", "bf16", "--fp32-residual", "--dropout", "0.1",
       "--norm", "rmsnorm", "--activation", "swiglu", "--recompute", "selective:core_attn,mlp",
       "--recompute-layers", "2", "--graphs", "full-iteration", "--graph-warmup", "0", "--trace",
       "t.jsonl", "--gather-output", "--runtime-gather-output", "off", "--lr", "0.25"});
  ASSERT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_EQ(p.command, "run");
  const RunConfig& c = p.config;
  EXPECT_EQ(c.tp, 2);
  EXPECT_EQ(c.cp, 2);
  EXPECT_EQ(c.dp, 3);
  EXPECT_TRUE(c.sp);
  EXPECT_EQ(c.launch, LaunchMode::processes);
  EXPECT_EQ(c.seed, 99u);
  EXPECT_EQ(c.timeout, 2.5);
  EXPECT_EQ(c.report, "r.json");
  EXPECT_EQ(c.inject, (std::vector<std::string>{"crash-rank=1", "hang-rank=2"}));
  EXPECT_TRUE(c.check_collectives);
  EXPECT_EQ(c.hidden, 96);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(c.ffn_hidden, 128);
  EXPECT_EQ(c.layers, 5);
  EXPECT_EQ(c.seq, 32);
  EXPECT_EQ(c.micro_batch, 3);
  EXPECT_EQ(c.microbatches, 4);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.vocab, 200);
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_TRUE(c.fp32_residual);
  EXPECT_EQ(c.dropout, 0.1);
  EXPECT_EQ(c.norm, NormOption::rmsnorm);
  EXPECT_EQ(c.activation, ActivationOption::swiglu);
  EXPECT_EQ(c.recompute, "selective:core_attn,mlp");
  EXPECT_EQ(c.recompute_layers, 2);
  EXPECT_EQ(c.graphs, GraphOption::full_iteration);
  EXPECT_EQ(c.graph_warmup, 0);
  EXPECT_EQ(c.trace, "t.jsonl");
  EXPECT_TRUE(c.gather_output);
  EXPECT_EQ(c.runtime_gather_output, RuntimeGatherOption::off);
  EXPECT_EQ(c.lr, 0.25);
}

TEST(CommandLine, DefaultsAreRunConfigDefaults) {
  const ParsedCommand p = parse({"run"});
  ASSERT_TRUE(p.errors.empty());
  EXPECT_TRUE(p.config == RunConfig{});
  const ParsedCommand s = parse({"selfcheck"});
  ASSERT_TRUE(s.errors.empty());
  EXPECT_TRUE(s.config == RunConfig{});
}

TEST(CommandLine, ViolationsAreOneLineEach) {
  ParsedCommand p = parse({"selfcheck", "--tp", "3", "--dtype", "fp16"});
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "--dtype fp16: must be one of fp32, fp64, bf16",
                          "--tp 3: hidden size 64 is not divisible by 3",
                          "--tp 3: number of heads 4 is not divisible by 3",
                          "--tp 3: ffn hidden size 256 is not divisible by 3",
                          "--tp 3: vocab size 128 is not divisible by 3",
                      }));
  p = parse({"selfcheck", "--inject", "crash-rank=1", "garbage"});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].find('\n'), std::string::npos);
  EXPECT_EQ(p.errors[0].rfind("parity: ", 0), 0u) << p.errors[0];
}

TEST(CommandLine, ExitCodes) {
  std::ostringstream out, err;
  auto run = [&](std::vector<std::string> a) {
    Args args(std::move(a));
    out.str("");
    err.str("");
    return run_command_line(args.argc(), args.argv.data(), out, err);
  };
  EXPECT_EQ(run({"selfcheck", "--tp", "2"}), kExitOk) << err.str();
  EXPECT_NE(out.str().find("self-check passed: 2 rank(s)"), std::string::npos) << out.str();
  EXPECT_EQ(run({"selfcheck", "--sp"}), kExitBadInput);
  EXPECT_EQ(err.str(), "--sp: sequence parallelism requires tp > 1 (tp = 1)\n");
  EXPECT_EQ(run({"selfcheck", "--tp", "2", "--inject", "throw-rank=1", "--timeout", "5"}),
            kExitRankFailure);
  EXPECT_NE(err.str().find("rank 1 (tp=1, cp=0, dp=0) threw: injected fault: throw-rank=1"),
            std::string::npos)
      << err.str();
  // The mutants runner lives in parity_scenarios; only the parity binary installs it.
  EXPECT_EQ(run({"mutants"}), kExitBadInput);
  EXPECT_NE(err.str().find("not available in this program"), std::string::npos) << err.str();
  EXPECT_EQ(run({"mutants", "--fault", "boom"}), kExitBadInput);
  EXPECT_NE(err.str().find("--fault boom: not a code-path fault"), std::string::npos) << err.str();
  EXPECT_EQ(run({"check", "--help"}), kExitOk);
  EXPECT_NE(out.str().find("--ffn-hidden"), std::string::npos);
}

TEST(CommandLine, ReportIsWrittenAtomically) {
  const files::TempDir dir("parity-cli-test");
  const std::string path = dir.path() + "/report.json";
  Args args({"selfcheck", "--tp", "2", "--dp", "2", "--report", path});
  std::ostringstream out, err;
  ASSERT_EQ(run_command_line(args.argc(), args.argv.data(), out, err), kExitOk) << err.str();
  std::ifstream in(path);
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["command"], "selfcheck");
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["config"]["tp"], 2);
  EXPECT_EQ(report["launch"]["results"].size(), 4u);
  EXPECT_TRUE(report["launch"]["ok"].get<bool>());
  // Only the report itself: the temp file was renamed over it.
  DIR* d = ::opendir(dir.path().c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..")
      names.push_back(e->d_name);
  ::closedir(d);
  EXPECT_EQ(names, std::vector<std::string>{"report.json"});
}

}  // namespace
}  // namespace parity::cli
