// The scenario properties of contract.md section 5 over generated scenarios
// (scenarios/generators.h): each generates a scenario, runs parity check on it
// (execute_check: the same runs and evaluation as `parity check`) and asserts
// its property is PASS or SKIP (the SKIP share is tagged, so a vacuous run
// shows). Case counts: a per-test default that RC_PARAMS's max_success
// overrides; PARITY_SAVE_FAILURES=DIR saves the shrunk scenario.
// docs/property-suite.md.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "harness/base/files.h"
#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/cli/cli.h"
#include "harness/config/model_mapping.h"
#include "harness/config/resume_layout.h"
#include "harness/graphs/graph_scope.h"
#include "harness/model/pipeline_layout.h"
#include "harness/model/sequence_packing.h"
#include "scenarios/generators.h"
#include "scenarios/quiet_listener.h"

namespace parity {
namespace {

LaunchOptions launch_options() {
  LaunchOptions o;
#ifdef PARITY_EXECUTABLE
  o.worker_executable = PARITY_EXECUTABLE;  // processes-mode rank workers
#endif
  return o;
}

// RC_PARAMS's settings, with `default_cases` unless RC_PARAMS names max_success.
rc::detail::TestParams params_with_default(int default_cases) {
  rc::detail::TestParams p = rc::detail::configuration().testParams;
  const char* env = std::getenv("RC_PARAMS");
  if (!env || std::string(env).find("max_success") == std::string::npos)
    p.maxSuccess = default_cases;
  return p;
}

struct Failure {
  RunConfig scenario;
  std::string reason;
};

void save_failure(const std::string& property, const Failure& f, const std::string& reproduce) {
  const char* dir = std::getenv("PARITY_SAVE_FAILURES");
  if (!dir || !*dir) return;
  files::create_directories(dir);
  checks::ScenarioMeta meta;
  meta.about = {{"property", property}, {"reason", f.reason}};
  if (!reproduce.empty()) meta.about["reproduce"] = "RC_PARAMS=\"" + reproduce + "\"";
  files::write_atomically(std::string(dir) + "/" + property + ".json",
                          checks::scenario_file_json(f.scenario, meta).dump(2) + "\n");
}

struct SearchOptions {
  int default_cases = 25;
  std::vector<std::string> inject;  // tests of the suite itself inject a fault
  int shrink_steps = 0;             // > 0: candidates past this many shrink steps count as passing
  // The failure is the point (a test of the suite itself): rapidcheck's exit
  // note ("Some of your RapidCheck properties had failures") must not follow
  // a passing binary, so the search reports to a quiet listener.
  bool failure_expected = false;
  // What draws the scenarios: every kind, or only pipelined ones.
  rc::Gen<RunConfig> (*generator)() = scenarios::gen_scenario;
};

// Checks `property` over generated scenarios ("" = every property the check
// evaluates): rapidcheck as RC_GTEST_PROP would, with the per-test default case
// count. Returns "" when it holds, else
// rapidcheck's message, the shrunk scenario (JSON) and the reproduce string;
// saves the scenario when PARITY_SAVE_FAILURES is set.
std::string search_property(const std::string& property, const SearchOptions& options) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_case_name()) + "/" + info->name();
  metadata.description = info->name();
  Failure last;  // the last failing evaluation: after shrinking, the minimal one
  bool failed_once = false;
  int shrink_steps = 0;  // a count, not a time: the shrunk case is the same on every run
  const rc::detail::Property checked = rc::detail::toProperty([&] {
    RunConfig scenario = *options.generator();
    if (failed_once && options.shrink_steps > 0 && ++shrink_steps > options.shrink_steps) return;
    scenario.inject = options.inject;
    const checks::CheckOutcome outcome =
        checks::execute_check(scenario, "generated", launch_options());
    std::string reason;
    if (outcome.verdict == checks::CheckVerdict::rank_failure) {
      reason = "rank failure: " + outcome.failure;
    } else if (property.empty()) {
      for (const checks::PropertyResult& p : outcome.report.properties) {
        RC_TAG(p.name + " " + std::string(checks::to_string(p.status)));
        if (p.status == checks::Status::fail)
          reason += (reason.empty() ? "" : "; ") + p.name + ": " + p.reason;
      }
    } else if (const checks::PropertyResult* p = outcome.property(property)) {
      RC_TAG(std::string(checks::to_string(p->status)));
      if (p->status == checks::Status::fail) reason = p->reason;
    } else {
      reason = "not evaluated (another property's failure ended the check)";
    }
    if (!reason.empty()) {
      failed_once = true;
      last = {scenario, reason};
      save_failure(property.empty() ? "every-property" : property, last, "");
      RC_FAIL((property.empty() ? std::string("a property") : property) + " FAILED: " + reason);
    }
  });
  const rc::detail::TestParams params = params_with_default(options.default_cases);
  scenarios::QuietListener quiet;
  const rc::detail::TestResult result =
      options.failure_expected ? rc::detail::checkProperty(checked, metadata, params, quiet,
                                                           rc::detail::configuration().reproduce)
                               : rc::detail::checkProperty(checked, metadata, params);
  if (result.template is<rc::detail::SuccessResult>()) {
    rc::detail::printResultMessage(result, std::cout);
    std::cout << std::endl;
    return "";
  }
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  if (result.template is<rc::detail::FailureResult>()) {
    rc::detail::Configuration config;
    config.reproduce[metadata.id] = result.template get<rc::detail::FailureResult>().reproduce;
    const std::string reproduce = rc::detail::configToMinimalString(config);
    save_failure(property.empty() ? "every-property" : property, last, reproduce);
    message << "\nshrunk scenario: " << checks::scenario_file_json(last.scenario).dump()
            << "\nreproduce: RC_PARAMS=\"" << reproduce << "\"";
  }
  return message.str();
}

// Per-test default case counts: the whole `property` label within 5 minutes on
// 2 cores (docs/property-suite.md); RC_PARAMS=max_success=N runs deeper.
constexpr int kCases = 40;

RC_GTEST_PROP(ScenarioGenerators, EveryScenarioIsValid, ()) {
  const RunConfig scenario = *scenarios::gen_scenario();
  const std::vector<ConfigViolation> v = checks::validate_check_scenario(scenario);
  RC_ASSERT(v.empty());
  RC_ASSERT(scenario.world_size() <= 16);
  RC_ASSERT(!scenario.metrics.empty());
  RC_ASSERT(scenario.launch != LaunchMode::processes || scenario.world_size() <= 2);
  RC_TAG(std::string(to_string(scenario.graphs)),
         std::string(to_string(scenario.recompute_spec().kind)));
}

RC_GTEST_PROP(ScenarioGenerators, EveryPipelineScenarioIsValid, ()) {
  const RunConfig scenario = *scenarios::gen_pipeline_scenario();
  const std::vector<ConfigViolation> v = checks::validate_check_scenario(scenario);
  RC_ASSERT(v.empty());
  RC_ASSERT(scenario.pp > 1);
  RC_ASSERT(scenario.world_size() <= 16);
  RC_TAG("pp " + std::to_string(scenario.pp), "vpp " + std::to_string(scenario.vpp),
         scenario.pp_layout.empty() ? (scenario.pp_first_layers > 0 ? "uneven" : "even") : "layout",
         // The last stage's copy of the word embeddings: tied, or read by MTP depths.
         std::string(scenario.untie ? "untied" : "tied") +
             (scenario.mtp_layers > 0 ? " + mtp " + std::to_string(scenario.mtp_layers) : ""),
         scenario.moe_experts > 0 ? "MoE" : "dense");
}

// The stages without an MoE layer of an MoE scenario (pipeline_layout.h's placement).
int stages_without_moe(const RunConfig& c) {
  const ModelConfig m = model_config_from(c);
  const PipelineLayoutConfig layout = m.pipeline_layout();
  std::set<int> with_moe;
  for (int i = 0; i < c.layers; ++i)
    if (m.moe.is_moe_layer(i, m.layers)) with_moe.insert(chunk_of_layer(layout, i).pp_rank);
  return c.pp - static_cast<int>(with_moe.size());
}

// MoE on pipeline layouts: on every stage, and with stages that hold no MoE
// layer (which still join every sum of the MoE tracker), with the tracker on
// and off, checked collectives on every MoE case, over 1F1B and interleaved.
TEST(ScenarioGenerators, PipelineScenariosDrawMoeOnEveryStageAndStagesWithoutMoe) {
  std::set<std::string> seen;
  rc::detail::TestParams params;
  params.seed = 20261204;
  params.maxSuccess = 1000;
  params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = "ScenarioGenerators/pipeline-moe";
  scenarios::QuietListener quiet;
  bool unchecked = false;
  rc::detail::checkProperty(
      rc::detail::toProperty([&] {
        const RunConfig c = *scenarios::gen_pipeline_scenario();
        if (c.moe_experts == 0) return;
        unchecked = unchecked || !c.check_collectives;
        seen.insert(stages_without_moe(c) > 0 ? "a stage without MoE" : "MoE on every stage");
        seen.insert(c.moe_per_layer_logging ? "tracker" : "no tracker");
        seen.insert(c.vpp > 1 ? "interleaved" : "1F1B");
        if (c.ep > 1) seen.insert("ep 2");
      }),
      metadata, params, quiet);
  EXPECT_FALSE(unchecked) << "an MoE pipeline scenario without --check-collectives";
  EXPECT_EQ(seen, (std::set<std::string>{"a stage without MoE", "MoE on every stage", "tracker",
                                         "no tracker", "interleaved", "1F1B", "ep 2"}));
}

// The generators cover every dtype with and without an fp32
// residual stream against every recompute kind (and every selective module),
// so the suite meets combinations such as fp64 + fp32 residual + selective
// layernorm (judged with fp32 tolerances: harness/checks/tolerance.h). They
// also reach every --graph-scope module and the whole-layer scope.
TEST(ScenarioGenerators, CoverDtypeTimesFp32ResidualTimesEveryRecomputeKind) {
  std::set<std::string> seen, scopes, moe_logging, query_groups, packed;
  rc::detail::TestParams params;
  params.seed = 20261204;
  params.maxSuccess = 4000;
  params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = "ScenarioGenerators/coverage";
  scenarios::QuietListener quiet;
  rc::detail::checkProperty(
      rc::detail::toProperty([&] {
        const RunConfig c = *scenarios::gen_scenario();
        if (c.graphs == GraphMode::per_layer) {
          const GraphScope g = parse_graph_scope(c.graph_scope, nullptr).value();
          if (g.whole_layer()) scopes.insert("whole layer");
          if (g.attn) scopes.insert("attn");
          if (g.mlp) scopes.insert("mlp");
          if (g.moe) scopes.insert("moe");
          if (g.moe_router) scopes.insert("moe_router");
          if (g.moe_preprocess) scopes.insert("moe_preprocess");
        }
        if (c.moe_per_layer_logging)
          moe_logging.insert(c.moe_z_loss > 0 ? "logging with z-loss" : "logging");
        // Grouped-query attention's three layouts (docs/model.md), the head
        // dimension, the q/k norms, the rotary options and the norm epsilon.
        if (c.num_query_groups == 0 || c.num_query_groups == c.heads)
          query_groups.insert("one per head");
        else if (c.num_query_groups < c.tp)
          query_groups.insert("fewer than tp");
        else
          query_groups.insert("whole groups per rank");
        if (c.kv_channels > 0) query_groups.insert("kv-channels");
        if (c.qk_layernorm) query_groups.insert("qk-layernorm");
        if (c.rotary_base != 10000.0) query_groups.insert("rotary-base");
        if (c.rotary_percent < 1.0) query_groups.insert("rotary-percent");
        if (c.rotary_interleaved) query_groups.insert("rotary-interleaved");
        if (c.norm_epsilon != 1e-5) query_groups.insert("norm-epsilon");
        if (c.etp > 0 && c.etp != c.tp)
          query_groups.insert(c.etp < c.tp ? "etp below tp" : "etp above tp");
        // Packed documents (docs/model.md "Packed sequences"), under CP with a
        // length no multiple of 2 x cp (padded per document), with MoE.
        if (!c.packed_seq_lengths.empty()) {
          packed.insert("packed");
          const auto lengths = parse_packed_seq_lengths(c.packed_seq_lengths, nullptr).value();
          if (c.cp > 1 && std::any_of(lengths.begin(), lengths.end(),
                                      [&](std::int64_t l) { return l % (2 * c.cp) != 0; }))
            packed.insert("padded under cp");
          if (lengths.size() > 1) packed.insert("several documents");
          if (c.sp && c.tp > 1) packed.insert("sp");
          if (c.moe_experts > 0) packed.insert("moe");
        }
        const std::string prefix =
            std::string(to_string(c.dtype)) + (c.fp32_residual ? "+fp32-residual " : " ");
        if (c.recompute.rfind("selective:", 0) == 0) {
          for (const char* module : {"core_attn", "layernorm", "mlp"})
            if (c.recompute.find(module) != std::string::npos)
              seen.insert(prefix + "selective:" + module);
        } else {
          seen.insert(prefix + c.recompute);
        }
      }),
      metadata, params, quiet);
  std::vector<std::string> missing;
  for (const char* dtype : {"fp32", "fp64", "bf16"})
    for (const char* residual : {" ", "+fp32-residual "})
      for (const char* kind : {"none", "full-uniform", "full-block", "selective:core_attn",
                               "selective:layernorm", "selective:mlp"})
        if (!seen.count(std::string(dtype) + residual + kind))
          missing.push_back(std::string(dtype) + residual + kind);
  EXPECT_TRUE(missing.empty()) << "never generated: " << ::testing::PrintToString(missing);
  EXPECT_EQ(scopes.size(), 6u) << "graph scopes generated: " << ::testing::PrintToString(scopes);
  EXPECT_EQ(moe_logging.size(), 2u) << ::testing::PrintToString(moe_logging);
  EXPECT_EQ(query_groups.size(), 11u) << ::testing::PrintToString(query_groups);
  EXPECT_EQ(packed.size(), 5u) << ::testing::PrintToString(packed);
}

// The generators draw resumes (resume_invariance) at the scenario's layout and
// with each axis changed, under Adam now and then, on plain, pipelined and MoE
// scenarios: every such scenario a valid check.
TEST(ScenarioGenerators, DrawResumesAtTheSameLayoutAndWithEachAxisChanged) {
  std::set<std::string> seen;
  rc::detail::TestParams params;
  params.seed = 20261205;
  params.maxSuccess = 1500;
  params.disableShrinking = true;
  scenarios::QuietListener quiet;
  for (rc::Gen<RunConfig> (*generator)() :
       {scenarios::gen_scenario, scenarios::gen_pipeline_scenario, scenarios::gen_moe_scenario}) {
    rc::detail::TestMetadata metadata;
    metadata.id = "ScenarioGenerators/resumes";
    rc::detail::checkProperty(rc::detail::toProperty([&] {
                                const RunConfig c = *generator();
                                if (c.resume_at == 0) return;
                                RC_ASSERT(c.resume_at < c.steps);
                                RC_ASSERT(checks::validate_check_scenario(c).empty());
                                const RunConfig at = resumed_config(c).value();
                                if (same_layout(c, at))
                                  seen.insert(c.dropout > 0 ? "same, dropout" : "same");
                                if (at.tp != c.tp) seen.insert("tp");
                                if (at.cp != c.cp) seen.insert("cp");
                                if (at.dp != c.dp)
                                  seen.insert(c.distributed_optimizer ? "dp, distributed" : "dp");
                                if (at.pp != c.pp) seen.insert(c.pp > 1 ? "pp to 1" : "pp from 1");
                                if (at.ep != c.ep) seen.insert("ep");
                                if (c.optimizer == OptimizerKind::adam) seen.insert("adam");
                              }),
                              metadata, params, quiet);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"same", "same, dropout", "tp", "cp", "dp",
                                         "dp, distributed", "pp to 1", "pp from 1", "ep", "adam"}));
}

// Every property parity check evaluates, on each generated scenario: one
// check per scenario serves them all (one test per property ran the same
// seeded scenarios through the same check six times). A failure names every
// property that failed; the shrunk scenario fails at least one of them.
//
// PARITY_INJECT=FAULT[,FAULT...] injects code-path faults into every generated
// scenario, so that a healthy build shows the suite's failure path (a shrunk,
// saved scenario for `parity repro`): README "Other commands".
TEST(ScenarioProperties, EveryPropertyHolds) {
  SearchOptions options;
  options.default_cases = kCases;
  if (const char* inject = std::getenv("PARITY_INJECT"); inject && *inject) {
    std::stringstream list(inject);
    for (std::string fault; std::getline(list, fault, ',');)
      if (!fault.empty()) options.inject.push_back(fault);
    options.shrink_steps = 20;  // each candidate is a whole check: a bounded demonstration
  }
  const std::string failure = search_property("", options);
  if (!failure.empty()) FAIL() << failure;
}

// Every property on pipelined scenarios (1F1B and interleaved, even, uneven
// and layout-string placements, with and without checked collectives): the
// stages' losses, gradients and observations against the single-rank run.
TEST(ScenarioProperties, EveryPropertyHoldsOnPipelineLayouts) {
  SearchOptions options;
  options.default_cases = 12;
  options.generator = scenarios::gen_pipeline_scenario;
  const std::string failure = search_property("", options);
  if (!failure.empty()) FAIL() << failure;
}

// The suite's own plumbing: with an effective fault injected, the search
// fails, PARITY_SAVE_FAILURES receives the shrunk scenario with its about
// (property, reason, reproduce string), and `parity repro` replays it (exit 1).
TEST(ScenarioPropertySuite, SavesTheShrunkFailureAndReproReplaysIt) {
  const files::TempDir temp("parity-save-failures");
  const std::string dir = temp.path();
  ::setenv("PARITY_SAVE_FAILURES", dir.c_str(), 1);
  SearchOptions options;
  options.default_cases = 25;
  options.inject = {"sp-residual-mislabel"};
  options.shrink_steps = 5;
  options.failure_expected = true;
  const std::string failure = search_property("sharded_reduction", options);
  ::unsetenv("PARITY_SAVE_FAILURES");
  ASSERT_FALSE(failure.empty()) << "sp-residual-mislabel was not caught";
  EXPECT_NE(failure.find("shrunk scenario: {"), std::string::npos) << failure;
  EXPECT_NE(failure.find("reproduce: RC_PARAMS=\"reproduce="), std::string::npos) << failure;
  const std::string saved = dir + "/sharded_reduction.json";
  checks::ScenarioMeta meta;
  const nlohmann::json j = checks::read_scenario_file(saved, &meta);
  EXPECT_EQ(meta.about["property"], "sharded_reduction");
  EXPECT_NE(meta.about["reproduce"].get<std::string>().find("RC_PARAMS=\"reproduce="),
            std::string::npos);
  EXPECT_EQ(j["inject"], nlohmann::json::array({"sp-residual-mislabel"}));
  const char* argv[] = {"parity", "repro", saved.c_str()};
  std::ostringstream out, err;
  EXPECT_EQ(cli::run_command_line(3, argv, out, err, launch_options()), cli::kExitPropertyFailed)
      << out.str() << err.str();
  EXPECT_NE(err.str().find("sharded_reduction FAILED"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace parity
