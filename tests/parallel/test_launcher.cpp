#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <ATen/ATen.h>

#include "harness/parallel/communicator.h"
#include "harness/runtime/launcher.h"
#include "harness/runtime/self_check.h"

namespace parity {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// No child process of this test is left (none running, none unreaped).
bool no_children() {
  const pid_t got = ::waitpid(-1, nullptr, WNOHANG);
  return got == -1 && errno == ECHILD;
}

RunConfig layout(int tp, int cp, int dp, LaunchMode mode = LaunchMode::threads) {
  RunConfig c;
  c.tp = tp;
  c.cp = cp;
  c.dp = dp;
  c.launch = mode;
  c.timeout = 20;
  EXPECT_TRUE(validate_run_config(c).empty());
  return c;
}

const RankFailure& culprit(const LaunchResult& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.failure->ranks.empty());
  EXPECT_FALSE(r.failure->ranks.front().victim);
  return r.failure->ranks.front();
}

const std::regex kLastCollective(
    R"(last collective: (all_reduce|all_gather|reduce_scatter|broadcast|barrier)[^;]* on (tp|cp|dp|world)[^;]*#[0-9]+$)");

TEST(Launcher, ThreadsSelfCheckEightRanks) {
  const auto start = Clock::now();
  const LaunchResult r = launch(layout(2, 2, 2), kSelfCheckProgram);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
  ASSERT_EQ(r.results.size(), 8u);
  const ParallelTopology t(2, 2, 2);
  for (int rank = 0; rank < 8; ++rank) {
    const nlohmann::json& j = r.results[rank];
    EXPECT_EQ(j["rank"], rank);
    EXPECT_EQ(j["groups"]["tp"].get<std::vector<int>>(), t.group_ranks(rank, Axis::tp));
    EXPECT_EQ(j["groups"]["cp"].get<std::vector<int>>(), t.group_ranks(rank, Axis::cp));
    EXPECT_EQ(j["groups"]["dp"].get<std::vector<int>>(), t.group_ranks(rank, Axis::dp));
    EXPECT_EQ(j["failures"].size(), 0u) << j.dump();
    EXPECT_GT(j["checks"].get<int>(), 30);
  }
  RecordProperty("wall_seconds", std::to_string(seconds_since(start)));
}

TEST(Launcher, ThreadsThrowNamesRankCoordinatesAndLastCollective) {
  RunConfig c = layout(2, 2, 1);
  c.inject = {"throw-rank=3"};
  const LaunchResult r = launch(c, kSelfCheckProgram);
  const RankFailure& f = culprit(r);
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.kind, RankFailureKind::threw);
  const std::string line = format_rank_failure(f);
  EXPECT_EQ(line.rfind("rank 3 (tp=1, cp=1, dp=0) threw: injected fault: throw-rank=3; last collective: ", 0), 0u)
      << line;
  EXPECT_TRUE(std::regex_search(line, kLastCollective)) << line;
  for (std::size_t i = 1; i < r.failure->ranks.size(); ++i)
    EXPECT_TRUE(r.failure->ranks[i].victim) << format_rank_failure(r.failure->ranks[i]);
  EXPECT_NE(r.failure->headline().find("rank 3 threw"), std::string::npos);
}

TEST(Launcher, ThreadsCrashIsReportedAsCrashed) {
  RunConfig c = layout(2, 1, 2);
  c.inject = {"crash-rank=1"};
  const LaunchResult r = launch(c, kSelfCheckProgram);
  const RankFailure& f = culprit(r);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.kind, RankFailureKind::crashed);
  EXPECT_TRUE(r.results[1].is_null());
  EXPECT_TRUE(std::regex_search(format_rank_failure(f), kLastCollective)) << format_rank_failure(f);
}

TEST(Launcher, ThreadsHangEndsWithinTwiceTheTimeoutAndLeavesNoThread) {
  // Warm up: the first launch starts ATen's and Gloo's lazily created threads.
  ASSERT_TRUE(launch(layout(2, 1, 2), kSelfCheckProgram).ok());
  const int threads_before = thread_count();
  RunConfig c = layout(2, 1, 2);
  c.timeout = 2;
  c.inject = {"hang-rank=2"};
  const auto start = Clock::now();
  const LaunchResult r = launch(c, kSelfCheckProgram);
  const double elapsed = seconds_since(start);
  EXPECT_LT(elapsed, 2 * c.timeout) << r.failure->text();
  EXPECT_GE(elapsed, 0.9 * c.timeout);
  const RankFailure& f = culprit(r);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.kind, RankFailureKind::hung);
  EXPECT_NE(format_rank_failure(f).find("rank 2 (tp=0, cp=0, dp=1) hung: no progress for "),
            std::string::npos)
      << format_rank_failure(f);
  EXPECT_EQ(r.failure->abandoned_threads, 0);
  EXPECT_EQ(thread_count(), threads_before);
}

TEST(Launcher, FingerprintMismatchNamesBothRanks) {
  register_rank_program("test-mismatch", [](RankContext& ctx) {
    // Rank 1 sends a different shape: without fingerprints this would be
    // undefined; with them it fails at once.
    const at::Tensor t = at::ones({ctx.rank == 1 ? 3 : 2}, at::kFloat);
    ctx.group(Axis::world).all_reduce(t, ReduceOp::sum);
    return nlohmann::json{{"ok", true}};
  });
  RunConfig c = layout(2, 1, 1);
  c.check_collectives = true;
  const LaunchResult r = launch(c, "test-mismatch");
  ASSERT_FALSE(r.ok());
  const std::string text = r.failure->text();
  EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
  for (const RankFailure& f : r.failure->ranks) EXPECT_FALSE(f.victim) << text;
}

TEST(Launcher, RegisteredProgramsAndUnknownNames) {
  register_rank_program("test-coords", [](RankContext& ctx) {
    return nlohmann::json{{"tp", ctx.coordinates.tp}, {"dp", ctx.coordinates.dp}};
  });
  const LaunchResult r = launch(layout(2, 1, 2), "test-coords");
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_EQ(r.results[3], (nlohmann::json{{"tp", 1}, {"dp", 1}}));
  EXPECT_THROW(launch(layout(1, 1, 1), "no-such-program"), std::invalid_argument);
}

TEST(Launcher, EnvModeReadsTorchrunAndSlurmVariables) {
  RunConfig c = layout(2, 1, 1, LaunchMode::env);
  std::map<std::string, std::string> env = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"}};
  auto getenv = [&](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  EnvRank e;
  EXPECT_TRUE(read_env_rank(c, &e, getenv).empty());
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, "torchrun");

  env["WORLD_SIZE"] = "3";
  std::vector<ConfigViolation> v = read_env_rank(c, &e, getenv);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(format_for_cli(v[0]), "WORLD_SIZE=3: must equal tp*cp*dp = 2*1*1 = 2");

  env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  v = read_env_rank(c, &e, getenv);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(format_for_cli(v[0]), "MASTER_ADDR: not set (--launch env needs it)");
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.world_size, 2);
  LaunchOptions options;
  options.getenv = getenv;
  EXPECT_THROW(launch(c, kSelfCheckProgram, options), ConfigError);
}

TEST(Launcher, EnvModeSingleRankOverTcpStore) {
  RunConfig c = layout(1, 1, 1, LaunchMode::env);
  LaunchOptions options;
  // The master binds; a port taken meanwhile would fail loudly, not hang.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ::close(fd);
  options.getenv = [port](const std::string& k) -> std::optional<std::string> {
    if (k == "RANK") return "0";
    if (k == "WORLD_SIZE") return "1";
    if (k == "MASTER_ADDR") return "127.0.0.1";
    if (k == "MASTER_PORT") return port;
    return std::nullopt;
  };
  const LaunchResult r = launch(c, kSelfCheckProgram, options);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r));
}

#ifdef PARITY_EXECUTABLE
class ProcessesMode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* t = std::getenv("TMPDIR")) old_tmpdir_ = t;
    tmp_ = fs::temp_directory_path() / ("parity-launcher-test-" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
    ::setenv("TMPDIR", tmp_.c_str(), 1);
    options_.worker_executable = PARITY_EXECUTABLE;
  }
  void TearDown() override {
    // The launcher removed its private directory.
    EXPECT_TRUE(fs::is_empty(tmp_)) << "launcher left files in " << tmp_;
    fs::remove_all(tmp_);
    if (old_tmpdir_) ::setenv("TMPDIR", old_tmpdir_->c_str(), 1);
    else ::unsetenv("TMPDIR");
    EXPECT_TRUE(no_children());
  }
  LaunchOptions options_;
  fs::path tmp_;
  std::optional<std::string> old_tmpdir_;
};

TEST_F(ProcessesMode, SelfCheckFourRanks) {
  const LaunchResult r = launch(layout(2, 1, 2, LaunchMode::processes), kSelfCheckProgram, options_);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_EQ(r.results[3]["groups"]["dp"].get<std::vector<int>>(), (std::vector<int>{1, 3}));
}

TEST_F(ProcessesMode, CrashIsSignalAbortWithLastCollective) {
  RunConfig c = layout(2, 1, 2, LaunchMode::processes);
  c.timeout = 5;
  c.inject = {"crash-rank=1"};
  const auto start = Clock::now();
  const LaunchResult r = launch(c, kSelfCheckProgram, options_);
  EXPECT_LT(seconds_since(start), 15.0);
  const RankFailure& f = culprit(r);
  const std::string line = format_rank_failure(f);
  EXPECT_EQ(line.rfind("rank 1 (tp=1, cp=0, dp=0) crashed (signal 6 SIGABRT); last collective: ", 0), 0u)
      << line;
  EXPECT_TRUE(std::regex_search(line, kLastCollective)) << line;
}

TEST_F(ProcessesMode, HangIsDetectedAndEveryWorkerReaped) {
  RunConfig c = layout(2, 1, 1, LaunchMode::processes);
  c.timeout = 2;
  c.inject = {"hang-rank=0"};
  const LaunchResult r = launch(c, kSelfCheckProgram, options_);
  const RankFailure& f = culprit(r);
  EXPECT_EQ(f.rank, 0);
  EXPECT_EQ(f.kind, RankFailureKind::hung);
}
#endif

}  // namespace
}  // namespace parity
