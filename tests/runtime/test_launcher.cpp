#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <thread>

#include <ATen/ATen.h>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/config/launch_mapping.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/rendezvous.h"
#include "harness/runtime/env_rank.h"
#include "harness/runtime/launcher.h"
#include "harness/runtime/self_check.h"
#include "tests/support/folder_entries.h"

namespace parity {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using Env = std::map<std::string, std::string>;
EnvReader reader_of(const Env& env) {
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

using testing::folder_entries;

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

// The first culprit; nullptr (a recorded failure) when the run did not fail
// or names no rank, so callers ASSERT on it before dereferencing.
const RankFailure* culprit(const LaunchResult& r) {
  if (r.ok() || r.failure->ranks.empty()) {
    ADD_FAILURE() << "expected a failed run naming a culprit";
    return nullptr;
  }
  const RankFailure& f = r.failure->ranks.front();
  EXPECT_FALSE(f.victim) << format_rank_failure(f);
  return &f;
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
  const RankFailure* culprit_rank = culprit(r);
  ASSERT_NE(culprit_rank, nullptr);
  const RankFailure& f = *culprit_rank;
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.kind, RankFailureKind::threw);
  const std::string line = format_rank_failure(f);
  EXPECT_EQ(
      line.rfind("rank 3 (tp=1, cp=1, dp=0) threw: injected fault: throw-rank=3; last collective: ",
                 0),
      0u)
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
  const RankFailure* culprit_rank = culprit(r);
  ASSERT_NE(culprit_rank, nullptr);
  const RankFailure& f = *culprit_rank;
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.kind, RankFailureKind::crashed);
  EXPECT_TRUE(r.results[1].is_null());
  EXPECT_TRUE(std::regex_search(format_rank_failure(f), kLastCollective)) << format_rank_failure(f);
}

TEST(Launcher, ThreadsHangIsDetectedAfterTheTimeoutAndNoThreadIsLeft) {
  RunConfig c = layout(2, 1, 2);
  c.timeout = 2;
  c.inject = {"hang-rank=2"};
  const auto start = Clock::now();
  const LaunchResult r = launch(c, kSelfCheckProgram);
  // No progress is called a hang only after the timeout (a lower bound holds
  // on any machine; how much later is up to the load).
  EXPECT_GE(seconds_since(start), c.timeout);
  const RankFailure* culprit_rank = culprit(r);
  ASSERT_NE(culprit_rank, nullptr);
  const RankFailure& f = *culprit_rank;
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.kind, RankFailureKind::hung);
  EXPECT_NE(format_rank_failure(f).find("rank 2 (tp=0, cp=0, dp=1) hung: no progress for "),
            std::string::npos)
      << format_rank_failure(f);
  // Every rank thread ended and was joined (none detached and left running).
  EXPECT_EQ(r.failure->abandoned_threads, 0);
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

// OpenMP's and MKL's thread counts are per thread: each rank thread must have
// set its own to one before its first op, or MKL's team splits a rank's GEMMs
// at run time (run-to-run digest differences seen on torch 2.11 in CI).
TEST(Launcher, EveryRankThreadRunsOneIntraOpThread) {
  using GetThreads = int (*)();
  auto threads_of = [](const char* symbol) {
    auto get = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, symbol));
    return get != nullptr ? get() : -1;
  };
  register_rank_program("test-intra-op-threads", [threads_of](RankContext&) {
    return nlohmann::json{{"omp", threads_of("omp_get_max_threads")},
                          {"mkl", threads_of("mkl_get_max_threads")}};
  });
  const LaunchResult r = launch(layout(2, 1, 2), "test-intra-op-threads");
  ASSERT_TRUE(r.ok()) << r.failure->text();
  if (threads_of("omp_get_max_threads") < 0 && threads_of("mkl_get_max_threads") < 0)
    GTEST_SKIP() << "this LibTorch links neither OpenMP nor MKL";
  for (const nlohmann::json& rank : r.results) {
    for (const char* runtime : {"omp", "mkl"}) {
      const int n = rank.at(runtime).get<int>();
      if (n >= 0) {
        EXPECT_EQ(n, 1) << runtime << " on a rank thread: " << rank.dump();
      }
    }
  }
}

TEST(Launcher, EnvModeReadsTorchrunAndSlurmVariables) {
  RunConfig c = layout(2, 1, 1, LaunchMode::env);
  Env env = {{"RANK", "1"},
             {"WORLD_SIZE", "2"},
             {"LOCAL_RANK", "1"},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", "29500"}};
  EnvRank e;
  EXPECT_TRUE(read_env_rank(c, &e, reader_of(env)).empty());
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_FALSE(e.agent_store);

  env["WORLD_SIZE"] = "3";
  std::vector<ConfigViolation> v = read_env_rank(c, &e, reader_of(env));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(format_for_cli(v[0]), "WORLD_SIZE=3: must equal tp*cp*dp = 2*1*1 = 2");

  env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  v = read_env_rank(c, &e, reader_of(env));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(format_for_cli(v[0]),
            "MASTER_ADDR: not set, nor SLURM_LAUNCH_NODE_IPADDR (--launch env needs it)");
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.world_size, 2);
  LaunchOptions options;
  options.getenv = reader_of(env);
  EXPECT_THROW(launch(c, kSelfCheckProgram, options), ConfigError);
}

TEST(Launcher, EnvModeUnderSrunTakesTheMasterFromTheLaunchNode) {
  // What `srun` sets for the second task of a two-node job (no torchrun variables).
  const Env env = {{"SLURM_PROCID", "1"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"},
                   {"SLURM_STEP_NODELIST", "node[01-02]"},
                   {"MASTER_PORT", "29411"}};
  EnvRank e;
  EXPECT_TRUE(read_env_rank(2, 1, 1, &e, reader_of(env)).empty());
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29411);
  // An exported MASTER_ADDR wins; torchrun's RANK wins over SLURM_PROCID.
  Env both = env;
  both["MASTER_ADDR"] = "10.9.9.9";
  both["RANK"] = "0";
  both["WORLD_SIZE"] = "2";
  EXPECT_TRUE(read_env_rank(2, 1, 1, &e, reader_of(both)).empty());
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.master_addr, "10.9.9.9");
  // Slurm has no port of its own to offer: say what to do.
  Env no_port = env;
  no_port.erase("MASTER_PORT");
  const std::vector<LaunchProblem> p = read_env_rank(2, 1, 1, &e, reader_of(no_port));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].field, "MASTER_PORT");
  EXPECT_NE(p[0].rule.find("export it in the batch script"), std::string::npos) << p[0].rule;
}

// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) no rank may
// bind MASTER_PORT. A LibTorch that speaks the agent's TCPStore protocol (>= 2.1)
// is its client; an older one cannot be (a 1.13 client's first query is
// discarded by torch 2.11's agent: every rank waits out its timeout), so on one
// node its ranks share a FileStore in a directory named after the run, and
// across nodes the job is refused up front with the fix.
TEST(Launcher, EnvModePicksTheStoreFromTheAgentAndTheLibTorchsProtocol) {
  const LibTorchStore old_store{false, "1.13.0"}, new_store{true, "2.11.0"};
  Env env = {{"RANK", "1"},
             {"WORLD_SIZE", "4"},
             {"LOCAL_RANK", "1"},
             {"LOCAL_WORLD_SIZE", "4"},
             {"MASTER_ADDR", "localhost"},
             {"MASTER_PORT", "41234"},
             {"TMPDIR", "/scratch"},
             {"TORCHELASTIC_RUN_ID", "job/7 a"},
             {"TORCHELASTIC_RESTART_COUNT", "2"}};
  EnvRank e;
  ASSERT_TRUE(read_env_rank(2, 1, 2, &e, reader_of(env), old_store).empty());
  EXPECT_EQ(e.store, EnvStore::master_binds);  // no agent store: rank 0 binds
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  ASSERT_TRUE(read_env_rank(2, 1, 2, &e, reader_of(env), new_store).empty());
  EXPECT_EQ(e.store, EnvStore::agent_client);
  EXPECT_EQ(e.store_prefix, "/parity/attempt_2/");
  ASSERT_TRUE(read_env_rank(2, 1, 2, &e, reader_of(env), old_store).empty());
  EXPECT_EQ(e.store, EnvStore::node_file);
  EXPECT_EQ(e.node_dir,
            "/scratch/parity-torchrun-u" + std::to_string(::getuid()) + "-job_7_a-p41234-a2");
  // Two nodes of two ranks: one line naming the versions and the fix.
  env["LOCAL_WORLD_SIZE"] = "2";
  ASSERT_TRUE(read_env_rank(2, 1, 2, &e, reader_of(env), new_store).empty());
  EXPECT_EQ(e.store, EnvStore::agent_client);
  std::vector<LaunchProblem> p = read_env_rank(2, 1, 2, &e, reader_of(env), old_store);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].field, "TORCHELASTIC_USE_AGENT_STORE");
  EXPECT_EQ(p[0].value, "True");
  EXPECT_EQ(p[0].rule,
            "across nodes (LOCAL_WORLD_SIZE=2 of WORLD_SIZE=4) parity built against LibTorch "
            "1.13.0 cannot use torchrun's store (torch >= 2.1 speaks another TCPStore "
            "protocol); run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (rank 0 then "
            "binds MASTER_PORT) or build parity against torch >= 2.1 (the torch2 preset)");
  env.erase("LOCAL_WORLD_SIZE");
  p = read_env_rank(2, 1, 2, &e, reader_of(env), old_store);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].rule.find("LOCAL_WORLD_SIZE unset"), std::string::npos) << p[0].rule;
  // torch 2.x's opt-out: the agent shares nothing and rank 0 binds MASTER_PORT.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  ASSERT_TRUE(read_env_rank(2, 1, 2, &e, reader_of(env), old_store).empty());
  EXPECT_EQ(e.store, EnvStore::master_binds);
}

// torchrun --standalone on one node, its agent emulated by a store bound to port
// 0 (the kernel's free port, no race); two env-mode ranks in two threads. With
// this build's LibTorch, the ranks use the agent's store or, where its protocol
// predates the agent's, a FileStore of their own that is gone afterwards.
TEST(Launcher, EnvModeUnderTorchrunsAgentStoreRunsOnOneNodeWithThisLibTorch) {
  const std::shared_ptr<Rendezvous> agent =
      Rendezvous::tcp("127.0.0.1", 0, 1, /*is_master=*/true, std::chrono::seconds(60));
  const std::string port = std::to_string(agent->port());
  const files::TempDir tmp("parity-test-torchrun");
  const RunConfig c = layout(2, 1, 1, LaunchMode::env);
  std::vector<LaunchResult> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      LaunchOptions options;
      options.getenv = reader_of({{"RANK", std::to_string(rank)},
                                  {"WORLD_SIZE", "2"},
                                  {"LOCAL_RANK", std::to_string(rank)},
                                  {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", port},
                                  {"TMPDIR", tmp.path()},
                                  {"TORCHELASTIC_RUN_ID", "test-run"},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                  {"TORCHELASTIC_RESTART_COUNT", "0"}});
      try {
        results[rank] = launch(c, kSelfCheckProgram, options);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  const LibTorchStore libtorch = this_libtorch_store();
  const std::string node_dir =
      tmp.path() + "/parity-torchrun-u" + std::to_string(::getuid()) + "-test-run-p" + port + "-a0";
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(errors[rank], "");
    ASSERT_TRUE(results[rank].ok()) << results[rank].failure->text();
    if (libtorch.validates_clients) {
      // The agent's own keys live in the same store: parity's are under a prefix.
      EXPECT_EQ(results[rank].rendezvous, "TCPStore 127.0.0.1:" + port +
                                              " (torchrun agent's, keys under /parity/attempt_0/)");
    } else {
      EXPECT_EQ(
          results[rank].rendezvous,
          "FileStore " + node_dir + "/store (one node; torchrun's store at 127.0.0.1:" + port +
              " unused: LibTorch " + libtorch.version + " predates torch 2.1's TCPStore protocol)");
    }
  }
  // Rank 0 gathered both results (as bytes over the world group).
  EXPECT_TRUE(self_check_passed(results[0])) << format_self_check_table(results[0]);
  EXPECT_EQ(results[0].results[1]["rank"], 1);
  // The last rank out removed the FileStore's directory.
  EXPECT_EQ(folder_entries(tmp.path()), std::vector<std::string>{});
}

// Torchrun 1.x and srun: rank 0 binds MASTER_PORT itself. A port can only be
// named before it is bound, so a port another process takes meanwhile is
// retried (the only way to test the master path without a race).
TEST(Launcher, EnvModeSingleRankBindsTheMasterPort) {
  const RunConfig c = layout(1, 1, 1, LaunchMode::env);
  LaunchResult r;
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::string port;
    {
      const std::shared_ptr<Rendezvous> probe =
          Rendezvous::tcp("127.0.0.1", 0, 1, true, std::chrono::seconds(10));
      port = std::to_string(probe->port());
    }
    LaunchOptions options;
    options.getenv = reader_of(
        {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
    r = launch(c, kSelfCheckProgram, options);
    if (r.ok() || r.failure->text().find("address in use") == std::string::npos) break;
  }
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r));
  EXPECT_NE(r.rendezvous.find("(master)"), std::string::npos) << r.rendezvous;
}

TEST(Launcher, RankProgramsGetTheSpecAndTheirOwnArguments) {
  register_rank_program("test-arguments", [](RankContext& ctx) {
    return nlohmann::json{
        {"echo", ctx.arguments}, {"tp", ctx.spec.tp}, {"transport", ctx.spec.transport}};
  });
  LaunchSpec spec;
  spec.tp = 2;
  spec.timeout_seconds = 20;
  spec.transport = "gloo";
  const nlohmann::json arguments = {{"anything", {1, 2, 3}}, {"text", "r\u00e9sultat \"quoted\""}};
  const LaunchResult r = launch(spec, "test-arguments", arguments);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.results[rank]["echo"], arguments);
    EXPECT_EQ(r.results[rank]["tp"], 2);
    EXPECT_EQ(r.results[rank]["transport"], "gloo");
  }
  // A spec without a transport is refused before any rank starts.
  spec.transport = "";
  EXPECT_THROW(launch(spec, "test-arguments", arguments), LaunchSpecError);
}

// The ep groups exist on every rank; the self-check runs its collectives and the
// uneven all_to_all on them.
TEST(Launcher, SelfCheckCoversTheExpertParallelGroups) {
  RunConfig c = layout(2, 2, 2);
  c.ep = 4;
  ASSERT_TRUE(validate_run_config(c).empty());
  EXPECT_EQ(launch_spec_from(c).ep, 4);
  EXPECT_EQ(launch_spec_from_json(launch_spec_to_json(launch_spec_from(c))).ep, 4);
  const LaunchResult r = launch(c, kSelfCheckProgram);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
  ASSERT_EQ(r.results.size(), 8u);
  // Expert tensor parallel = tp: the ep group of rank 3 holds the tp-rank-1 ranks.
  EXPECT_EQ(r.results[3]["groups"]["ep"].get<std::vector<int>>(), (std::vector<int>{1, 3, 5, 7}));
  // Without EP, results name no ep group (dense runs report what they did).
  const LaunchResult dense = launch(layout(2, 1, 1), kSelfCheckProgram);
  ASSERT_TRUE(dense.ok()) << dense.failure->text();
  EXPECT_FALSE(dense.results[0]["groups"].contains("ep"));
}

// The pipeline axis: its group's collectives and the ring's point-to-point
// batch (each stage sends to both neighbours and receives from both), with the
// table's pp columns; pp 2 makes both neighbours the same rank.
TEST(Launcher, SelfCheckCoversThePipelineGroupAndItsPointToPointRing) {
  for (int pp : {2, 4}) {
    RunConfig c = layout(2, 1, 2);
    c.pp = pp;
    const LaunchResult r = launch(c, kSelfCheckProgram);
    ASSERT_TRUE(r.ok()) << r.failure->text();
    EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
    ASSERT_EQ(r.results.size(), static_cast<std::size_t>(4 * pp));
    // Rank 5 = (tp 1, dp 0, pp 1): its stage's group is every 4th rank from 1.
    std::vector<int> group;
    for (int s = 0; s < pp; ++s) group.push_back(1 + 4 * s);
    EXPECT_EQ(r.results[5]["groups"]["pp"].get<std::vector<int>>(), group);
    EXPECT_EQ(r.results[5]["coordinates"]["pp"], 1);
    const std::string table = format_self_check_table(r);
    EXPECT_NE(table.find("pp group"), std::string::npos) << table;
    // Without PP, no pp column.
    const LaunchResult flat = launch(layout(2, 1, 1), kSelfCheckProgram);
    ASSERT_TRUE(flat.ok());
    EXPECT_EQ(format_self_check_table(flat).find("pp group"), std::string::npos);
  }
}

TEST(Launcher, AnEpThatDoesNotDivideCpTimesDpIsRefusedBeforeAnyRankStarts) {
  LaunchSpec spec = launch_spec_from(layout(1, 1, 2));
  spec.ep = 3;
  try {
    launch(spec, kSelfCheckProgram, nlohmann::json::object());
    ADD_FAILURE() << "no exception";
  } catch (const LaunchSpecError& e) {
    EXPECT_EQ(std::string(e.what()), "ep=3: must divide cp*dp = 2");
  }
}

TEST(LaunchMapping, TheTransportComesFromTheBackend) {
  const RunConfig c = layout(1, 1, 1);
  const LaunchSpec spec = launch_spec_from(c);
  EXPECT_EQ(spec.transport, std::string(make_backend(c.backend)->transport_name()));
  EXPECT_EQ(spec.transport, "gloo");  // the reference backend's
  EXPECT_EQ(launch_spec_from_json(launch_spec_to_json(spec)).transport, "gloo");
}

#ifdef PARITY_EXECUTABLE
class ProcessesMode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* t = std::getenv("TMPDIR")) old_tmpdir_ = t;
    tmp_.emplace("parity-launcher-test");
    ::setenv("TMPDIR", tmp_->path().c_str(), 1);
    options_.worker_executable = PARITY_EXECUTABLE;
  }
  void TearDown() override {
    // The launcher removed its private directory.
    EXPECT_TRUE(folder_entries(tmp_->path()).empty()) << "launcher left files in " << tmp_->path();
    if (old_tmpdir_)
      ::setenv("TMPDIR", old_tmpdir_->c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    tmp_.reset();
    EXPECT_TRUE(no_children());
  }
  LaunchOptions options_;
  std::optional<files::TempDir> tmp_;
  std::optional<std::string> old_tmpdir_;
};

TEST_F(ProcessesMode, SelfCheckFourRanks) {
  const LaunchResult r =
      launch(layout(2, 1, 2, LaunchMode::processes), kSelfCheckProgram, options_);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_EQ(r.results[3]["groups"]["dp"].get<std::vector<int>>(), (std::vector<int>{1, 3}));
}

TEST_F(ProcessesMode, SelfCheckOverExpertParallelGroups) {
  RunConfig c = layout(1, 2, 2, LaunchMode::processes);
  c.ep = 2;
  const LaunchResult r = launch(c, kSelfCheckProgram, options_);
  ASSERT_TRUE(r.ok()) << r.failure->text();
  EXPECT_TRUE(self_check_passed(r)) << format_self_check_table(r);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_EQ(r.results[3]["groups"]["ep"].get<std::vector<int>>(), (std::vector<int>{2, 3}));
}

TEST_F(ProcessesMode, CrashIsSignalAbortWithLastCollective) {
  RunConfig c = layout(2, 1, 2, LaunchMode::processes);
  c.timeout = 5;
  c.inject = {"crash-rank=1"};
  const LaunchResult r = launch(c, kSelfCheckProgram, options_);
  const RankFailure* culprit_rank = culprit(r);
  ASSERT_NE(culprit_rank, nullptr);
  const RankFailure& f = *culprit_rank;
  const std::string line = format_rank_failure(f);
  EXPECT_EQ(
      line.rfind("rank 1 (tp=1, cp=0, dp=0) crashed (signal 6 SIGABRT); last collective: ", 0), 0u)
      << line;
  EXPECT_TRUE(std::regex_search(line, kLastCollective)) << line;
}

TEST_F(ProcessesMode, HangIsDetectedAndEveryWorkerReaped) {
  RunConfig c = layout(2, 1, 1, LaunchMode::processes);
  c.timeout = 2;
  c.inject = {"hang-rank=0"};
  const LaunchResult r = launch(c, kSelfCheckProgram, options_);
  const RankFailure* culprit_rank = culprit(r);
  ASSERT_NE(culprit_rank, nullptr);
  const RankFailure& f = *culprit_rank;
  EXPECT_EQ(f.rank, 0);
  EXPECT_EQ(f.kind, RankFailureKind::hung);
}

// A worker whose result file cannot be written says so and exits non-zero
// (it ignored the failure and exited 0 before).
TEST(RankWorker, AResultThatCannotBeWrittenIsAnErrorNotASuccess) {
  const files::TempDir dir("parity-worker-test");
  LaunchSpec spec;
  spec.timeout_seconds = 20;
  spec.transport = "gloo";
  files::write_atomically(dir.path() + "/spec.json", launch_spec_to_json(spec).dump());
  files::write_atomically(dir.path() + "/arguments.json", "null");
  files::write_atomically(dir.path() + "/status", std::string(sizeof(RankStatusRecord), '\0'));
  // The result's path is a non-empty directory: the rename onto it fails.
  files::create_directories(dir.path() + "/result.0.json/occupied");
  const std::string command = std::string(PARITY_EXECUTABLE) + " __rank-worker --rank 0 --dir " +
                              dir.path() + " --program self-check 2>" + dir.path() + "/stderr";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4);
  const std::string err = files::read(dir.path() + "/stderr").value_or("");
  EXPECT_NE(err.find("rank 0: cannot write the result: "), std::string::npos) << err;
  RankStatusRecord record;
  const std::string bytes = files::read(dir.path() + "/status").value_or("");
  ASSERT_EQ(bytes.size(), sizeof record);
  std::memcpy(static_cast<void*>(&record), bytes.data(), sizeof record);
  EXPECT_EQ(RankStatus(&record).error().rfind("cannot write the result: ", 0), 0u);
}
#endif

}  // namespace
}  // namespace parity
