// `parity sweep` through run_command_line: option errors (exit 2, one line),
// a folder that holds a sweep already, a folder that cannot be written (exit
// 3), and one tiny case end to end in this process.
#include <gtest/gtest.h>

#include "harness/base/files.h"
#include "harness/sweep/results.h"
#include "tests/support/command_line.h"

namespace parity::sweep {
namespace {

using parity::testing::run_parity;

const std::string kMatrix = PARITY_SOURCE_DIR "/tests/sweep/small.json";

TEST(SweepCommand, BadOptionsExit2WithOneLine) {
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", "/tmp/x", "--shard", "0/2"}, &out, &err), 2);
  EXPECT_EQ(err, "--shard 0/2: must be K/N with integers 1 <= K <= N (e.g. 2/4)\n");
  EXPECT_EQ(run_parity({"sweep", "--out", "/tmp/x"}, &out, &err), 2);
  EXPECT_EQ(err, "parity sweep: a MATRIX.json, or --merge DIR... (see parity sweep --help)\n");
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", "/tmp/x", "--jobs", "0"}, &out, &err), 2);
  EXPECT_NE(err.find("--jobs: 0: must be an integer in [1, 1000000]"), std::string::npos) << err;
  EXPECT_EQ(run_parity({"sweep", kMatrix}, &out, &err), 2);
  EXPECT_NE(err.find("--out is required"), std::string::npos) << err;
  EXPECT_EQ(run_parity({"sweep", "--merge", "a", "b", "--out", "c", "--resume"}, &out, &err), 2);
  EXPECT_EQ(err,
            "--merge: combines finished folders: --resume, --shard and --shrink apply to running "
            "a matrix\n");
}

TEST(SweepCommand, AFolderHoldingASweepNeedsResume) {
  files::TempDir dir("sweep-cmd");
  files::write_atomically(dir.path() + "/matrix.json", "{}");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path()}, &out, &err), 2);
  EXPECT_EQ(err, "parity sweep: --out " + dir.path() +
                     ": holds a sweep already (matrix.json): pass --resume to continue it, or "
                     "another folder\n");
}

TEST(SweepCommand, AFolderThatCannotBeWrittenExits3) {
  files::TempDir dir("sweep-cmd");
  files::write_atomically(dir.path() + "/file", "x");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path() + "/file/sweep"}, &out, &err), 3);
  EXPECT_EQ(err.rfind("parity sweep: ", 0), 0u) << err;
}

TEST(SweepCommand, RunsTheCasesOfItsShardAndRecordsThem) {
  files::TempDir dir("sweep-cmd");
  std::string out, err;
  // Shard 3/4 of small.json: indices 2 and 6 (7 is excluded; 8, the include, is in 1/4).
  ASSERT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path(), "--shard", "3/4"}, &out, &err), 0)
      << out << err;
  const ResultsRead r = read_results(dir.path() + "/results.jsonl");
  ASSERT_EQ(r.records.size(), 2u) << out;
  EXPECT_EQ(r.records[0].at("case"), "tp=1 dp=2 dtype=fp32");
  EXPECT_EQ(r.records[0].at("outcome"), "passed");
  EXPECT_EQ(r.records[1].at("index"), 6);
  EXPECT_EQ(r.records[0].at("report").at("schema"), "parity-check-report");
  EXPECT_NE(out.find("[2/2] 0 failed"), std::string::npos) << out;
  EXPECT_TRUE(files::exists(dir.path() + "/summary.json"));
  EXPECT_TRUE(files::exists(dir.path() + "/results.csv"));
}

TEST(SweepCommand, ARankFailureIsACaseFailureWithAnErrorInJunit) {
  files::TempDir dir("sweep-cmd");
  const std::string matrix = dir.path() + "/m.json";
  files::write_atomically(matrix, R"({"axes": {"dtype": ["fp32"]},
      "base": {"tp": 2, "layers": 1, "steps": 1, "hidden": 8, "heads": 2, "ffn-hidden": 16,
               "seq": 4, "vocab": 16, "micro-batch": 1, "microbatches": 1,
               "inject": ["throw-rank=1"], "timeout": 5}})");
  std::string out, err;
  ASSERT_EQ(
      run_parity({"sweep", matrix, "--out", dir.path() + "/s", "--junit", dir.path() + "/j.xml"},
                 &out, &err),
      1)
      << out << err;
  const ResultsRead r = read_results(dir.path() + "/s/results.jsonl");
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].at("outcome"), "rank_failure");
  EXPECT_NE(r.records[0].at("failure").get<std::string>().find("threw: injected fault"),
            std::string::npos)
      << r.records[0].at("failure");
  const std::string file = r.records[0].at("failure_file").get<std::string>();
  const nlohmann::json saved = nlohmann::json::parse(*files::read(dir.path() + "/s/" + file));
  EXPECT_FALSE(saved.contains("expect"));  // no properties were evaluated
  EXPECT_EQ(saved.at("about").at("outcome"), "rank_failure");
  const std::string junit = *files::read(dir.path() + "/j.xml");
  EXPECT_NE(junit.find("errors=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<error message=\"parity check: run (a)"), std::string::npos) << junit;
  EXPECT_NE(out.find("rank failures          1"), std::string::npos) << out;
}

}  // namespace
}  // namespace parity::sweep
