// parity run --save-checkpoint / --resume and parity check --resume-at from the
// command line (docs/cli.md, docs/weights.md "Saving and resuming"): the
// output names the checkpoint and the step resumed at; the table continues at
// that step; bad checkpoints and options exit 2 with one line naming the
// field, the file and the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

const std::vector<std::string> kSmall = {"--hidden", "16",    "--heads", "2",        "--ffn-hidden",
                                         "32",       "--seq", "8",       "--layers", "2"};

int parity(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin() + 1, kSmall.begin(), kSmall.end());
  return testing::run_parity(std::move(args), out, err);
}

// The loss column of the table's rows, by step.
std::vector<std::pair<int, std::string>> losses(const std::string& out) {
  std::vector<std::pair<int, std::string>> rows;
  std::size_t at = out.find(" step  loss");
  while (at != std::string::npos && (at = out.find('\n', at)) != std::string::npos) {
    ++at;
    int step = -1;
    char loss[64] = {0};
    if (std::sscanf(out.c_str() + at, "%d %63s", &step, loss) != 2) break;
    rows.emplace_back(step, loss);
  }
  return rows;
}

TEST(CheckpointCommandLine, SaveThenResumeAtAnotherLayoutContinuesTheTable) {
  const files::TempDir dir("parity-checkpoint-cli");
  const std::string ck = dir.path() + "/ck";
  std::string out, err;
  ASSERT_EQ(parity({"run", "--tp", "2", "--dp", "2", "--steps", "2", "--dtype", "fp64",
                    "--save-checkpoint", ck},
                   &out, &err),
            kExitOk)
      << err;
  EXPECT_NE(out.find(", checkpoint " + ck + "/step_00000002, "), std::string::npos) << out;
  EXPECT_EQ(files::read(ck + "/latest_step.txt").value_or(""), "2\n");

  std::string whole;
  ASSERT_EQ(
      parity({"run", "--tp", "2", "--dp", "2", "--steps", "4", "--dtype", "fp64"}, &whole, &err),
      kExitOk)
      << err;
  // One rank, the same global batch (2 microbatches x dp 2 = 4 x dp 1).
  ASSERT_EQ(
      parity({"run", "--resume", ck, "--steps", "4", "--microbatches", "4", "--dtype", "fp64"},
             &out, &err),
      kExitOk)
      << err;
  EXPECT_NE(out.find("resuming from " + ck + " at step 2\n"), std::string::npos) << out;
  const auto resumed = losses(out), uninterrupted = losses(whole);
  ASSERT_EQ(resumed.size(), 2u) << out;
  ASSERT_EQ(uninterrupted.size(), 4u) << whole;
  EXPECT_EQ(resumed[0].first, 2);
  EXPECT_EQ(resumed[1].first, 3);
  // fp64, another summation order: equal to about 1e-14.
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(std::stod(resumed[static_cast<std::size_t>(i)].second),
                std::stod(uninterrupted[static_cast<std::size_t>(2 + i)].second), 1e-12)
        << "step " << 2 + i;
}

TEST(CheckpointCommandLine, BadCheckpointsAndOptionsExit2NamingTheFieldFileAndKey) {
  const files::TempDir dir("parity-checkpoint-cli");
  const std::string ck = dir.path() + "/ck";
  std::string out, err;
  ASSERT_EQ(parity({"run", "--dp", "2", "--steps", "1", "--save-checkpoint", ck}, &out, &err),
            kExitOk)
      << err;
  auto expect_bad = [&](std::vector<std::string> args, const std::string& line) {
    const int code = parity(std::move(args), &out, &err);
    EXPECT_EQ(code, kExitBadInput) << err;
    EXPECT_NE(err.find(line), std::string::npos) << err;
  };
  // --steps counts from step 0.
  expect_bad({"run", "--dp", "2", "--steps", "1", "--resume", ck},
             "--steps 1: the checkpoint is at step 1 and --steps counts from step 0");
  // The data continues only at the same global batch.
  expect_bad({"run", "--steps", "2", "--resume", ck},
             "--microbatches 2: the checkpoint's run trained on 8 sequences per step");
  // Another model: the key and both shapes.
  expect_bad({"run", "--dp", "2", "--steps", "2", "--resume", ck, "--vocab", "32"},
             "embedding.word_embeddings.weight: the checkpoint has shape [128, 16], the model "
             "expects [32, 16]");
  expect_bad({"run", "--dp", "2", "--steps", "2", "--resume", ck, "--optimizer", "adam"},
             "--optimizer adam: the checkpoint was saved by --optimizer sgd");
  // A missing rank file (rank 0 holds the main replicas under DP).
  const std::string rank0 = ck + "/step_00000001/rank00000.safetensors";
  const std::string bytes = files::read(rank0).value();
  files::remove_tree(rank0);
  expect_bad(
      {"run", "--dp", "2", "--steps", "2", "--resume", ck},
      "--resume " + ck + ": " + rank0 + ": missing (it holds embedding.word_embeddings.weight");
  files::write_atomically(rank0, bytes);
  expect_bad({"run", "--resume", dir.path(), "--steps", "2"},
             "--resume " + dir.path() + ": " + dir.path() + ": not a parity checkpoint");
  expect_bad({"run", "--save-every", "2"}, "--save-every 2: needs --save-checkpoint DIR");
  expect_bad({"run", "--resume-at", "1"}, "--resume-at 1: parity check only");
  expect_bad({"check", "--save-checkpoint", ck}, "--save-checkpoint " + ck + ": parity run only");
  expect_bad({"check", "--resume-at", "2", "--steps", "2"},
             "--resume-at 2: must be below --steps 2");
  expect_bad({"check", "--resume-at", "1", "--resume-layout", "dp=3"},
             "--resume-layout dp=3: dp 3 cannot split the global batch's 4 microbatches");
  expect_bad({"check", "--resume-at", "1", "--resume-layout", "tp=3"},
             "--resume-layout tp=3: at the resume layout, heads 2: must be divisible by tp (3)");
  expect_bad({"check", "--resume-layout", "tp=1"}, "--resume-layout tp=1: needs --resume-at K");
}

TEST(CheckpointCommandLine, CheckResumesInsideTheCheckAndReportsResumeInvariance) {
  std::string out, err;
  ASSERT_EQ(parity({"check", "--tp", "2", "--dp", "2", "--cp", "1", "--steps", "3", "--resume-at",
                    "1", "--resume-layout", "tp=1,dp=4", "--graphs", "none", "--recompute", "none",
                    "--metrics", "layer-residual-accumulator-l2"},
                   &out, &err),
            kExitOk)
      << out << err;
  EXPECT_NE(out.find("note: (r) trains 1 step(s), saves a checkpoint and resumes from it at "
                     "layout tp=1,dp=4"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("4 rank(s), then 4 from step 1"), std::string::npos) << out;
  EXPECT_NE(out.find("resume_invariance     PASS   (r) vs (b)"), std::string::npos) << out;
  // Without a resume the property says why it compared nothing and how to make it.
  ASSERT_EQ(parity({"check", "--tp", "2", "--cp", "1", "--steps", "1", "--graphs", "none",
                    "--recompute", "none", "--metrics", "layer-residual-accumulator-l2"},
                   &out, &err),
            kExitOk)
      << err;
  EXPECT_NE(out.find("resume_invariance     SKIP"), std::string::npos) << out;
  EXPECT_NE(out.find("the scenario asks for no resume"), std::string::npos) << out;
  // A fault of the resume path is resume_invariance's FAIL.
  EXPECT_EQ(parity({"check", "--tp", "2", "--dp", "2", "--cp", "1", "--steps", "2", "--resume-at",
                    "1", "--graphs", "none", "--recompute", "none", "--metrics",
                    "layer-residual-accumulator-l2", "--inject", "replica-saved-per-rank"},
                   &out, &err),
            kExitPropertyFailed);
  EXPECT_NE(err.find("parity check: resume_invariance FAILED: (r) step 1 loss: "),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace parity::cli
