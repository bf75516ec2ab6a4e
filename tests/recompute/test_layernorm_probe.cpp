// The selective "layernorm" recompute region (CheckpointWithoutOutput
// around the input and pre-MLP norms) holds a parity probe, layernorm_output,
// so a recomputation that is not suspended is visible: with the
// missing-recompute-suspension fault, exactly_once FAILs on a layernorm-only
// scenario (before the probe, nothing inside that region announced a site and
// the fault went unseen there).
#include <gtest/gtest.h>

#include "harness/checks/check.h"
#include "tests/support/model_configs.h"

namespace parity {
namespace {

RunConfig layernorm_only_scenario() {
  RunConfig c = testing::small_config<RunConfig>();
  c.heads = 2;
  c.ffn_hidden = 32;
  c.vocab = 32;
  c.steps = 1;
  c.microbatches = 1;
  c.recompute = "selective:layernorm";
  return c;
}

checks::Status exactly_once(const RunConfig& scenario) {
  const checks::CheckOutcome outcome = checks::execute_check(scenario, "test");
  EXPECT_EQ(outcome.failure, "");
  const checks::PropertyResult* p = outcome.property("exactly_once");
  if (p == nullptr) {
    ADD_FAILURE() << "exactly_once was not evaluated";
    return checks::Status::skip;
  }
  EXPECT_NE(p->status, checks::Status::skip) << p->reason;
  return p->status;
}

TEST(LayernormRecomputeProbe, ExactlyOncePassesWithTheSuspension) {
  const RunConfig scenario = layernorm_only_scenario();
  const checks::CheckOutcome outcome = checks::execute_check(scenario, "test");
  const checks::PropertyResult* p = outcome.property("exactly_once");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, checks::Status::pass) << p->reason;
}

TEST(LayernormRecomputeProbe, MissingSuspensionAroundCheckpointWithoutOutputFailsExactlyOnce) {
  RunConfig scenario = layernorm_only_scenario();
  scenario.inject = {"missing-recompute-suspension"};
  EXPECT_EQ(exactly_once(scenario), checks::Status::fail);
}

}  // namespace
}  // namespace parity
