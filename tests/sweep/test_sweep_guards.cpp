// `parity sweep` refuses what would make its verdict vacuous or its work
// wasted, before any case runs: a matrix (or shard) with no case to run,
// output paths that cannot be written, a --merge into a folder holding a
// sweep. And what it says about what did not run: invalid cases by name, a
// merge's missing cases by name, a resumed sweep's seconds, the --resume
// command Ctrl-C prints (tests/sweep/interrupt_resume.sh sends the SIGINT).
#include <gtest/gtest.h>

#include "harness/base/files.h"
#include "harness/sweep/results.h"
#include "harness/sweep/run_sweep.h"
#include "tests/support/command_line.h"

namespace parity::sweep {
namespace {

using parity::testing::run_parity;

const std::string kMatrix = PARITY_SOURCE_DIR "/tests/sweep/small.json";
const char* const kTinyBase = R"("base": {"layers": 1, "steps": 1, "hidden": 8, "heads": 2,
    "ffn-hidden": 16, "seq": 4, "vocab": 16, "micro-batch": 1, "microbatches": 1,
    "metrics": ["layer-residual-accumulator-l2"]})";

std::string write_matrix(const files::TempDir& dir, const std::string& axes) {
  const std::string path = dir.path() + "/m.json";
  files::write_atomically(path, "{\"axes\": " + axes + ", " + kTinyBase + "}");
  return path;
}

TEST(SweepGuards, AMatrixWhoseEveryCaseIsInvalidExits2SayingWhy) {
  files::TempDir dir("sweep-guard");
  const std::string matrix = write_matrix(dir, R"({"tp": [3]})");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", matrix, "--out", dir.path() + "/s"}, &out, &err), 2) << out;
  EXPECT_EQ(err.rfind("parity sweep: " + matrix +
                          ": no case to run: every case of the matrix's 1 is invalid or "
                          "excluded (1 invalid, 0 excluded): ",
                      0),
            0u)
      << err;
  EXPECT_NE(err.find("tp"), std::string::npos) << err;  // the rule the case broke
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(files::exists(dir.path() + "/s")) << "nothing is written";
}

TEST(SweepGuards, AShardWithNoCaseExits2) {
  files::TempDir dir("sweep-guard");
  std::string out, err;
  // small.json's cases have indices 0..8: no index % 10 == 9.
  EXPECT_EQ(
      run_parity({"sweep", kMatrix, "--out", dir.path() + "/s", "--shard", "10/10"}, &out, &err), 2)
      << out;
  EXPECT_NE(err.find("--shard 10/10: no case to run: none of the matrix's 8 valid case(s) has an "
                     "index % 10 == 9"),
            std::string::npos)
      << err;
  EXPECT_FALSE(files::exists(dir.path() + "/s"));
}

TEST(SweepGuards, SomeInvalidCasesAreCountedAndNamed) {
  files::TempDir dir("sweep-guard");
  const std::string matrix = write_matrix(dir, R"({"tp": [1, 3]})");
  std::string out, err;
  ASSERT_EQ(run_parity({"sweep", matrix, "--out", dir.path() + "/s"}, &out, &err), 0) << out << err;
  EXPECT_NE(out.find("1 case(s), 0 excluded, 1 invalid"), std::string::npos) << out;
  EXPECT_NE(out.find("invalid x1"), std::string::npos) << out;
  EXPECT_NE(out.find("cases: tp=3\n"), std::string::npos) << out;
}

TEST(SweepGuards, AnUnwritableJunitPathExits2BeforeAnyCase) {
  files::TempDir dir("sweep-guard");
  files::write_atomically(dir.path() + "/file", "x");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path() + "/s", "--junit",
                        dir.path() + "/file/j.xml"},
                       &out, &err),
            2);
  EXPECT_EQ(err, "parity sweep: --junit " + dir.path() +
                     "/file/j.xml: cannot be written: " + dir.path() +
                     "/file is not a folder (output paths are checked before any "
                     "case runs)\n");
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path() + "/s", "--junit",
                        dir.path() + "/no/such/j.xml"},
                       &out, &err),
            2);
  EXPECT_NE(err.find("its folder " + dir.path() + "/no/such does not exist"), std::string::npos)
      << err;
  EXPECT_EQ(
      run_parity({"sweep", kMatrix, "--out", dir.path() + "/s", "--junit", dir.path()}, &out, &err),
      2);
  EXPECT_NE(err.find(": cannot be written: it is a folder, not a file"), std::string::npos) << err;
  EXPECT_FALSE(files::exists(dir.path() + "/s/results.jsonl")) << "no case ran";
}

// One small finished sweep folder: shard 3/4 of small.json (2 cases).
std::string small_shard(const files::TempDir& dir, const std::string& name) {
  std::string out, err;
  const std::string folder = dir.path() + "/" + name;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", folder, "--shard", "3/4"}, &out, &err), 0)
      << out << err;
  return folder;
}

TEST(SweepGuards, MergeRefusesAFolderHoldingASweepAsSweepDoes) {
  files::TempDir dir("sweep-guard");
  const std::string shard = small_shard(dir, "s3");
  const std::string held = dir.path() + "/held";
  files::create_directories(held);
  files::write_atomically(held + "/matrix.json", "{\"mine\": 1}\n");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", "--merge", shard, "--out", held}, &out, &err), 2);
  EXPECT_EQ(err, "parity sweep --merge: --out " + held +
                     ": holds a sweep already (matrix.json): merge into a new folder (a merge "
                     "never overwrites one)\n");
  EXPECT_EQ(*files::read(held + "/matrix.json"), "{\"mine\": 1}\n");
  EXPECT_FALSE(files::exists(held + "/results.jsonl"));
  // Into one of its own inputs, too.
  EXPECT_EQ(run_parity({"sweep", "--merge", shard, "--out", shard}, &out, &err), 2);
}

TEST(SweepGuards, MergeChecksItsOutputsBeforeWritingAndNamesMissingCases) {
  files::TempDir dir("sweep-guard");
  const std::string shard = small_shard(dir, "s3");
  files::write_atomically(dir.path() + "/file", "x");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", "--merge", shard, "--out", dir.path() + "/m", "--junit",
                        dir.path() + "/file/j.xml"},
                       &out, &err),
            2);
  EXPECT_NE(err.find("--junit " + dir.path() + "/file/j.xml: cannot be written"), std::string::npos)
      << err;
  EXPECT_FALSE(files::exists(dir.path() + "/m"));
  // Shard 3/4 alone misses 6 of the 8 cases: each named with its index.
  EXPECT_EQ(run_parity({"sweep", "--merge", shard, "--out", dir.path() + "/m"}, &out, &err), 1);
  EXPECT_NE(err.find("parity sweep --merge: 6 case(s) of the matrix are in none of the folders (a "
                     "shard missing or unfinished): #0 tp=1 dp=1 dtype=fp32; #1 tp=1 dp=1 "
                     "dtype=fp64; #3 tp=1 dp=2 dtype=fp64; "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("; #8 tp=2 dp=1 dtype=fp32 sp=true\n"), std::string::npos) << err;
}

TEST(SweepGuards, AResumedSweepsSecondsCoverTheEarlierInvocation) {
  files::TempDir dir("sweep-guard");
  const std::string folder = small_shard(dir, "s");
  // As if an earlier invocation had recorded the first case 1000 s after it
  // started and was then killed: its summary never written.
  const ResultsRead read = read_results(folder + "/results.jsonl");
  ASSERT_EQ(read.records.size(), 2u);
  nlohmann::ordered_json first = read.records[0];
  EXPECT_TRUE(first.at("invocation").is_string());
  first["invocation"] = "earlier:1:0:0";
  first["invocation_seconds"] = 1000.0;
  files::write_atomically(folder + "/results.jsonl", first.dump() + "\n");
  ASSERT_TRUE(files::remove_tree(folder + "/summary.json"));
  std::string out, err;
  ASSERT_EQ(
      run_parity({"sweep", kMatrix, "--out", folder, "--shard", "3/4", "--resume"}, &out, &err), 0)
      << out << err;
  EXPECT_NE(out.find("1 to run, 1 already recorded"), std::string::npos) << out;
  const nlohmann::json summary = nlohmann::json::parse(*files::read(folder + "/summary.json"));
  EXPECT_EQ(summary.at("ran"), 2);
  EXPECT_GE(summary.at("seconds").get<double>(), 1000.0) << summary.dump();
}

TEST(SweepGuards, TheResumeCommandRepeatsTheOptionsAndQuotesPaths) {
  SweepOptions o;
  o.matrix = "m.json";
  o.out = "/tmp/my sweep";
  EXPECT_EQ(resume_command(o), "parity sweep m.json --out '/tmp/my sweep' --resume");
  o.shard = 2;
  o.shards = 4;
  o.jobs = 3;
  o.shrink = true;
  o.shrink_steps = 5;
  o.junit = "it's.xml";
  o.baseline = "base";
  EXPECT_EQ(resume_command(o),
            "parity sweep m.json --out '/tmp/my sweep' --shard 2/4 --jobs 3 --shrink "
            "--shrink-steps 5 --junit 'it'\\''s.xml' --baseline base --resume");
}

}  // namespace
}  // namespace parity::sweep
