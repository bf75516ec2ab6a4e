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

TEST(SweepCommand, AFolderThatCannotBeWrittenExits2BeforeAnyCase) {
  files::TempDir dir("sweep-cmd");
  files::write_atomically(dir.path() + "/file", "x");
  std::string out, err;
  EXPECT_EQ(run_parity({"sweep", kMatrix, "--out", dir.path() + "/file/sweep"}, &out, &err), 2);
  EXPECT_EQ(err, "parity sweep: --out " + dir.path() +
                     "/file/sweep: cannot be written: cannot create directory " + dir.path() +
                     "/file/sweep: Not a directory (output paths are checked before any case "
                     "runs)\n");
  EXPECT_EQ(out, "");  // not even the header: nothing ran
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

// The typed cause (run, rank, coordinates, kind, last collective) reaches the
// record, the failure file, the table, the CSV and JUnit's error message.
TEST(SweepCommand, ARankFailureCarriesItsCauseIntoEveryOutput) {
  files::TempDir dir("sweep-cmd");
  const std::string matrix = dir.path() + "/m.json";
  files::write_atomically(matrix, R"({"axes": {"inject": [["throw-rank=1"], ["crash-rank=0"]]},
      "base": {"tp": 2, "layers": 1, "steps": 1, "hidden": 8, "heads": 2, "ffn-hidden": 16,
               "seq": 4, "vocab": 16, "micro-batch": 1, "microbatches": 1, "timeout": 5}})");
  std::string out, err;
  ASSERT_EQ(
      run_parity({"sweep", matrix, "--out", dir.path() + "/s", "--junit", dir.path() + "/j.xml"},
                 &out, &err),
      1)
      << out << err;
  const ResultsRead r = read_results(dir.path() + "/s/results.jsonl");
  ASSERT_EQ(r.records.size(), 2u);
  const nlohmann::ordered_json& threw = r.records[0];
  EXPECT_EQ(threw.at("outcome"), "rank_failure");
  // The failure text keeps its lines (the headline, then one per rank).
  const std::string failure = threw.at("failure").get<std::string>();
  EXPECT_EQ(failure.rfind("parity check: run (a) scenario as given failed:\nrun failed: ", 0), 0u)
      << failure;
  EXPECT_NE(failure.find("\n  rank 1 (tp=1, cp=0, dp=0) threw: injected fault"), std::string::npos)
      << failure;
  const nlohmann::ordered_json& cause = threw.at("cause");
  EXPECT_EQ(cause.at("run"), "a");
  EXPECT_EQ(cause.at("run_title"), "scenario as given");
  EXPECT_EQ(cause.at("kind"), "threw");
  EXPECT_EQ(cause.at("rank"), 1);
  EXPECT_EQ(cause.at("coordinates"), nlohmann::ordered_json({{"tp", 1}, {"cp", 0}, {"dp", 0}}));
  EXPECT_EQ(cause.at("victim"), false);
  EXPECT_NE(cause.at("detail").get<std::string>().find("injected fault"), std::string::npos);
  EXPECT_TRUE(cause.at("last_collective").is_string());
  EXPECT_EQ(cause.at("line").get<std::string>().rfind("rank 1 (tp=1, cp=0, dp=0) threw: ", 0), 0u);
  EXPECT_EQ(r.records[1].at("cause").at("kind"), "crashed");
  EXPECT_EQ(r.records[1].at("cause").at("rank"), 0);

  const std::string file = threw.at("failure_file").get<std::string>();
  const nlohmann::json saved = nlohmann::json::parse(*files::read(dir.path() + "/s/" + file));
  EXPECT_FALSE(saved.contains("expect"));  // no properties were evaluated
  EXPECT_EQ(saved.at("about").at("outcome"), "rank_failure");
  EXPECT_EQ(saved.at("about").at("cause").at("kind"), "threw");

  const std::string line =
      "run (a) scenario as given: rank 1 (tp=1, cp=0, dp=0) threw: injected fault";
  EXPECT_NE(out.find("  FAILED inject=throw-rank=1: rank_failure (" + line), std::string::npos)
      << out;
  EXPECT_NE(
      out.find(": rank_failure (run (a) scenario as given: rank 0 (tp=0, cp=0, dp=0) crashed"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("rank failures          2"), std::string::npos) << out;
  const std::string csv = *files::read(dir.path() + "/s/results.csv");
  EXPECT_NE(csv.find(",outcome,seconds,worst_property,cause\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",rank_failure,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",\"" + line), std::string::npos) << csv;  // quoted: it holds commas
  const std::string junit = *files::read(dir.path() + "/j.xml");
  EXPECT_NE(junit.find("errors=\"2\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<error message=\"" + line), std::string::npos) << junit;
}

}  // namespace
}  // namespace parity::sweep
