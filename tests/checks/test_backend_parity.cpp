// backend_parity end to end on CPU: parity check with a backend other than the
// reference runs the scenario on the reference too (run (f)) and compares. Two
// test backends stand in for the CUDA one, which needs a GPU: a twin (the
// reference's ops under another name: PASS, every observation bitwise) and a
// skewed one (its linear layers off by a relative 1e-6: FAIL in fp64).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "harness/backend/registry.h"
#include "harness/checks/check.h"

namespace parity::checks {
namespace {

// The reference's tracker and graph emulation under another name; ops are the
// interface's plain compositions (the reference's own), `skew` aside.
class ReferenceLike : public Backend {
 public:
  ReferenceLike(std::string name, double skew)
      : name_(std::move(name)), skew_(skew), reference_(make_backend("reference")) {}
  std::string_view name() const override { return name_; }
  std::string_view transport_name() const override { return reference_->transport_name(); }
  std::string unavailable_reason() const override { return reference_->unavailable_reason(); }
  at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias) const override {
    const at::Tensor y = Backend::linear(x, weight, bias);
    return skew_ == 0 ? y : y * (1.0 + skew_);
  }
  std::unique_ptr<RngTracker> make_rng_tracker() const override {
    return reference_->make_rng_tracker();
  }
  std::unique_ptr<GraphRunner> make_graph_runner() const override {
    return reference_->make_graph_runner();
  }

 private:
  std::string name_;
  double skew_;
  std::unique_ptr<Backend> reference_;
};

const BackendRegistrar kTwin("reference-twin",
                             [] { return std::make_unique<ReferenceLike>("reference-twin", 0.0); });
const BackendRegistrar kSkewed("reference-skewed", [] {
  return std::make_unique<ReferenceLike>("reference-skewed", 1e-6);
});

RunConfig small_scenario(const std::string& backend) {
  RunConfig c;
  c.backend = backend;
  c.tp = 2;
  c.cp = 1;
  c.dp = 2;
  c.sp = true;
  c.layers = 2;
  c.steps = 2;
  c.dtype = ModelDType::fp64;
  c.recompute = "selective:core_attn";
  c.graphs = GraphMode::per_layer;
  c.metrics = {"layer-residual-accumulator-l2", "layer-residual-contribution-l2"};
  return c;
}

TEST(BackendParityPlan, AnotherBackendAddsTheReferenceRun) {
  RunConfig c = small_scenario("cuda");
  CheckPlan plan = plan_check(c);
  const PlannedRun* f = plan.find(variant::reference_backend);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "f");
  EXPECT_EQ(f->config.backend, "reference");
  EXPECT_EQ(f->config.graphs, GraphMode::per_layer);  // the same scenario, on the reference
  EXPECT_EQ(plan.find(variant::without_dropout), nullptr);
  c.dropout = 0.1;
  plan = plan_check(c);
  f = plan.find(variant::reference_backend_without_dropout);
  const PlannedRun* g = plan.find(variant::without_dropout);
  ASSERT_TRUE(f && g);
  EXPECT_EQ(f->name, "f");
  EXPECT_EQ(g->name, "g");
  EXPECT_EQ(f->config.dropout, 0.0);
  EXPECT_EQ(g->config.dropout, 0.0);
  EXPECT_EQ(g->config.backend, "cuda");
  EXPECT_EQ(plan_check(small_scenario("reference")).find(variant::reference_backend), nullptr);
}

TEST(BackendParity, SkipsOnTheReferenceBackend) {
  const CheckOutcome o = execute_check(small_scenario("reference"), "test");
  ASSERT_NE(o.verdict, CheckVerdict::rank_failure) << o.failure;
  const PropertyResult* p = o.property("backend_parity");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, Status::skip);
  EXPECT_NE(p->reason.find("reference backend"), std::string::npos) << p->reason;
}

TEST(BackendParity, ATwinOfTheReferencePassesBitForBit) {
  const CheckOutcome o = execute_check(small_scenario("reference-twin"), "test");
  ASSERT_NE(o.verdict, CheckVerdict::rank_failure) << o.failure;
  EXPECT_EQ(o.verdict, CheckVerdict::passed);
  const PropertyResult* p = o.property("backend_parity");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, Status::pass) << p->reason;
  EXPECT_EQ(p->compared, "(a) vs (f)");
  EXPECT_NE(p->reason.find("reference-twin vs reference"), std::string::npos) << p->reason;
  // Every value-holding observation compared, and (a twin) every one bitwise.
  const std::string note = p->note;
  const std::size_t of = note.find(" of ");
  ASSERT_NE(of, std::string::npos) << note;
  EXPECT_EQ(note.substr(0, of), note.substr(of + 4, note.find(' ', of + 4) - of - 4)) << note;
  EXPECT_NE(note.substr(0, of), "0") << note;
}

TEST(BackendParity, ABackendOffByARelativeMillionthFailsInFp64) {
  const CheckOutcome o = execute_check(small_scenario("reference-skewed"), "test");
  ASSERT_NE(o.verdict, CheckVerdict::rank_failure) << o.failure;
  const PropertyResult* p = o.property("backend_parity");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, Status::fail);
  EXPECT_NE(p->reason.find("fp64 rel 1e-10"), std::string::npos) << p->reason;
  ASSERT_TRUE(p->max_rel.has_value());
  EXPECT_GT(*p->max_rel, 1e-10);
  EXPECT_LT(*p->max_rel, 1e-3);  // a small skew, not a broken comparison
  // The skew is the backend's own: compared with itself it shards correctly.
  EXPECT_EQ(o.property("sharded_reduction")->status, Status::pass);
}

TEST(BackendParity, WithDropoutBothSidesRunWithoutIt) {
  RunConfig c = small_scenario("reference-twin");
  c.dropout = 0.1;
  c.graphs = GraphMode::none;
  const CheckOutcome o = execute_check(c, "test");
  ASSERT_NE(o.verdict, CheckVerdict::rank_failure) << o.failure;
  const PropertyResult* p = o.property("backend_parity");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, Status::pass) << p->reason;
  EXPECT_EQ(p->compared, "(g) vs (f)");
  EXPECT_NE(p->note.find("without dropout"), std::string::npos) << p->note;
}

}  // namespace
}  // namespace parity::checks
