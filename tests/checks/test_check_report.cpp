// parity check end to end through run_command_line: the --report JSON carries
// the documented fields (docs/report-schema.md); scenario files and flags.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/cli/cli.h"
#include "tests/support/command_line.h"
#include "tests/support/folder_entries.h"

namespace parity::cli {
namespace {

using testing::folder_entries;
using testing::run_parity;
using testing::split_words;

// The small dense model of the command-line checks below (each adds its layers,
// batches, metrics and graphs).
const std::string kSmallModel =
    " --cp 1 --dp 1 --sp=false --hidden 16 --heads 2 --ffn-hidden 32 --seq 8 --vocab 8";

TEST(CheckCommand, DefaultScenarioIsTheEmbeddedOne) {
  std::ostringstream out;
  const char* argv[] = {"parity", "check"};
  const ParsedCommand p = parse_command_line(2, argv, out);
  ASSERT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_TRUE(p.config == checks::default_check_scenario());
  EXPECT_EQ(p.scenario_source, "embedded default");
}

// --baseline: the report records the baseline's path and its differences
// (docs/report-schema.md "baseline"); a moved metric fails the check.
TEST(CheckCommand, ReportRecordsTheBaselineAndItsDifferences) {
  const files::TempDir temp("parity-check-test");
  const std::string base = temp.path() + "/base.json", now = temp.path() + "/now.json";
  const std::vector<std::string> scenario = {
      "check", "--tp",        "2",       "--cp",      "1",
      "--dp",  "1",           "--dtype", "fp64",      "--graphs",
      "none",  "--recompute", "none",    "--metrics", "layer-residual-contribution-l2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = scenario;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::string out, err;
  ASSERT_EQ(run_parity(with({"--report", base}), &out, &err), kExitOk) << out << err;
  ASSERT_EQ(run_parity(with({"--baseline", base, "--report", now}), &out, &err), kExitOk)
      << out << err;
  nlohmann::json r = nlohmann::json::parse(std::ifstream(now));
  EXPECT_EQ(r["baseline"]["path"], base);
  EXPECT_EQ(r["baseline"]["differences"].size(), 0u);

  nlohmann::json moved = nlohmann::json::parse(std::ifstream(base));
  moved["metrics"][0]["value"] = moved["metrics"][0]["value"].get<double>() * 1.01;
  files::write_atomically(base, moved.dump());
  ASSERT_EQ(run_parity(with({"--baseline", base, "--report", now}), &out, &err),
            kExitPropertyFailed)
      << out << err;
  r = nlohmann::json::parse(std::ifstream(now));
  EXPECT_EQ(r["exit_code"], 1);
  ASSERT_EQ(r["baseline"]["differences"].size(), 1u);
  const nlohmann::json& d = r["baseline"]["differences"][0];
  EXPECT_EQ(d["what"], "metric layer-residual-contribution-l2 " +
                           moved["metrics"][0]["label"].get<std::string>());
  EXPECT_NE(d["reason"].get<std::string>().find("> fp64 tolerance 1e-10"), std::string::npos) << d;
  EXPECT_NE(out.find("baseline " + base + ": 1 difference"), std::string::npos) << out;
}

TEST(CheckCommand, ReportValidatesAgainstTheDocumentedFields) {
  const files::TempDir temp("parity-check-test");
  const std::string dir = temp.path();
  const std::string scenario = dir + "/s.json";
  std::ofstream(scenario) << R"({"tp": 2, "sp": true, "steps": 2, "recompute": "full-uniform",
    "metrics": ["layer-residual-contribution-l2", "global-output-logits-l2"]})";
  const std::string path = dir + "/report.json";
  std::string out, err;
  ASSERT_EQ(run_parity({"check", scenario, "--dp", "2", "--report", path}, &out, &err), kExitOk)
      << out << err;
  std::ifstream in(path);
  const nlohmann::json r = nlohmann::json::parse(in);
  EXPECT_EQ(r["schema"], "parity-check-report");
  EXPECT_EQ(r["version"], 1);
  EXPECT_EQ(r["scenario_source"], scenario);
  EXPECT_EQ(r["scenario"]["tp"], 2);
  EXPECT_EQ(r["scenario"]["dp"], 2);  // the flag overrides the file
  EXPECT_EQ(r["result"], "PASS");
  EXPECT_EQ(r["exit_code"], 0);
  EXPECT_TRUE(r["wall_seconds"].is_number());
  ASSERT_EQ(r["runs"].size(), 4u);
  for (const auto& run : r["runs"])
    for (const char* k : {"name", "title", "config", "seconds"}) EXPECT_TRUE(run.contains(k)) << k;
  const std::vector<std::string> names = {
      "exactly_once",        "recompute_invariance", "sharded_reduction",   "graph_replay",
      "backend_parity",      "determinism",          "collective_symmetry", "router_invariance",
      "replica_consistency", "sharded_gradients",    "resume_invariance"};
  ASSERT_EQ(r["properties"].size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& p = r["properties"][i];
    EXPECT_EQ(p["name"], names[i]);
    for (const char* k : {"status", "compared", "reason", "max_abs", "max_rel", "worst_site",
                          "worst_label", "note"})
      EXPECT_TRUE(p.contains(k)) << k;
    EXPECT_TRUE(p["status"] == "PASS" || p["status"] == "SKIP") << p.dump();
  }
  EXPECT_EQ(r["properties"][3]["status"], "SKIP");  // no graphs
  // 2 metrics: contribution l2 (2 layers + global) and logits l2.
  ASSERT_EQ(r["metrics"].size(), 4u);
  for (const auto& m : r["metrics"])
    for (const char* k : {"metric", "label", "run", "step", "value", "reference", "max_abs",
                          "max_rel", "compared", "ok"})
      EXPECT_TRUE(m.contains(k)) << k;
  EXPECT_TRUE(r["notes"].is_array());
  EXPECT_EQ(folder_entries(dir).size(), 2u) << "the scenario and the report, no temp file left";
}

TEST(CheckCommand, BadScenarioFilesExitTwoWithOneLine) {
  const files::TempDir temp("parity-check-bad");
  const std::string dir = temp.path();
  auto write = [&](const char* name, const char* text) {
    const std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    return p;
  };
  std::string out, err;
  EXPECT_EQ(run_parity({"check", write("unknown.json", R"({"tp": 2, "tpp": 1})")}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("unknown key \"tpp\""), std::string::npos) << err;
  EXPECT_EQ(run_parity({"check", write("type.json", R"({"tp": "two"})")}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("\"tp\" = \"two\": expected an integer"), std::string::npos) << err;
  EXPECT_EQ(run_parity({"check", write("trunc.json", R"({"tp": 2, "cp":)")}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("invalid JSON at byte 16"), std::string::npos) << err;
  EXPECT_EQ(run_parity({"check", dir + "/missing.json"}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("missing.json: no such file (expected a JSON scenario file)"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_parity({"check", write("rule.json", R"({"tp": 1, "sp": true})")}, &out, &err),
            kExitBadInput);
  EXPECT_NE(err.find("rule.json: \"sp\" = true: sequence parallelism requires tp > 1"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_parity({"check", "--metrics", "nope"}, &out, &err), kExitBadInput);
  EXPECT_NE(err.find("unknown metric 'nope' (parity list metrics lists the "), std::string::npos)
      << err;
  EXPECT_EQ(
      run_parity({"run", "--graphs", "full-iteration", "--metrics", "global-output-logits-l2"},
                 &out, &err),
      kExitBadInput);
  EXPECT_NE(err.find("forward metrics cannot be collected under full-iteration graphs"),
            std::string::npos)
      << err;
}

checks::PropertyResult prop(const char* name, checks::Status s) {
  checks::PropertyResult p;
  p.name = name;
  p.status = s;
  return p;
}

TEST(Expectations, ExpectedFailIsMetAndUnnamedFailIsNot) {
  using checks::Status;
  const std::vector<checks::PropertyResult> props = {prop("exactly_once", Status::fail),
                                                     prop("graph_replay", Status::skip),
                                                     prop("determinism", Status::pass)};
  checks::ExpectationCheck e = checks::compare_expectations(props, {{"exactly_once", "FAIL"}});
  EXPECT_TRUE(e.ok);
  ASSERT_EQ(e.lines.size(), 1u);
  EXPECT_EQ(e.lines[0], "expect exactly_once FAIL: met");

  e = checks::compare_expectations(props, {{"graph_replay", "PASS"}, {"determinism", "PASS"}});
  EXPECT_FALSE(e.ok);  // graph_replay is SKIP, and exactly_once FAILs unnamed
  ASSERT_EQ(e.lines.size(), 2u);
  EXPECT_EQ(e.lines[0], "expect graph_replay PASS: not met: it is SKIP");
  EXPECT_EQ(e.lines[1], "expect determinism PASS: met");

  // A SKIP meets only an expected SKIP; the line says why and how to compare.
  checks::PropertyResult skipped = prop("graph_replay", Status::skip);
  skipped.reason = "no step after the capture";
  skipped.hint = "use --steps 3";
  e = checks::compare_expectations({skipped}, {{"graph_replay", "PASS"}});
  EXPECT_FALSE(e.ok);
  ASSERT_EQ(e.lines.size(), 1u);
  EXPECT_EQ(e.lines[0],
            "expect graph_replay PASS: not met: it is SKIP (no step after the capture; "
            "to make it compare: use --steps 3)");
  EXPECT_TRUE(checks::compare_expectations({skipped}, {{"graph_replay", "SKIP"}}).ok);

  e = checks::compare_expectations(props,
                                   {{"exactly_once", "FAIL"}, {"collective_symmetry", "PASS"}});
  EXPECT_FALSE(e.ok);  // not evaluated
  EXPECT_EQ(e.lines.back(), "expect collective_symmetry PASS: not met: it was not evaluated");
  EXPECT_TRUE(checks::compare_expectations(props, {}).ok == false);
  EXPECT_TRUE(checks::compare_expectations({prop("determinism", Status::pass)}, {}).ok);
}

TEST(CheckCommand, ScenarioExpectationsDecideTheExitCode) {
  const files::TempDir temp("parity-check-expect");
  const std::string dir = temp.path();
  const std::string small = R"("hidden": 16, "heads": 2, "ffn-hidden": 32, "seq": 8, "vocab": 32,
    "layers": 1, "micro-batch": 1, "microbatches": 1, "steps": 2, "tp": 2, "sp": true,
    "metrics": ["layer-residual-contribution-mean"], )";
  auto write = [&](const char* name, const std::string& expect) {
    const std::string p = dir + "/" + name;
    std::ofstream(p) << "{" << small << R"("expect": )" << expect << "}";
    return p;
  };
  std::string out, err;
  // graph_replay is SKIP without graphs: an expected PASS is not met.
  EXPECT_EQ(run_parity({"check", write("unmet.json", R"({"graph_replay": "PASS"})")}, &out, &err),
            kExitPropertyFailed)
      << out << err;
  EXPECT_NE(out.find("expect graph_replay PASS: not met: it is SKIP (the scenario has no graphs; "
                     "to make it compare: use --graphs per-layer"),
            std::string::npos)
      << out;
  EXPECT_NE(err.find("parity check: expect graph_replay PASS: not met"), std::string::npos) << err;
  // An expected FAIL that happens is not an error.
  EXPECT_EQ(
      run_parity(
          {"check", write("fail.json", R"({"sharded_reduction": "FAIL", "graph_replay": "SKIP"})"),
           "--inject", "sp-residual-mislabel"},
          &out, &err),
      kExitOk)
      << out << err;
  EXPECT_NE(out.find("expect sharded_reduction FAIL: met"), std::string::npos) << out;
  EXPECT_NE(out.find("check passed"), std::string::npos) << out;
  EXPECT_EQ(err.find("FAILED"), std::string::npos) << err;
}

// Dropout masks come from per-rank RNG streams, so a sharded run with dropout is
// not the single-rank computation: sharded_reduction compares (e), the sharding
// without dropout, with (b) without dropout; one rank keeps the plain plan.
TEST(CheckPlan, DropoutOnManyRanksComparesShardingWithoutDropout) {
  RunConfig s = checks::default_check_scenario();
  s.dropout = 0.1;
  namespace variant = checks::variant;
  checks::CheckPlan plan = checks::plan_check(s);
  const checks::PlannedRun* e = plan.find(variant::eager_without_recompute_or_dropout);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config.dropout, 0.0);
  EXPECT_EQ(plan.find(variant::single_rank)->config.dropout, 0.0);
  EXPECT_EQ(plan.find(variant::scenario)->config.dropout, 0.1);
  // recompute_invariance keeps the masks
  EXPECT_EQ(plan.find(variant::eager_without_recompute)->config.dropout, 0.1);
  EXPECT_EQ(e->config.tp, s.tp);
  EXPECT_EQ(e->config.recompute, "none");

  s.tp = s.cp = s.dp = 1;
  s.sp = false;
  plan = checks::plan_check(s);
  EXPECT_EQ(plan.find(variant::eager_without_recompute_or_dropout), nullptr);
  EXPECT_EQ(plan.find(variant::single_rank)->config.dropout, 0.1);

  // End to end: tp 2 with dropout passes, sharded_reduction on (e) vs (b).
  const std::vector<std::string> flags =
      split_words("check --tp 2" + kSmallModel +
                  " --layers 2 --micro-batch 1 --microbatches 2 --steps 1"
                  " --metrics layer-residual-contribution-rms --dropout 0.1 --recompute none"
                  " --graphs none");
  std::string out, err;
  EXPECT_EQ(run_parity(flags, &out, &err), kExitOk) << out << err;
  EXPECT_NE(out.find("sharded_reduction     PASS   (e) vs (b)"), std::string::npos) << out;
}

// The collector's storage rule is graph_replay's FAIL in whichever run trips it:
// under full-iteration graphs (a) collects no metrics, so (b) is the first.
TEST(CheckCommand, AliasingPreparedStateIsGraphReplaysFailInAnyRun) {
  std::string out, err;
  const std::vector<std::string> base =
      split_words("check --tp 1" + kSmallModel +
                  " --layers 1 --micro-batch 1 --microbatches 1 --recompute none"
                  " --metrics layer-residual-accumulator-max --inject prepare-aliases-buffer");
  std::vector<std::string> eager = base;
  for (const char* a : {"--graphs", "none", "--steps", "1"}) eager.push_back(a);
  EXPECT_EQ(run_parity(eager, &out, &err), kExitPropertyFailed) << out << err;
  EXPECT_NE(out.find("graph_replay          FAIL   (a)"), std::string::npos) << out;
  std::vector<std::string> full = base;
  for (const char* a : {"--graphs", "full-iteration", "--steps", "3"}) full.push_back(a);
  EXPECT_EQ(run_parity(full, &out, &err), kExitPropertyFailed) << out << err;
  EXPECT_NE(out.find("graph_replay          FAIL   (b)"), std::string::npos) << out;
}

// Under full-iteration graphs (a) runs without metrics, yet the
// header describes the scenario as given, not run (c).
TEST(CheckHeader, DescribesTheScenarioAsGiven) {
  RunConfig s = checks::default_check_scenario();
  s.graphs = GraphMode::full_iteration;
  const checks::CheckPlan plan = checks::plan_check(s);
  ASSERT_TRUE(plan.find(checks::variant::scenario)->config.metrics.empty());
  const std::string header = checks::check_header(s, plan, "embedded default");
  EXPECT_NE(header.find("recompute " + s.recompute + ", graphs full-iteration (warmup 1)"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(std::to_string(plan.metrics.size()) + " metric(s)"), std::string::npos)
      << header;
  EXPECT_EQ(header.find("graphs none"), std::string::npos) << header;
}

TEST(CheckHeader, NamesTheLayersFullRecomputeTakesAndChunksOnlyAboveOne) {
  RunConfig s = checks::default_check_scenario();
  s.recompute = "full-uniform";
  s.recompute_layers = 2;
  s.graphs = GraphMode::none;
  s.vpp = 1;
  const std::string header = checks::check_header(s, checks::plan_check(s), "embedded default");
  EXPECT_NE(header.find(", recompute full-uniform (2), graphs none"), std::string::npos) << header;
  EXPECT_EQ(header.find("chunks per stage"), std::string::npos) << header;
}

// Under full-iteration graphs the forward metrics are not collected, yet a misspelt name among
// them is still an error naming it.
TEST(CheckPlan, AnUnknownMetricIsNamedUnderFullIterationGraphsToo) {
  RunConfig s = checks::default_check_scenario();
  s.graphs = GraphMode::full_iteration;
  s.metrics = {"no-such-metric"};
  const std::vector<ConfigViolation> violations = checks::validate_check_scenario(s);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].field, "metrics");
  EXPECT_NE(format_for_cli(violations[0]).find("no-such-metric"), std::string::npos)
      << format_for_cli(violations[0]);
}

// On a terminal, the progress line's last state before the report is the property stage.
TEST(CheckCommand, TheProgressLineSaysWhenThePropertiesAreEvaluated) {
  RunConfig s;
  s.tp = s.cp = s.dp = 1;
  s.sp = false;
  s.hidden = 16;
  s.heads = 2;
  s.ffn_hidden = 32;
  s.seq = 8;
  s.vocab = 8;
  s.layers = 1;
  s.micro_batch = s.microbatches = 1;
  s.steps = 1;
  s.recompute = "none";
  s.graphs = GraphMode::none;
  s.metrics = {"layer-residual-accumulator-l2"};
  std::ostringstream progress;
  const checks::CheckOutcome o = checks::execute_check(s, "test", {}, &progress, true);
  ASSERT_TRUE(o.failure.empty()) << o.failure;
  const std::string shown = progress.str();
  const std::size_t runs = checks::plan_check(s).runs.size();
  EXPECT_NE(shown.find(std::to_string(runs) + "/" + std::to_string(runs) +
                       " runs done, evaluating the properties"),
            std::string::npos)
      << shown;
}

// A vacuous pass, end to end: full-iteration graphs with the embedded
// default's 2 steps and warmup 1 replay nothing: graph_replay is SKIP, and
// parity check says how to make it compare.
TEST(CheckCommand, FullIterationWithoutAReplayStepIsSkipWithAHint) {
  std::string out, err;
  const std::vector<std::string> flags =
      split_words("check --tp 2" + kSmallModel +
                  " --layers 1 --micro-batch 1 --microbatches 1 --recompute none"
                  " --graphs full-iteration --metrics layer-residual-contribution-l2");
  EXPECT_EQ(run_parity(flags, &out, &err), kExitOk) << out << err;
  EXPECT_NE(out.find("recompute none, graphs full-iteration (warmup 1)"), std::string::npos) << out;
  EXPECT_NE(out.find("graph_replay          SKIP"), std::string::npos) << out;
  EXPECT_NE(out.find("no step after the capture"), std::string::npos) << out;
  EXPECT_NE(out.find("to make it compare: use --steps 3"), std::string::npos) << out;
}

TEST(CheckOutcome, VerdictsMapToTheDocumentedExitCodes) {
  EXPECT_EQ(checks::exit_code(checks::CheckVerdict::passed), kExitOk);
  EXPECT_EQ(checks::exit_code(checks::CheckVerdict::property_failed), kExitPropertyFailed);
  EXPECT_EQ(checks::exit_code(checks::CheckVerdict::bad_report), kExitBadInput);
  EXPECT_EQ(checks::exit_code(checks::CheckVerdict::rank_failure), kExitRankFailure);
}

}  // namespace
}  // namespace parity::cli
