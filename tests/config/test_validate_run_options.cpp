// validate_run_config's rules for the options around the model: recompute, numeric
// ranges, injected faults (and the fault registry and plan they name), scenario files,
// backends, graphs over collectives, output folders, MTP and the metrics' sites.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <limits>

#include "harness/backend/registry.h"
#include "harness/config/run_config.h"
#include "harness/runtime/runtime_faults.h"
#include "tests/support/config_violations.h"

namespace parity {
namespace {

using testing::cli_lines;
using testing::expect_only;

TEST(RunConfigValidation, Recompute) {
  RunConfig c;
  c.recompute = "partial";
  expect_only(c,
              "--recompute partial: unknown recompute mode (known: none, full-uniform, "
              "full-block, selective:<modules> with modules core_attn, layernorm, mlp, moe)");
  c.recompute = "selective:foo";
  expect_only(c,
              "--recompute selective:foo: unknown recompute module \"foo\" (known: core_attn, "
              "layernorm, mlp, moe)");
  c.recompute = "selective:mlp,attn";
  expect_only(c,
              "--recompute selective:mlp,attn: unknown recompute module \"attn\" (known: "
              "core_attn, layernorm, mlp, moe)");
  c.recompute = "selective:";
  expect_only(c,
              "--recompute selective:: selective recompute needs at least one module "
              "(core_attn, layernorm, mlp, moe)");
  c.recompute = "selective:mlp,mlp";
  expect_only(c, "--recompute selective:mlp,mlp: recompute module \"mlp\" is listed twice");
  c.recompute = "selective:core_attn,layernorm,mlp";
  EXPECT_TRUE(validate_run_config(c).empty());
  const RecomputeSpec spec = c.recompute_spec();
  EXPECT_EQ(spec.kind, RecomputeKind::selective);
  EXPECT_TRUE(spec.has("layernorm"));
}

TEST(RunConfigValidation, RecomputeLayersInRangeForFullModes) {
  RunConfig c;
  c.recompute = "full-uniform";
  c.recompute_layers = 3;
  expect_only(c,
              "--recompute-layers 3: must be in [1, 2] (the number of layers) with "
              "recompute full-uniform");
  c.recompute = "full-block";
  c.recompute_layers = 0;
  expect_only(c, "--recompute-layers 0: must be >= 1");  // the field's own range, in every mode
  c.recompute_layers = 3;
  expect_only(c,
              "--recompute-layers 3: must be in [1, 2] (the number of layers) with "
              "recompute full-block");
  c.recompute_layers = 2;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Ignored outside the full modes (beyond its own range).
  c.recompute = "none";
  c.recompute_layers = 9;
  EXPECT_TRUE(validate_run_config(c).empty());
  // full-uniform checkpoints chunks of equal size; full-block any first N.
  c.layers = 5;
  c.recompute = "full-uniform";
  c.recompute_layers = 2;
  expect_only(c,
              "--recompute-layers 2: must divide the number of layers 5 with recompute "
              "full-uniform (chunks of equal size)");
  c.recompute = "full-block";
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, NumericRanges) {
  RunConfig c;
  c.graph_warmup = -1;
  expect_only(c, "--graph-warmup -1: must be >= 0");
  c = {};
  c.graph_warmup = 0;
  c.graphs = GraphMode::per_layer;
  EXPECT_TRUE(validate_run_config(c).empty());
  c = {};
  c.dropout = 1.0;
  expect_only(c, "--dropout 1: must be in [0, 1)");
  c.dropout = -0.1;
  expect_only(c, "--dropout -0.1: must be in [0, 1)");
  c.dropout = 0.5;
  EXPECT_TRUE(validate_run_config(c).empty());
  c = {};
  c.timeout = 0;
  expect_only(c, "--timeout 0: must be > 0 and at most 86400 seconds");
  c.timeout = -2.5;
  expect_only(c, "--timeout -2.5: must be > 0 and at most 86400 seconds");
  c.timeout = 86401;
  expect_only(c, "--timeout 86401: must be > 0 and at most 86400 seconds");
  c = {};
  c.lr = -0.1;
  expect_only(c, "--lr -0.1: must be a finite number >= 0");
  c.lr = std::numeric_limits<double>::infinity();
  expect_only(c, "--lr inf: must be a finite number >= 0");
  c.lr = 0;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, InjectNamesKnownAndRanksInWorld) {
  RunConfig c;
  c.tp = 2;
  c.dp = 2;
  c.inject = {"boom"};
  // An unknown name points at parity list faults; a typo names the nearest.
  const std::vector<std::string> lines = cli_lines(c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "--inject boom: unknown fault \"boom\" (parity list faults lists the " +
                          std::to_string(fault_registry().size()) + " known)");
  c.inject = {"crash-rnk=1"};
  expect_only(c,
              "--inject crash-rnk=1: unknown fault \"crash-rnk\": did you mean \"crash-rank\"? "
              "(parity list faults lists the " +
                  std::to_string(fault_registry().size()) + " known)");
  c.inject = {"crash-rank=4"};
  expect_only(c, "--inject crash-rank=4: rank 4 is outside the world (world size 4)");
  c.inject = {"hang-rank"};
  expect_only(c, "--inject hang-rank: fault hang-rank needs a rank: hang-rank=R");
  c.inject = {"throw-rank=x"};
  expect_only(c, "--inject throw-rank=x: the rank of throw-rank must be a non-negative integer");
  c.inject = {"throw-rank=1", "crash-rank=1"};
  expect_only(c, "--inject crash-rank=1: rank 1 already has a fault (throw-rank=1)");
  c.inject = {"throw-rank=1", "crash-rank=3", "hang-rank=0"};
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, ScenarioFileFormat) {
  RunConfig c;
  c.tp = 3;
  c.heads = 3;
  c.hidden = 48;
  c.ffn_hidden = 96;
  c.vocab = 96;
  c.sp = false;
  std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_TRUE(v.empty());
  c.hidden = 64;
  v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(format_for_file(v[0], "scenario.json"),
            "scenario.json: \"hidden\" = 64: must be divisible by heads (3)");
  c = {};
  c.recompute = "selective:foo";
  c.sp = true;
  v = validate_run_config(c);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(format_for_file(v[1], "s.json"),
            "s.json: \"sp\" = true: sequence parallelism requires tp > 1 (tp = 1)");
  EXPECT_EQ(format_for_file(v[0], "s.json"),
            "s.json: \"recompute\" = \"selective:foo\": unknown recompute module \"foo\" (known: "
            "core_attn, layernorm, mlp, moe)");
}

TEST(RunConfigValidation, BackendIsARegisteredName) {
  RunConfig c;
  EXPECT_EQ(c.backend, "reference");
  std::string known;
  for (const std::string& b : registered_backends()) known += (known.empty() ? "" : ", ") + b;
  c.backend = "tpu";
  expect_only(c, "--backend tpu: unknown backend (known: " + known + ")");
  // cuda: named as not built into a CPU-only parity; built but without a GPU,
  // unavailable with the reason; with a GPU, valid.
  c.backend = "cuda";
  if (known.find("cuda") == std::string::npos) {
    expect_only(c,
                "--backend cuda: not built into this parity (configure with "
                "-DPARITY_WITH_CUDA=ON against a LibTorch with CUDA; built: " +
                    known + ")");
  } else if (const std::string why = make_backend("cuda")->unavailable_reason(); !why.empty()) {
    expect_only(c, "--backend cuda: " + why);
  } else {
    EXPECT_TRUE(validate_run_config(c).empty());
  }
  EXPECT_EQ(run_config_from_json(nlohmann::json::parse(R"({"backend": "reference"})")).backend,
            "reference");
}

// A backend that cannot capture collectives of ranks sharing a device (the CUDA
// backend's thread ranks on one GPU): graphs whose captured regions hold tp/cp
// collectives are rejected before launch, with the backend's reason.
class CaptureLimitedBackend final : public Backend {
 public:
  std::string_view name() const override { return "capture-limited"; }
  std::string_view transport_name() const override { return "gloo"; }
  std::string captured_collectives_limit(int ranks, bool threads) const override {
    return threads ? std::to_string(ranks) + " thread ranks share 1 device" : "";
  }
  std::unique_ptr<RngTracker> make_rng_tracker() const override {
    return make_backend("reference")->make_rng_tracker();
  }
};
const BackendRegistrar kCaptureLimited("capture-limited",
                                       [] { return std::make_unique<CaptureLimitedBackend>(); });

TEST(RunConfigValidation, GraphsOverCollectivesTheBackendCannotCaptureAreRejected) {
  RunConfig c;
  c.backend = "capture-limited";
  c.tp = 2;
  c.cp = 1;
  c.dp = 2;
  c.graphs = GraphMode::per_layer;
  expect_only(c,
              "--graphs per-layer: the captured regions hold the tp/cp collectives, but on "
              "capture-limited 4 thread ranks share 1 device (use tp = cp = 1 with graphs here, "
              "or one rank per GPU: --launch env under torchrun)");
  c.tp = 1;  // the captured layers issue no collective (dp reduces after the step)
  c.sp = false;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.tp = 2;
  c.graphs = GraphMode::none;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.graphs = GraphMode::full_iteration;
  c.launch = LaunchMode::processes;  // the backend says processes may
  EXPECT_TRUE(validate_run_config(c).empty());
  c.backend = "reference";  // emulated capture: no limit
  c.launch = LaunchMode::threads;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, OutputFoldersMustExist) {
  RunConfig c;
  c.report = "/nonexistent-parity-dir/r.json";
  expect_only(
      c, "--report /nonexistent-parity-dir/r.json: folder /nonexistent-parity-dir does not exist");
  c = {};
  c.trace = "t.jsonl";  // the working directory
  EXPECT_TRUE(validate_run_config(c).empty());
}

// MTP depths and the weight-gradient sites (docs/model.md "Multi-token prediction").
TEST(RunConfigValidation, MtpAndWeightGradientRules) {
  RunConfig c;
  c.mtp_layers = 16;
  expect_only(c,
              "--mtp-layers 16: must be below the sequence length 16 (depth k predicts the token "
              "k+1 positions ahead)");
  c = RunConfig{};
  c.mtp_repeated_layer = true;
  expect_only(c, "--mtp-repeated-layer: needs mtp_layers >= 1 (a layer to repeat)");
  c = RunConfig{};
  c.mtp_layers = 2;
  c.graphs = GraphMode::full_iteration;
  expect_only(c,
              "--mtp-layers 2: multi-token prediction runs eagerly in parity: needs graphs none");
  c = RunConfig{};
  c.observe_wgrad = true;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.graphs = GraphMode::per_layer;
  expect_only(c,
              "--observe-wgrad: weight-gradient sites are fed by gradient hooks, host code a "
              "replayed graph skips: needs graphs none");
}

// A metric whose source kind the model has no site for compares nothing.
TEST(RunConfigValidation, MetricsNeedASiteInTheModel) {
  RunConfig c;
  c.metrics = {"global-output-logits-l2", "global-mtp-logits-l2"};
  expect_only(c,
              "--metrics global-output-logits-l2,global-mtp-logits-l2: metric "
              "global-mtp-logits-l2 reads mtp_logits, which the model has no observation site "
              "for: it needs multi-token prediction layers (--mtp-layers 1)");
  RunConfig with_mtp = c;
  with_mtp.mtp_layers = 1;
  with_mtp.graphs = GraphMode::none;
  EXPECT_TRUE(validate_run_config(with_mtp).empty()) << cli_lines(with_mtp).front();
  c.metrics = {"layer-router-logits-l2"};
  const std::vector<std::string> lines = cli_lines(c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("it needs MoE layers (--moe-experts 4"), std::string::npos) << lines[0];
  c.moe_experts = 4;
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
  // Diagnostics normalize within whole sequences: not under CP (7.10).
  c.metrics = {"layer-router-health"};
  c.cp = 2;
  EXPECT_NE(cli_lines(c).front().find("which the model has no observation site for: it needs MoE "
                                      "layers (--moe-experts) whose router sees whole sequences"),
            std::string::npos)
      << cli_lines(c).front();
  // A router inside a per-layer graph is silent on replay (7.11).
  c.cp = 1;
  c.graphs = GraphMode::per_layer;
  EXPECT_EQ(cli_lines(c).front(),
            "--metrics layer-router-health: metric layer-router-health reads a router site, which "
            "per-layer graphs capture (the whole layer): replays would not observe it; use "
            "--graph-scope attn or mlp (megatron-reference 7.11)");
  // Partial graphs that leave the router eager allow its metrics.
  c.graph_scope = "attn,mlp";
  EXPECT_TRUE(cli_lines(c).empty()) << cli_lines(c).front();
  c.graph_scope = "moe_router";
  EXPECT_NE(cli_lines(c).front().find("per-layer graphs capture (graph-scope moe_router)"),
            std::string::npos)
      << cli_lines(c).front();
  c = RunConfig{};
  c.metrics = {"layer-residual-contribution-l2", "layer-attention-context-l2"};
  EXPECT_TRUE(validate_run_config(c).empty()) << cli_lines(c).front();
}

TEST(FaultRegistry, OneDocLineEachAndExtensible) {
  for (const FaultInfo& f : fault_registry()) {
    EXPECT_FALSE(f.doc.empty()) << f.name;
    EXPECT_EQ(f.doc.find('\n'), std::string::npos) << f.name;
  }
  register_fault(
      {"zz-test-only-fault", "a code-path fault registered by a test", FaultArgument::none});
  RunConfig c;
  c.inject = {"zz-test-only-fault"};
  EXPECT_TRUE(validate_run_config(c).empty());
  const FaultPlan plan = FaultPlan::from_specs(c.inject, 1);
  EXPECT_TRUE(plan.enabled("zz-test-only-fault"));
  EXPECT_FALSE(plan.rank_fault(0).has_value());
  c.inject = {"zz-test-only-fault=2"};
  expect_only(c, "--inject zz-test-only-fault=2: fault zz-test-only-fault takes no argument");
}

TEST(FaultPlan, RankFaults) {
  const FaultPlan plan = FaultPlan::from_specs({"crash-rank=1", "hang-rank=2", "throw-rank=3"}, 4);
  EXPECT_FALSE(plan.rank_fault(0).has_value());
  EXPECT_EQ(plan.rank_fault(1), RankFaultKind::crash);
  EXPECT_EQ(plan.rank_fault(2), RankFaultKind::hang);
  EXPECT_EQ(plan.rank_fault(3), RankFaultKind::throw_error);
  EXPECT_THROW(FaultPlan::from_specs({"nope"}, 4), LaunchSpecError);
  CancelToken cancel;
  try {
    fire_rank_fault(plan, 3, false, cancel);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "injected fault: throw-rank=3");
  }
  EXPECT_THROW(fire_rank_fault(plan, 1, false, cancel), SimulatedCrash);
  cancel.cancel();
  EXPECT_THROW(fire_rank_fault(plan, 2, false, cancel), RankCancelled);
  EXPECT_NO_THROW(fire_rank_fault(plan, 0, false, cancel));
}

}  // namespace
}  // namespace parity
