// The scenario properties of contract.md section 5 over generated scenarios
// (scenarios/generators.h): each generates a scenario, runs parity check on it
// (execute_check: the same runs and evaluation as `parity check`) and asserts
// its property is PASS or SKIP (the SKIP share is tagged, so a vacuous run
// shows). Case counts: a per-test default that RC_PARAMS's max_success
// overrides; PARITY_SAVE_FAILURES=DIR saves the shrunk scenario.
// docs/property-suite.md.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/cli/cli.h"
#include "scenarios/generators.h"

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
  if (!env || std::string(env).find("max_success") == std::string::npos) p.maxSuccess = default_cases;
  return p;
}

struct Failure {
  RunConfig scenario;
  std::string reason;
};

void save_failure(const std::string& property, const Failure& f, const std::string& reproduce) {
  const char* dir = std::getenv("PARITY_SAVE_FAILURES");
  if (!dir || !*dir) return;
  std::filesystem::create_directories(dir);
  checks::ScenarioMeta meta;
  meta.about = {{"property", property}, {"reason", f.reason}};
  if (!reproduce.empty()) meta.about["reproduce"] = "RC_PARAMS=\"" + reproduce + "\"";
  cli::write_file_atomically(std::string(dir) + "/" + property + ".json",
                             checks::scenario_file_json(f.scenario, meta).dump(2) + "\n");
}

// Checks `property` over generated scenarios: rapidcheck as RC_GTEST_PROP
// would, with the per-test default case count, printing the shrunk scenario
// (JSON), rapidcheck's reproduce string, and saving it when asked.
void check_scenario_property(const std::string& property, int default_cases) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_case_name()) + "/" + info->name();
  metadata.description = info->name();
  Failure last;  // the last failing evaluation: after shrinking, the minimal one
  const auto result = rc::detail::checkProperty(
      rc::detail::toProperty([&] {
        const RunConfig scenario = *scenarios::gen_scenario();
        const checks::CheckOutcome outcome =
            checks::execute_check(scenario, "generated", launch_options());
        std::string reason;
        if (outcome.exit_code == 3) {
          reason = "rank failure: " + outcome.failure;
        } else if (const checks::PropertyResult* p = outcome.property(property)) {
          RC_TAG(std::string(checks::to_string(p->status)));
          if (p->status == checks::Status::fail) reason = p->reason;
        } else {
          reason = "not evaluated (another property's failure ended the check)";
        }
        if (!reason.empty()) {
          last = {scenario, reason};
          save_failure(property, last, "");
          RC_FAIL(property + " FAILED: " + reason);
        }
      }),
      metadata, params_with_default(default_cases));
  if (result.template is<rc::detail::SuccessResult>()) {
    rc::detail::printResultMessage(result, std::cout);
    std::cout << std::endl;
    return;
  }
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  std::string reproduce;
  if (result.template is<rc::detail::FailureResult>()) {
    rc::detail::Configuration config;
    config.reproduce[metadata.id] = result.template get<rc::detail::FailureResult>().reproduce;
    reproduce = rc::detail::configToMinimalString(config);
    save_failure(property, last, reproduce);
    message << "\nshrunk scenario: " << checks::scenario_file_json(last.scenario).dump()
            << "\nreproduce: RC_PARAMS=\"" << reproduce << "\"";
  }
  FAIL() << message.str();
}

// Per-test default case counts: the whole `property` label within 5 minutes on
// 2 cores (docs/property-suite.md); RC_PARAMS=max_success=N runs deeper.
constexpr int kCases = 25;

RC_GTEST_PROP(ScenarioGenerators, EveryScenarioIsValid, ()) {
  const RunConfig scenario = *scenarios::gen_scenario();
  const std::vector<ConfigViolation> v = checks::validate_check_scenario(scenario);
  RC_ASSERT(v.empty());
  RC_ASSERT(scenario.world_size() <= 16);
  RC_ASSERT(!scenario.metrics.empty());
  RC_ASSERT(scenario.launch != LaunchMode::processes || scenario.world_size() <= 2);
  RC_TAG(std::string(to_string(scenario.graphs)), std::string(to_string(scenario.recompute_spec().kind)));
}

TEST(ScenarioProperties, ExactlyOnce) { check_scenario_property("exactly_once", kCases); }
TEST(ScenarioProperties, RecomputeInvariance) { check_scenario_property("recompute_invariance", kCases); }
TEST(ScenarioProperties, ShardedReduction) { check_scenario_property("sharded_reduction", kCases); }
TEST(ScenarioProperties, GraphReplay) { check_scenario_property("graph_replay", kCases); }
TEST(ScenarioProperties, Determinism) { check_scenario_property("determinism", kCases); }
TEST(ScenarioProperties, CollectiveSymmetry) { check_scenario_property("collective_symmetry", kCases); }

}  // namespace
}  // namespace parity
