// What parity refuses before any rank starts (exit 2, one line): outputs that
// cannot be written, a baseline from another scenario, a model that cannot fit
// in memory, a file of the wrong kind. None of these may cost a run first.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/base/files.h"
#include "harness/config/memory_estimate.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

using testing::run_parity;

// A path under a regular file: not writable for anyone, root included.
std::string unwritable(const files::TempDir& dir, const std::string& name) {
  files::write_atomically(dir.path() + "/plain-file", "x");
  return dir.path() + "/plain-file/" + name;
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(UpFrontChecks, AnUnwritableOutputIsRefusedBeforeTheFirstRun) {
  const files::TempDir dir("parity-outputs");
  std::string out, err;
  EXPECT_EQ(run_parity({"check", "--report", unwritable(dir, "r.json")}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("--report " + unwritable(dir, "r.json") + ": "), std::string::npos) << err;
  EXPECT_EQ(lines(err), 1) << err;
  EXPECT_EQ(out.find("run (a)"), std::string::npos) << "a run started first:\n" << out;
  EXPECT_EQ(out.find("check "), std::string::npos) << "a verdict was printed:\n" << out;

  EXPECT_EQ(run_parity({"run", "--trace", unwritable(dir, "t.jsonl")}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("--trace"), std::string::npos) << err;
  EXPECT_EQ(out.find("step"), std::string::npos) << out;

  // A folder that exists but takes no new file (root included: /proc).
  EXPECT_EQ(run_parity({"run", "--report", "/proc/parity-r.json"}, &out, &err), kExitBadInput);
  EXPECT_NE(
      err.find("--report /proc/parity-r.json: cannot be written: cannot create a file in /proc"),
      std::string::npos)
      << err;

  EXPECT_EQ(run_parity({"run", "--report", dir.path()}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("cannot be written: it is a folder"), std::string::npos) << err;

  EXPECT_EQ(run_parity({"run", "--dump", dir.path() + "/plain-file"}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("--dump " + dir.path() + "/plain-file: cannot be written: it is a file"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_parity({"run", "--dump", unwritable(dir, "d")}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("--dump"), std::string::npos) << err;

  EXPECT_EQ(
      run_parity({"mutants", "--fault", "sqrt-before-sum", "--report", unwritable(dir, "m.json")},
                 &out, &err),
      kExitBadInput);
  EXPECT_NE(err.find("--report " + unwritable(dir, "m.json") + ": cannot be written"),
            std::string::npos)
      << err;
  EXPECT_EQ(out.find("caught"), std::string::npos) << out;
}

TEST(UpFrontChecks, AWritableOutputLeavesNoProbeBehind) {
  const files::TempDir dir("parity-outputs");
  EXPECT_EQ(files::why_not_writable(dir.path() + "/r.json"), "");
  EXPECT_FALSE(files::exists(dir.path() + "/r.json"));
  std::string out, err;
  ASSERT_EQ(run_parity({"run", "--steps", "1", "--report", dir.path() + "/r.json"}, &out, &err),
            kExitOk)
      << err;
  // Only the report: no probe file was left beside it.
  EXPECT_TRUE(files::exists(dir.path() + "/r.json"));
  const files::TempDir empty("parity-outputs");
  EXPECT_EQ(files::why_not_writable(empty.path() + "/x"), "");
}

TEST(UpFrontChecks, ABaselineFromAnotherScenarioIsRefusedUpFront) {
  std::string out, err;
  // The baseline is the fp64 default scenario at tp 2; this is the fp32 one.
  EXPECT_EQ(run_parity({"check", "--baseline", PARITY_SOURCE_DIR "/tests/cli/baseline-fp64.json"},
                       &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("made from another scenario"), std::string::npos) << err;
  // The embedded default is tp 2 x cp 2 x dp 2; the baseline's scenario has cp 1.
  EXPECT_NE(err.find("cp is 1 there, 2 here (and "), std::string::npos) << err;
  EXPECT_EQ(lines(err), 1) << err;
  EXPECT_EQ(out.find("run (a)"), std::string::npos) << out;
}

TEST(UpFrontChecks, AModelThatCannotFitIsRefusedNamingTheEstimateAndTheLimit) {
  RunConfig c;
  c.hidden = 1000000;
  c.ffn_hidden = 4000000;
  const auto v = check_memory(c, 1, false, 24.0 * (1ull << 30));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "ffn-hidden");
  EXPECT_NE(v[0].rule.find("needs at least"), std::string::npos) << v[0].rule;
  EXPECT_NE(v[0].rule.find("24.0 GB available"), std::string::npos) << v[0].rule;
  // The default scenario fits easily, sharded or on one rank.
  EXPECT_TRUE(check_memory(RunConfig{}, 8, true, 1.0 * (1ull << 30)).empty());
  // Sharding divides what each rank holds.
  RunConfig wide;
  wide.hidden = 4096;
  wide.ffn_hidden = 16384;
  wide.heads = 32;
  RunConfig sharded = wide;
  sharded.tp = 4;
  EXPECT_LT(estimate_rank_memory(sharded).parameters, estimate_rank_memory(wide).parameters / 3.9);
  // Grouped-query attention shrinks linear_qkv: with 8 groups of 32 heads its
  // keys and values are 2 * 8/32 h wide instead of 2 h, 1.5 h^2 fewer weights
  // (and gradients) per layer.
  RunConfig grouped = wide;
  grouped.num_query_groups = 8;
  const double saved = 2 * 4 * 1.5 * 4096.0 * 4096.0 * wide.layers;  // 2 x fp32 bytes x ...
  EXPECT_DOUBLE_EQ(estimate_rank_memory(wide).parameters - estimate_rank_memory(grouped).parameters,
                   saved);
  // Twice the head dimension (--kv-channels 256, not 4096 / 32) doubles both
  // attention weights: 4 h^2 more per layer.
  RunConfig wider_heads = wide;
  wider_heads.kv_channels = 256;
  EXPECT_DOUBLE_EQ(
      estimate_rank_memory(wider_heads).parameters - estimate_rank_memory(wide).parameters,
      2 * 4 * 4 * 4096.0 * 4096.0 * wide.layers);
  // Routed experts over an expert TP size of their own (--etp 1 under tp 4):
  // each rank holds its experts whole, 4 times the weights of tp 4's pieces.
  RunConfig moe = sharded;
  moe.moe_experts = 8;
  moe.ep = 1;
  RunConfig whole_experts = moe;
  whole_experts.etp = 1;
  const double expert = (16384.0 + 16384.0) * 4096.0;  // fc1 + fc2 of one expert (gelu)
  EXPECT_DOUBLE_EQ(
      estimate_rank_memory(whole_experts).parameters - estimate_rank_memory(moe).parameters,
      2 * 4 * 8 * expert * (1 - 1.0 / 4) * wide.layers);

  std::string out, err;
  EXPECT_EQ(run_parity({"run", "--hidden", "1000000", "--ffn-hidden", "4000000"}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("--ffn-hidden 4000000: the run needs at least"), std::string::npos) << err;
  EXPECT_EQ(err.find("frame #"), std::string::npos) << err;
  EXPECT_EQ(lines(err), 1) << err;
}

TEST(UpFrontChecks, AFolderOrAForeignFileGivenAsJsonSaysWhatItIs) {
  const files::TempDir dir("parity-kinds");
  std::string out, err;
  EXPECT_EQ(run_parity({"check", dir.path()}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find(dir.path() + ": it is a folder, not a file (expected a JSON scenario file)"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_parity({"repro", dir.path()}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("it is a folder, not a file"), std::string::npos) << err;
  EXPECT_EQ(run_parity({"check", "--baseline", dir.path()}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("it is a folder, not a file (expected a parity check --report JSON)"),
            std::string::npos)
      << err;
  files::write_atomically(dir.path() + "/w.pt", std::string("PK\x03\x04rest", 8));
  EXPECT_EQ(run_parity({"check", dir.path() + "/w.pt"}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("w.pt: a zip archive (torch.save), expected a JSON scenario file"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_parity({"check", "--baseline", dir.path() + "/w.pt"}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("a zip archive (torch.save), expected a parity check --report JSON"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace parity::cli
