// The supervisor's two clocks, in threads and processes mode: progress means
// the step loop's heartbeat as well as collectives (long compute that beats is
// no hang; a rank that stops beating is one, named with its last step point),
// and after a failure it waits as long as a survivor may need to unwind
// (timeout + grace) before it gives up on a rank thread. No wall-clock upper
// bound: each wait below is a lower bound, far from the limit it tests.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/config/launch_mapping.h"
#include "harness/runtime/launcher.h"
#include "tests/runtime/rank_programs.h"
#include "tests/support/folder_entries.h"

namespace parity {
namespace {

using testing::folder_entries;

LaunchSpec spec_of(int tp, int dp, double timeout, LaunchMode mode) {
  LaunchSpec spec;
  spec.tp = tp;
  spec.dp = dp;
  spec.timeout_seconds = timeout;
  spec.transport = "gloo";
  spec.mode = mode;
  return spec;
}

// Threads and processes mode; processes-mode ranks run parity_test_worker,
// which knows the test programs. The launcher's private directory lands in a
// directory of the test's own, which must be empty again afterwards, and no
// worker may be left (running or unreaped).
class Supervisor : public ::testing::TestWithParam<LaunchMode> {
 protected:
  void SetUp() override {
    testing::register_test_rank_programs();
    if (const char* t = std::getenv("TMPDIR")) old_tmpdir_ = t;
    tmp_.emplace("parity-supervisor-test");
    ::setenv("TMPDIR", tmp_->path().c_str(), 1);
  }
  void TearDown() override {
    EXPECT_TRUE(folder_entries(tmp_->path()).empty())
        << "the launcher left files in " << tmp_->path();
    if (old_tmpdir_)
      ::setenv("TMPDIR", old_tmpdir_->c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    tmp_.reset();
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "a worker was left";
    EXPECT_EQ(errno, ECHILD);
  }
  LaunchSpec spec(int tp, int dp, double timeout) const {
    LaunchSpec s = spec_of(tp, dp, timeout, GetParam());
    s.worker_executable = PARITY_TEST_WORKER;
    return s;
  }
  LaunchOptions options() const {
    LaunchOptions o;
    o.worker_executable = PARITY_TEST_WORKER;
    return o;
  }

 private:
  std::optional<files::TempDir> tmp_;
  std::optional<std::string> old_tmpdir_;
};

// Collective-free work for 2.5 timeouts that beats every 20 ms: a run that
// only counted collectives as progress called it hung after one timeout.
TEST_P(Supervisor, LongComputeThatBeatsIsProgressNotAHang) {
  const LaunchResult r =
      launch(spec(1, 1, 2.0), "test-beating-compute", {{"seconds", 5.0}, {"beat_ms", 20}});
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_GE(r.wall_seconds, 5.0);
  EXPECT_GT(r.results[0]["beats"].get<int>(), 0);
}

// The model's own step loop beats per layer: 8 layers, each layer's forward
// 0.4 s slower (rank_programs.h), make each microbatch's forward at least
// 3.2 s without a collective (one rank), longer than the 2.5 s timeout; the
// gap between two beats stays near 0.4 s.
TEST_P(Supervisor, TheModelsStepLoopBeatsPerLayerAndMicrobatch) {
  RunConfig c;
  c.launch = GetParam();
  c.layers = 8;
  c.steps = 1;
  c.microbatches = 2;
  c.timeout = 2.5;
  ASSERT_TRUE(validate_run_config(c).empty());
  const LaunchResult r = launch(c, "test-slow-model", options());
  ASSERT_TRUE(r.ok()) << r.failure->text();
  ASSERT_EQ(r.results[0]["steps"].size(), 1u);
  EXPECT_GE(r.results[0]["steps"][0]["seconds"].get<double>(),
            2 * 8 * testing::kSlowModelSecondsPerLayer);
}

// A rank that stops beating is hung, and the report says where its step loop
// last was.
TEST_P(Supervisor, ARankThatStopsBeatingIsHungAtItsLastStepPoint) {
  const LaunchResult r = launch(spec(1, 1, 2.0), "test-stall-after-beat", nlohmann::json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_GE(r.wall_seconds, 2.0);
  const FailureReport& report = *r.failure;
  ASSERT_FALSE(report.ranks.empty());
  ASSERT_EQ(report.ranks.size(), 1u) << report.text();
  for (const RankFailure& f : report.ranks) {
    const std::string line = format_rank_failure(f);
    EXPECT_EQ(f.kind, RankFailureKind::hung) << line;
    EXPECT_EQ(f.last_step_point, "step 7, microbatch 3, layer 2 (forward)") << line;
    EXPECT_NE(line.find("; last step point: step 7, microbatch 3, layer 2 (forward)"),
              std::string::npos)
        << line;
  }
  EXPECT_FALSE(report.ranks.front().victim) << report.text();
  EXPECT_EQ(report.to_json()["ranks"][0]["last_step_point"],
            "step 7, microbatch 3, layer 2 (forward)");
}

// After rank 0 throws, the others need 7 s to end: more than the 5 s grace
// alone, less than timeout (20 s) + grace. Every rank thread is joined, none
// abandoned (a timeout read in the wrong unit gave up after the grace alone).
// Processes mode ends such workers itself: they ignore SIGTERM, the SIGKILL
// after the kill grace ends them, and every one is reaped and reported.
TEST_P(Supervisor, SurvivorsSlowerThanTheGraceAloneAreWaitedForOrKilledNeverAbandoned) {
  constexpr double kUnwind = 7.0;
  const LaunchResult r =
      launch(spec(2, 2, 20.0), "test-slow-unwind", {{"culprit", 0}, {"unwind_seconds", kUnwind}});
  ASSERT_FALSE(r.ok());
  const FailureReport& report = *r.failure;
  EXPECT_EQ(report.abandoned_threads, 0) << report.text();
  ASSERT_EQ(report.ranks.size(), 4u) << report.text();
  const RankFailure& culprit = report.ranks.front();
  EXPECT_EQ(culprit.rank, 0) << report.text();
  EXPECT_FALSE(culprit.victim) << report.text();
  EXPECT_EQ(format_rank_failure(culprit).rfind("rank 0 (tp=0, cp=0, dp=0) threw: culprit threw", 0),
            0u)
      << report.text();
  for (std::size_t i = 1; i < report.ranks.size(); ++i) {
    const RankFailure& f = report.ranks[i];
    const std::string line = format_rank_failure(f);
    EXPECT_TRUE(f.victim) << line;
    EXPECT_EQ(f.kind, RankFailureKind::stopped) << line;
    EXPECT_EQ(line.find("did not stop"), std::string::npos) << line;
    if (GetParam() == LaunchMode::processes) {
      EXPECT_NE(line.find("(signal 9 SIGKILL)"), std::string::npos) << line;
    }
  }
  // The survivors' threads really took longer than the grace alone.
  if (GetParam() == LaunchMode::threads) {
    EXPECT_GE(r.wall_seconds, kUnwind);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Supervisor,
                         ::testing::Values(LaunchMode::threads, LaunchMode::processes),
                         [](const auto& info) {
                           return std::string(launch_mode_name(info.param));
                         });

}  // namespace
}  // namespace parity
