#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>

#include "harness/backend/registry.h"
#include "harness/config/model_mapping.h"
#include "harness/config/run_config.h"
#include "harness/config/run_config_fields.h"
#include "harness/config/value_sources.h"
#include "harness/runtime/runtime_faults.h"

namespace parity {
namespace {

std::vector<std::string> cli_lines(const RunConfig& c) {
  std::vector<std::string> out;
  for (const ConfigViolation& v : validate_run_config(c)) out.push_back(format_for_cli(v));
  return out;
}

// Exactly one violation, with this text.
void expect_only(const RunConfig& c, const std::string& line) {
  EXPECT_EQ(cli_lines(c), std::vector<std::string>{line});
}

TEST(RunConfigValidation, DefaultsAreValid) { EXPECT_TRUE(validate_run_config(RunConfig{}).empty()); }

TEST(RunConfigValidation, ParallelSizesAtLeastOne) {
  RunConfig c;
  c.tp = 0;
  expect_only(c, "--tp 0: must be >= 1");
  c = {};
  c.cp = -1;
  expect_only(c, "--cp -1: must be >= 1");
  c = {};
  c.dp = 0;
  expect_only(c, "--dp 0: must be >= 1");
}

// Expert parallelism re-slices the cp x dp ranks (Megatron's tp-ep-edp order).
TEST(RunConfigValidation, EpMustDivideCpTimesDp) {
  RunConfig c;
  c.dp = 2;
  c.ep = 3;
  expect_only(c, "--ep 3: must divide cp*dp = 1*2 = 2");
  c.ep = 0;
  expect_only(c, "--ep 0: must be >= 1");
  c.tp = 2;  // tp does not count: expert tensor parallelism is tp itself
  c.ep = 4;
  expect_only(c, "--ep 4: must divide cp*dp = 1*2 = 2");
  c.cp = 2;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, WorldSizeAtMost64) {
  RunConfig c;
  c.cp = 8;
  c.dp = 16;
  expect_only(c, "--dp 16: world size tp*cp*dp = 1*8*16 = 128 exceeds the maximum of 64");
  c.dp = 8;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, ModelSizesAtLeastOne) {
  const std::vector<std::pair<int RunConfig::*, std::string>> fields = {
      {&RunConfig::hidden, "hidden"},         {&RunConfig::heads, "heads"},
      {&RunConfig::ffn_hidden, "ffn-hidden"}, {&RunConfig::layers, "layers"},
      {&RunConfig::seq, "seq"},               {&RunConfig::micro_batch, "micro-batch"},
      {&RunConfig::microbatches, "microbatches"}, {&RunConfig::steps, "steps"},
      {&RunConfig::vocab, "vocab"}};
  for (const auto& [member, name] : fields) {
    RunConfig c;
    c.*member = 0;
    expect_only(c, "--" + name + " 0: must be >= 1");
  }
}

TEST(RunConfigValidation, HiddenDivisibleByHeads) {
  RunConfig c;
  c.heads = 3;
  expect_only(c, "--hidden 64: must be divisible by heads (3)");
}

TEST(RunConfigValidation, RotaryEmbeddingsNeedAnEvenHeadDimension) {
  RunConfig c;
  c.position_embedding = PositionEmbeddingKind::rope;
  EXPECT_TRUE(validate_run_config(c).empty());  // 64 / 4 = 16
  c.hidden = 12;
  expect_only(c,
              "--position-embedding rope: rotary embeddings need an even head dimension "
              "(hidden / heads = 3)");
}

TEST(RunConfigValidation, TensorParallelDivisibilityNamesWhich) {
  RunConfig c;
  c.tp = 3;
  EXPECT_EQ(cli_lines(c), (std::vector<std::string>{
                              "--heads 4: must be divisible by tp (3)",
                              "--ffn-hidden 256: must be divisible by tp (3)",
                              "--vocab 128: must be divisible by tp (3)",
                          }));
  c = {};
  c.tp = 2;
  c.vocab = 127;
  expect_only(c, "--vocab 127: must be divisible by tp (2)");
  c = {};
  c.tp = 4;
  c.heads = 2;
  expect_only(c, "--heads 2: must be divisible by tp (4)");
  c = {};
  c.tp = 2;
  c.ffn_hidden = 255;
  expect_only(c, "--ffn-hidden 255: must be divisible by tp (2)");
  // The rule reads tp: a message can say where tp came from.
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"tp"});
}

// Grouped-query attention: groups divide heads, and (Megatron's
// TransformerConfig) are a multiple or a divisor of tp; with fewer groups than
// TP ranks linear_qkv's rows still split evenly over TP.
TEST(RunConfigValidation, QueryGroupsFollowMegatronsRules) {
  RunConfig c;
  for (int groups : {0, 1, 2, 4}) {
    c.num_query_groups = groups;
    EXPECT_TRUE(validate_run_config(c).empty()) << groups;
  }
  for (int groups : {3, 8}) {
    c.num_query_groups = groups;
    expect_only(c, "--num-query-groups " + std::to_string(groups) +
                       ": must divide heads (4): each group shares its key and value with heads / "
                       "num_query_groups query heads");
    EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"heads"});
  }
  c.num_query_groups = -1;
  expect_only(c, "--num-query-groups -1: must be >= 1 (0 = heads: one group per head)");
  // heads 12, groups 3 over tp 2: neither a multiple nor a divisor.
  c = {};
  c.hidden = 48;
  c.heads = 12;
  c.num_query_groups = 3;
  c.tp = 2;
  expect_only(c,
              "--num-query-groups 3: must be a multiple or divisor of tp (2) (Megatron: "
              "\"num_query_groups must be a multiple or divisor of tensor_model_parallel_size\")");
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"tp"});
  c.num_query_groups = 6;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Fewer groups than ranks (Megatron all-gathers the projection): allowed
  // while (heads + 2 groups) * head_dim splits over tp.
  c = {};
  c.tp = 4;
  c.num_query_groups = 1;  // (4 + 2) * 16 = 96 rows over 4 ranks
  EXPECT_TRUE(validate_run_config(c).empty());
  c.hidden = 12;  // head_dim 3: (4 + 2) * 3 = 18 rows
  c.ffn_hidden = 16;
  expect_only(c,
              "--num-query-groups 1: linear_qkv's width (heads + 2 * num_query_groups) * "
              "head_dim = 18 is not divisible by tp (4) (Megatron's ColumnParallelLinear splits "
              "it evenly over TP)");
  c.num_query_groups = 2;  // (4 + 4) * 3 = 24
  EXPECT_TRUE(validate_run_config(c).empty());
}

// --kv-channels sets the head dimension: hidden need not divide by heads, and
// the rules that read the head dimension (rope, the QKV width) read it.
TEST(RunConfigValidation, KvChannelsSetTheHeadDimension) {
  RunConfig c;
  c.hidden = 66;
  c.kv_channels = 16;
  EXPECT_TRUE(validate_run_config(c).empty());
  c.kv_channels = 0;
  expect_only(c, "--hidden 66: must be divisible by heads (4)");
  c = {};
  c.kv_channels = -1;
  expect_only(c, "--kv-channels -1: must be >= 1 (0 = hidden / heads)");
  c = {};
  c.position_embedding = PositionEmbeddingKind::rope;
  c.kv_channels = 5;
  expect_only(c,
              "--position-embedding rope: rotary embeddings need an even head dimension "
              "(kv_channels = 5)");
  EXPECT_EQ(validate_run_config(c).at(0).involves, std::vector<std::string>{"kv-channels"});
  c = {};
  c.tp = 4;
  c.num_query_groups = 1;
  c.kv_channels = 3;  // (4 + 2) * 3 = 18 rows over 4 ranks
  expect_only(c,
              "--num-query-groups 1: linear_qkv's width (heads + 2 * num_query_groups) * "
              "head_dim = 18 is not divisible by tp (4) (Megatron's ColumnParallelLinear splits "
              "it evenly over TP)");
}

TEST(RunConfigValidation, SequenceParallelNeedsTensorParallel) {
  RunConfig c;
  c.sp = true;
  expect_only(c, "--sp: sequence parallelism requires tp > 1 (tp = 1)");
  c.tp = 2;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, SequenceLayout) {
  RunConfig c;
  c.cp = 2;
  c.seq = 6;
  expect_only(c, "--seq 6: sequence length 6 is not divisible by 2*cp = 4 "
                 "(context-parallel load-balanced layout)");
  c = {};
  c.tp = 2;
  c.sp = true;
  c.seq = 15;
  expect_only(c, "--seq 15: sequence length 15 is not divisible by tp = 2 (sequence parallelism)");
  c = {};
  c.tp = 2;
  c.sp = true;
  c.cp = 2;
  c.seq = 12;
  expect_only(c, "--seq 12: sequence length 12 is not divisible by 2*cp*tp = 8 "
                 "(context-parallel load-balanced chunks, each split over tp by sequence "
                 "parallelism)");
  c.seq = 16;
  EXPECT_TRUE(validate_run_config(c).empty());
  // Without SP the sequence need not divide by tp; without CP not by 2.
  c = {};
  c.tp = 2;
  c.seq = 15;
  EXPECT_TRUE(validate_run_config(c).empty());
}

TEST(RunConfigValidation, GlobalBatchIsPerDpRankSoAlwaysDivisible) {
  RunConfig c;
  c.dp = 4;
  c.micro_batch = 3;
  c.microbatches = 1;
  EXPECT_TRUE(validate_run_config(c).empty());
  EXPECT_EQ(c.global_batch(), 12);
}

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

// Issue 10: a metric whose source kind the model has no site for compares nothing.
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

// The field table drives every numeric range: each field with a range rejects
// a value outside it, naming its key and the rule.
TEST(RunConfigFields, EveryRangeRejectsAValueOutsideIt) {
  int ranged = 0;
  for (const RunConfigField& f : run_config_fields()) {
    if (!f.range) {
      EXPECT_TRUE(f.type != FieldType::integer && f.type != FieldType::real)
          << f.key << " has no range";
      continue;
    }
    ++ranged;
    const double outside = std::isfinite(f.range->lo) ? f.range->lo - 1 : f.range->hi + 1;
    nlohmann::json j = nlohmann::json::object();
    j[std::string(f.key)] = f.type == FieldType::integer ? nlohmann::json(static_cast<int>(outside))
                                                         : nlohmann::json(outside);
    const std::vector<ConfigViolation> v = validate_run_config(run_config_from_json(j));
    ASSERT_FALSE(v.empty()) << f.key;
    EXPECT_EQ(v[0].field, f.key);
    EXPECT_EQ(v[0].rule, f.range->rule);
  }
  EXPECT_EQ(ranged, 45);
}

TEST(RunConfigFields, KeysAreUniqueAndCliSpelled) {
  std::set<std::string> keys;
  for (const RunConfigField& f : run_config_fields()) {
    EXPECT_TRUE(keys.insert(std::string(f.key)).second) << f.key;
    EXPECT_EQ(std::string(f.key).find('_'), std::string::npos) << f.key;
    EXPECT_FALSE(f.help.empty()) << f.key;
  }
  std::string rule;
  EXPECT_FALSE(field_value_from_text(*find_run_config_field("seed"), {"-5"}, &rule));
  EXPECT_EQ(rule, "must be a non-negative integer");
  EXPECT_FALSE(field_value_from_text(*find_run_config_field("tp"), {"99999999999"}, &rule));
  EXPECT_EQ(rule, "expected an integer that fits in 32 bits");
  EXPECT_FALSE(field_value_from_text(*find_run_config_field("lr"), {"nan"}, &rule));
  EXPECT_EQ(rule, "expected a finite number");
  EXPECT_EQ(field_value_from_text(*find_run_config_field("seed"), {"18446744073709551615"}, &rule),
            nlohmann::json(18446744073709551615ull));
}

// ModelConfig::violations is the one home of the model's rules; the run-config
// validator names RunConfig's keys and the other keys each rule reads.
TEST(RunConfigValidation, ModelRulesMapOntoRunKeys) {
  RunConfig c;
  c.sp = true;
  std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "sp");
  EXPECT_EQ(v[0].kind, ConfigViolation::Kind::flag);
  EXPECT_EQ(v[0].involves, std::vector<std::string>{"tp"});
  c = {};
  c.recompute = "full-uniform";
  c.graphs = GraphMode::per_layer;
  v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "recompute");
  EXPECT_EQ(v[0].value, "full-uniform");
  EXPECT_EQ(v[0].involves, std::vector<std::string>{"graphs"});
  // The model reports every broken rule, not only the first (validate() throws that one).
  const std::vector<ModelConfigViolation> all = ModelConfig{}.violations(3, 1, 1);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].field, "heads");
  EXPECT_EQ(all[1].field, "ffn_hidden");
  EXPECT_EQ(all[2].field, "vocab");
  // The model's own SP layout needs each CP rank's share divisible by tp; parity's
  // runs are stricter (every load-balanced chunk), a run-level rule.
  ModelConfig sp;
  sp.seq = 8;
  sp.sequence_parallel = true;
  EXPECT_TRUE(sp.violations(4, 2, 1).empty());
  RunConfig strict;
  strict.tp = 4, strict.cp = 2, strict.sp = true, strict.seq = 8;
  expect_only(strict,
              "--seq 8: sequence length 8 is not divisible by 2*cp*tp = 16 (context-parallel "
              "load-balanced chunks, each split over tp by sequence parallelism)");
  // The same rules, straight from the model.
  const std::vector<ModelConfigViolation> m = model_config_from(c).violations(1, 1, 1);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].field, "recompute");
}

TEST(ValueSources, DescribeNamesTheSourceAndTheOverride) {
  RunConfig c;
  c.sp = true;
  c.graphs = GraphMode::per_layer;
  c.recompute = "full-block";
  ValueSources s;
  s.set("sp", {ValueOrigin::embedded_default, ""});
  s.set("graphs", {ValueOrigin::scenario_file, "f.json"});
  s.set("recompute", {ValueOrigin::command_line, ""});
  std::vector<std::string> lines;
  for (const ConfigViolation& v : validate_run_config(c))
    lines.push_back(describe_violation(v, s, c));
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "--sp: sequence parallelism requires tp > 1 (tp = 1) (the embedded default "
                       "sets --sp; pass --no-sp)",
                       "--recompute full-block: full recompute cannot be combined with per-layer "
                       "graphs (as in Megatron: \"recompute_granularity must not be full when "
                       "CUDA Graphs are enabled\"); use selective (f.json sets --graphs per-layer; "
                       "pass --graphs to override it)"}));
  // The embedded default records only the keys it changes.
  ValueSources embedded;
  RunConfig e;
  e.tp = 2;
  embedded.set_differing(e, {ValueOrigin::embedded_default, ""});
  EXPECT_EQ(embedded.of("tp").origin, ValueOrigin::embedded_default);
  EXPECT_EQ(embedded.of("cp").origin, ValueOrigin::built_in_default);
}

TEST(FaultRegistry, OneDocLineEachAndExtensible) {
  for (const FaultInfo& f : fault_registry()) {
    EXPECT_FALSE(f.doc.empty()) << f.name;
    EXPECT_EQ(f.doc.find('\n'), std::string::npos) << f.name;
  }
  register_fault({"zz-test-only-fault", "a code-path fault registered by a test", FaultArgument::none});
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

// ---------------------------------------------------------------- JSON

RunConfig unusual() {
  RunConfig c;
  c.tp = 2;
  c.cp = 2;
  c.dp = 3;
  c.ep = 3;
  c.sp = true;
  c.launch = LaunchMode::processes;
  c.seed = 18446744073709551557ull;
  c.timeout = 2.75;
  c.report = "r.json";
  c.inject = {"crash-rank=1", "hang-rank=2"};
  c.check_collectives = true;
  c.hidden = 96;
  c.heads = 6;
  c.num_query_groups = 2;
  c.kv_channels = 12;
  c.qk_layernorm = true;
  c.ffn_hidden = 128;
  c.layers = 5;
  c.seq = 32;
  c.micro_batch = 3;
  c.microbatches = 4;
  c.steps = 7;
  c.vocab = 200;
  c.dtype = ModelDType::bf16;
  c.fp32_residual = true;
  c.dropout = 0.1;
  c.norm = NormKind::rms_norm;
  c.activation = ActivationKind::swiglu;
  c.position_embedding = PositionEmbeddingKind::rope;
  c.rotary_base = 500000.0;
  c.rotary_percent = 0.25;
  c.rotary_interleaved = true;
  c.norm_epsilon = 1e-6;
  c.recompute = "selective:core_attn,mlp";
  c.recompute_layers = 2;
  c.graphs = GraphMode::full_iteration;
  c.graph_warmup = 0;
  c.trace = "t.jsonl";
  c.gather_output = true;
  c.runtime_gather_output = RuntimeGatherOption::off;
  c.lr = 0.25;
  c.backend = "cuda";  // a name only: JSON does not consult the registry
  c.metrics = {"global-output-logits-l2"};
  return c;
}

TEST(RunConfigJson, RoundTripEveryField) {
  const RunConfig c = unusual();
  const nlohmann::json j = to_json(c);
  const RunConfig back = run_config_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_TRUE(back == c);
  EXPECT_EQ(to_json(back), j);
  // Every field differs from its default, so a field the JSON forgot fails above.
  EXPECT_TRUE(run_config_from_json(to_json(RunConfig{})) == RunConfig{});
  EXPECT_FALSE(c == RunConfig{});
}

TEST(RunConfigJson, KeysAreTheFlagNames) {
  const nlohmann::json j = to_json(RunConfig{});
  EXPECT_EQ(j.size(), run_config_keys().size());
  for (const std::string& k : run_config_keys()) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j.contains("ffn-hidden"));
  EXPECT_TRUE(j.contains("micro-batch"));
  EXPECT_EQ(j["graphs"], "none");
  EXPECT_EQ(j["recompute"], "none");
}

TEST(RunConfigJson, MissingKeysKeepDefaults) {
  const RunConfig c = run_config_from_json(nlohmann::json::parse(R"({"tp": 2, "dtype": "fp64"})"));
  EXPECT_EQ(c.tp, 2);
  EXPECT_EQ(c.dtype, ModelDType::fp64);
  EXPECT_EQ(c.hidden, RunConfig{}.hidden);
}

std::string parse_error(const std::string& text) {
  try {
    run_config_from_json(nlohmann::json::parse(text));
  } catch (const ConfigParseError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RunConfigJson, UnknownKeysAndWrongTypesNameTheKey) {
  const std::string unknown = parse_error(R"({"tpp": 2})");
  EXPECT_EQ(unknown,
            "unknown key \"tpp\": did you mean \"tp\", \"pp\" or \"vpp\"? (parity list options "
            "lists the " +
                std::to_string(run_config_fields().size()) + " keys)");
  EXPECT_EQ(unknown.find('\n'), std::string::npos);
  EXPECT_EQ(parse_error(R"({"tp": "two"})"), "\"tp\" = \"two\": expected an integer");
  EXPECT_EQ(parse_error(R"({"tp": 1.5})"), "\"tp\" = 1.5: expected an integer");
  EXPECT_EQ(parse_error(R"({"hidden": 4294967296})"),
            "\"hidden\" = 4294967296: expected an integer that fits in 32 bits");
  EXPECT_EQ(parse_error(R"({"sp": 1})"), "\"sp\" = 1: expected true or false");
  EXPECT_EQ(parse_error(R"({"dropout": "0.1"})"), "\"dropout\" = \"0.1\": expected a number");
  EXPECT_EQ(parse_error(R"({"dtype": "fp16"})"),
            "\"dtype\" = \"fp16\": expected one of fp32, fp64, bf16");
  EXPECT_EQ(parse_error(R"({"graphs": "per_layer"})"),
            "\"graphs\" = \"per_layer\": expected one of none, per-layer, full-iteration");
  EXPECT_EQ(parse_error(R"({"inject": "crash-rank=1"})"),
            "\"inject\" = \"crash-rank=1\": expected an array of strings");
  EXPECT_EQ(parse_error(R"({"seed": -1})"), "\"seed\" = -1: expected a non-negative integer");
  EXPECT_EQ(parse_error(R"([1, 2])"), "expected a JSON object of run options, got [1,2]");
  // Negative sizes parse (validation reports them).
  EXPECT_EQ(run_config_from_json(nlohmann::json::parse(R"({"tp": -1})")).tp, -1);
}

// ---------------------------------------------------------------- RunConfig -> ModelConfig

TEST(ModelMapping, EveryModelFieldIsMapped) {
  const RunConfig c = unusual();
  const ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.hidden, 96);
  EXPECT_EQ(m.heads, 6);
  EXPECT_EQ(m.num_query_groups, 2);
  EXPECT_EQ(m.kv_channels, 12);
  EXPECT_TRUE(m.qk_layernorm);
  EXPECT_EQ(m.ffn_hidden, 128);
  EXPECT_EQ(m.layers, 5);
  EXPECT_EQ(m.seq, 32);
  EXPECT_EQ(m.micro_batch, 3);
  EXPECT_EQ(m.vocab, 200);
  EXPECT_EQ(m.dtype, ModelDType::bf16);
  EXPECT_TRUE(m.fp32_residual);
  EXPECT_EQ(m.dropout, 0.1);
  EXPECT_EQ(m.norm, NormKind::rms_norm);
  EXPECT_EQ(m.activation, ActivationKind::swiglu);
  EXPECT_EQ(m.position_embedding, PositionEmbeddingKind::rope);
  EXPECT_EQ(m.rotary_base, 500000.0);
  EXPECT_EQ(m.rotary_percent, 0.25);
  EXPECT_TRUE(m.rotary_interleaved);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.rotary_dim(), 3);  // int(12 * 0.25)
  EXPECT_EQ(m.rotary_channels(), 4);
  EXPECT_EQ(m.seed, 18446744073709551557ull);
  EXPECT_TRUE(m.sequence_parallel);
  EXPECT_TRUE(m.gather_output);
  EXPECT_EQ(m.runtime_gather_output, std::optional<bool>(false));
  const ModelConfig d = model_config_from(RunConfig{});
  EXPECT_EQ(d.dtype, ModelDType::fp32);
  EXPECT_EQ(d.norm, NormKind::layer_norm);
  EXPECT_EQ(d.activation, ActivationKind::gelu);
  EXPECT_FALSE(d.sequence_parallel);
  EXPECT_FALSE(d.gather_output);
  EXPECT_FALSE(d.runtime_gather_output.has_value());
  EXPECT_EQ(d.query_groups(), d.heads);
  EXPECT_EQ(d.head_dim(), 64 / 4);
  EXPECT_FALSE(d.qk_layernorm);
  EXPECT_EQ(d.rotary_base, 10000.0);
  EXPECT_EQ(d.rotary_percent, 1.0);
  EXPECT_FALSE(d.rotary_interleaved);
  EXPECT_EQ(d.norm_eps, 1e-5);
  EXPECT_EQ(d.rotary_channels(), d.head_dim());
}

// validate_run_config is the one rule set: every config it accepts maps onto a
// ModelConfig that the model's own defensive check accepts too (so a valid run
// never fails inside a rank for a config reason). Exhaustive over a grid that
// crosses every divisibility rule.
TEST(ModelMapping, EveryValidRunConfigIsAValidModelConfig) {
  int accepted = 0, rejected = 0;
  for (int tp : {1, 2, 3, 4})
    for (int cp : {1, 2, 3})
      for (int dp : {1, 2})
        for (bool sp : {false, true})
          for (int heads : {1, 2, 3, 4, 6})
            for (int groups : {0, 1, 2, 3})
              for (int hidden : {12, 16, 24, 36})
                for (int ffn : {6, 8, 12})
                  for (int vocab : {12, 20})
                    for (int seq : {4, 6, 8, 12, 16, 24}) {
                      RunConfig c;
                      c.tp = tp, c.cp = cp, c.dp = dp, c.sp = sp, c.heads = heads;
                      c.num_query_groups = groups;
                      c.hidden = hidden, c.ffn_hidden = ffn, c.vocab = vocab, c.seq = seq;
                      if (!validate_run_config(c).empty()) {
                        ++rejected;
                        continue;
                      }
                      ++accepted;
                      try {
                        model_config_from(c).validate(tp, cp, dp);
                      } catch (const ModelConfigError& e) {
                        ADD_FAILURE()
                            << "validate_run_config accepted what the model rejects: " << e.what();
                      }
                    }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 100);
}

TEST(ModelMapping, RecomputeAndGraphs) {
  RunConfig c;
  c.layers = 4;
  c.recompute = "full-uniform";
  c.recompute_layers = 2;
  c.graphs = GraphMode::full_iteration;
  c.graph_warmup = 3;
  ModelConfig m = model_config_from(c);
  EXPECT_EQ(m.recompute, RecomputeKind::full_uniform);
  EXPECT_EQ(m.recompute_layers, 2);
  EXPECT_EQ(m.graphs, GraphMode::full_iteration);
  EXPECT_EQ(m.graph_warmup, 3);
  c.recompute = "selective:mlp,core_attn";
  c.graphs = GraphMode::per_layer;
  m = model_config_from(c);
  EXPECT_EQ(m.recompute, RecomputeKind::selective);
  EXPECT_TRUE(m.recompute_modules.core_attn && m.recompute_modules.mlp);
  EXPECT_FALSE(m.recompute_modules.layernorm);
  EXPECT_EQ(m.graphs, GraphMode::per_layer);
  EXPECT_EQ(model_config_from(RunConfig{}).recompute, RecomputeKind::none);
}

}  // namespace
}  // namespace parity
