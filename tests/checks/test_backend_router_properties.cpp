// The property evaluators that compare run (a) with a run of another kind, on hand-built
// runs: backend_parity (the reference backend's run) and router_invariance (other padding).
#include <gtest/gtest.h>

#include "harness/checks/properties.h"
#include "tests/checks/hand_built_runs.h"

namespace parity::checks {
namespace {

using testing::eager_run;

// backend_parity on hand-built runs: (a) on another backend, (f) the reference.
// Every observation gets a summary; the backend's values move by `rel`.
std::pair<CheckRun, CheckRun> backend_runs(double rel = 0) {
  CheckRun a = eager_run("a"), f = eager_run("f");
  a.config.backend = "cuda";
  for (CheckRun* r : {&a, &f})
    for (Observation& o : r->ranks[0].trace) {
      o.numel = 100;
      o.sum = 3;
      o.sum_sq = 50;
    }
  for (Observation& o : a.ranks[0].trace) o.sum_sq *= 1 + rel;
  return {a, f};
}

TEST(Properties, BackendParityPassesWithinTheDtypeTolerance) {
  auto [a, f] = backend_runs(2e-6);  // fp32: rel 1e-5
  a.ranks[0].steps[1].loss *= 1 + 3e-6;
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("cuda vs reference) within fp32 rel 1e-05"), std::string::npos)
      << p.reason;
  // The hand-built runs share their digests: every observation counts as bitwise.
  EXPECT_EQ(p.note, "14 of 14 observations bitwise equal");
}

TEST(Properties, BackendParityFailsNamingTheWorstValue) {
  auto [a, f] = backend_runs();
  a.ranks[0].trace[3].sum_sq *= 1 + 1e-3;  // mlp_output of step 0
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 mb 0 eager decoder.layers.0.mlp.mlp_output sum of squares"),
            std::string::npos)
      << p.reason;
  EXPECT_EQ(p.worst_site, "decoder.layers.0.mlp.mlp_output");
  ASSERT_TRUE(p.max_rel.has_value());
  EXPECT_NEAR(*p.max_rel, 1e-3, 1e-9);
}

TEST(Properties, BackendParityFailsOnADifferentObservationSequence) {
  auto [a, f] = backend_runs();
  std::swap(a.ranks[0].trace[1], a.ranks[0].trace[2]);
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("rank 0 observation 1: step 0 mb 0 eager "
                          "decoder.layers.0.self_attention.attention_context in (a)"),
            std::string::npos)
      << p.reason;
  a = backend_runs().first;
  a.ranks[0].steps[0].metrics.clear();
  EXPECT_NE(check_backend_parity(a, f).reason.find("missing in (a)"), std::string::npos);
}

// A sum may cancel to about zero: its error is judged against sqrt(n) * L2
// (each of n terms within rel tol), not against the sum itself.
TEST(Properties, BackendParityJudgesSumsAgainstTheirTerms) {
  auto [a, f] = backend_runs();
  f.ranks[0].trace[0].sum = 0;
  a.ranks[0].trace[0].sum = 5e-4;  // sqrt(100) * sqrt(50) * 1e-5 = 7.07e-4
  EXPECT_EQ(check_backend_parity(a, f).status, Status::pass) << check_backend_parity(a, f).reason;
  a.ranks[0].trace[0].sum = 1e-3;
  EXPECT_EQ(check_backend_parity(a, f).status, Status::fail);
}

// Inside a stream capture a device tensor holds nothing yet: only the
// sequence is compared in the capture and replay phases.
TEST(Properties, BackendParityComparesNoValuesInsideACapture) {
  auto [a, f] = backend_runs();
  for (CheckRun* r : {&a, &f}) r->ranks[0].trace[2].phase = "capture";
  a.ranks[0].trace[2].sum = a.ranks[0].trace[2].sum_sq = NAN;
  a.ranks[0].trace[2].numel = 0;
  EXPECT_EQ(check_backend_parity(a, f).status, Status::pass) << check_backend_parity(a, f).reason;
  f.ranks[0].trace[2].phase = "replay";
  EXPECT_EQ(check_backend_parity(a, f).status, Status::fail);
}

// router_invariance over what the router logs (--moe-per-layer-logging, field
// bug Megatron-LM #1984): the first MoE layer's logged statistics of step 0
// must not move when the padding tokens' ids do; the load-balancing loss and
// the expert load only where routing is not forced (forcing is off in (h)).
TEST(Properties, RouterInvarianceComparesTheFirstMoeLayersLoggedStatistics) {
  auto moe_run = [](std::string name, double z, double lb) {
    CheckRun run = eager_run(std::move(name), 1);
    run.config.layers = 2;
    run.config.moe_experts = 4;
    run.config.padding_fraction = 0.25;
    auto& m = run.ranks[0].steps[0].metrics;
    m[{"moe-z-loss", "decoder.layers.0"}] = z;
    m[{"moe-load-balancing-loss", "decoder.layers.0"}] = lb;
    m[{"moe-z-loss", "decoder.layers.1"}] = 7.0 * z;  // a later layer: not compared
    return run;
  };
  const CheckRun a = moe_run("a", 0.5, 0.25);
  const CheckRun same = moe_run("h", 0.5, 0.25);
  PropertyResult p = check_router_invariance(a, &same);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 logged router statistics"), std::string::npos) << p.reason;

  CheckRun later = moe_run("h", 0.5, 0.25);
  later.ranks[0].steps[0].metrics[{"moe-z-loss", "decoder.layers.1"}] = 1.0;
  EXPECT_EQ(check_router_invariance(a, &later).status, Status::pass);

  const CheckRun padded = moe_run("h", 0.5, 0.2500001);
  p = check_router_invariance(a, &padded);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("moe-load-balancing-loss [decoder.layers.0]"), std::string::npos)
      << p.reason;

  CheckRun forced = a;
  forced.config.moe_force_routing = ForcedRouting::random;
  EXPECT_EQ(check_router_invariance(forced, &padded).status, Status::pass);
  const CheckRun z_moved = moe_run("h", 0.5000001, 0.25);
  EXPECT_EQ(check_router_invariance(forced, &z_moved).status, Status::fail);
}

}  // namespace
}  // namespace parity::checks
