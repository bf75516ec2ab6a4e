// The command line's flags parse into RunConfig: every flag maps onto its field, the
// defaults are RunConfig's, and every boolean has a negative spelling.
#include <gtest/gtest.h>

#include "harness/cli/cli.h"
#include "harness/config/run_config_fields.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

using testing::parse_parity;

TEST(CommandLine, EveryFlagMapsIntoRunConfig) {
  const ParsedCommand p = parse_parity({"run",
                                        "--tp",
                                        "2",
                                        "--cp",
                                        "2",
                                        "--dp",
                                        "3",
                                        "--ep",
                                        "3",
                                        "--etp",
                                        "1",
                                        "--sp",
                                        "--launch",
                                        "processes",
                                        "--seed",
                                        "99",
                                        "--timeout",
                                        "2.5",
                                        "--report",
                                        "r.json",
                                        "--inject",
                                        "crash-rank=1",
                                        "--inject",
                                        "hang-rank=2",
                                        "--check-collectives",
                                        "--hidden",
                                        "96",
                                        "--heads",
                                        "6",
                                        "--num-query-groups",
                                        "2",
                                        "--kv-channels",
                                        "12",
                                        "--qk-layernorm",
                                        "--ffn-hidden",
                                        "128",
                                        "--layers",
                                        "5",
                                        "--seq",
                                        "32",
                                        "--micro-batch",
                                        "3",
                                        "--microbatches",
                                        "4",
                                        "--steps",
                                        "7",
                                        "--eval-every",
                                        "2",
                                        "--vocab",
                                        "200",
                                        "--dtype",
                                        "bf16",
                                        "--fp32-residual",
                                        "--dropout",
                                        "0.1",
                                        "--norm",
                                        "rmsnorm",
                                        "--activation",
                                        "swiglu",
                                        "--position-embedding",
                                        "rope",
                                        "--rotary-base",
                                        "500000",
                                        "--rotary-percent",
                                        "0.5",
                                        "--rotary-interleaved",
                                        "--norm-epsilon",
                                        "1e-6",
                                        "--no-untie",
                                        "--no-bias-linear",
                                        "--recompute",
                                        "selective:core_attn,mlp",
                                        "--recompute-layers",
                                        "2",
                                        "--graphs",
                                        "per-layer",
                                        "--graph-warmup",
                                        "0",
                                        "--graph-scope",
                                        "attn,mlp",
                                        "--trace",
                                        "t.jsonl",
                                        "--gather-output",
                                        "--runtime-gather-output",
                                        "off",
                                        "--lr",
                                        "0.25",
                                        "--distributed-optimizer",
                                        "--backend",
                                        "reference",
                                        "--metrics",
                                        "global-output-logits-l2,layer-residual-accumulator-l2",
                                        "--dump",
                                        "d",
                                        "--moe-experts",
                                        "6",
                                        "--moe-topk",
                                        "3",
                                        "--moe-score",
                                        "sqrt-softplus",
                                        "--moe-ffn-hidden",
                                        "48",
                                        "--moe-layers",
                                        "every:2",
                                        "--moe-aux-loss",
                                        "0.01",
                                        "--moe-seq-aux-loss",
                                        "--moe-z-loss",
                                        "0.002",
                                        "--moe-per-layer-logging",
                                        "--moe-expert-bias",
                                        "0.001",
                                        "--moe-capacity-factor",
                                        "1.25",
                                        "--moe-shared-expert-ffn",
                                        "64",
                                        "--moe-force-routing",
                                        "biased",
                                        "--padding-fraction",
                                        "0.25",
                                        "--padding-token-shift",
                                        "3"});
  ASSERT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_EQ(p.command, "run");
  const RunConfig& c = p.config;
  EXPECT_EQ(c.tp, 2);
  EXPECT_EQ(c.cp, 2);
  EXPECT_EQ(c.dp, 3);
  EXPECT_EQ(c.ep, 3);
  EXPECT_EQ(c.etp, 1);
  EXPECT_TRUE(c.sp);
  EXPECT_EQ(c.launch, LaunchMode::processes);
  EXPECT_EQ(c.seed, 99u);
  EXPECT_EQ(c.timeout, 2.5);
  EXPECT_EQ(c.report, "r.json");
  EXPECT_EQ(c.inject, (std::vector<std::string>{"crash-rank=1", "hang-rank=2"}));
  EXPECT_TRUE(c.check_collectives);
  EXPECT_EQ(c.hidden, 96);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(c.num_query_groups, 2);
  EXPECT_EQ(c.kv_channels, 12);
  EXPECT_TRUE(c.qk_layernorm);
  EXPECT_EQ(c.ffn_hidden, 128);
  EXPECT_EQ(c.layers, 5);
  EXPECT_EQ(c.seq, 32);
  EXPECT_EQ(c.micro_batch, 3);
  EXPECT_EQ(c.microbatches, 4);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.eval_every, 2);
  EXPECT_EQ(c.vocab, 200);
  EXPECT_EQ(c.dtype, ModelDType::bf16);
  EXPECT_TRUE(c.fp32_residual);
  EXPECT_EQ(c.dropout, 0.1);
  EXPECT_EQ(c.norm, NormKind::rms_norm);
  EXPECT_EQ(c.activation, ActivationKind::swiglu);
  EXPECT_EQ(c.position_embedding, PositionEmbeddingKind::rope);
  EXPECT_EQ(c.rotary_base, 500000.0);
  EXPECT_EQ(c.rotary_percent, 0.5);
  EXPECT_TRUE(c.rotary_interleaved);
  EXPECT_EQ(c.norm_epsilon, 1e-6);
  EXPECT_FALSE(c.untie);
  EXPECT_FALSE(c.bias_linear);
  EXPECT_EQ(c.recompute, "selective:core_attn,mlp");
  EXPECT_EQ(c.recompute_layers, 2);
  EXPECT_EQ(c.graphs, GraphMode::per_layer);
  EXPECT_EQ(c.graph_warmup, 0);
  EXPECT_EQ(c.graph_scope, "attn,mlp");
  EXPECT_EQ(c.trace, "t.jsonl");
  EXPECT_TRUE(c.gather_output);
  EXPECT_EQ(c.runtime_gather_output, RuntimeGatherOption::off);
  EXPECT_EQ(c.lr, 0.25);
  EXPECT_EQ(c.backend, "reference");
  EXPECT_EQ(c.metrics,
            (std::vector<std::string>{"global-output-logits-l2", "layer-residual-accumulator-l2"}));
  EXPECT_EQ(c.dump, "d");
  EXPECT_EQ(c.moe_experts, 6);
  EXPECT_EQ(c.moe_topk, 3);
  EXPECT_EQ(c.moe_score, RouterScore::sqrt_softplus);
  EXPECT_EQ(c.moe_ffn_hidden, 48);
  EXPECT_EQ(c.moe_layers, "every:2");
  EXPECT_EQ(c.moe_aux_loss, 0.01);
  EXPECT_TRUE(c.moe_seq_aux_loss);
  EXPECT_EQ(c.moe_z_loss, 0.002);
  EXPECT_TRUE(c.moe_per_layer_logging);
  EXPECT_EQ(c.moe_expert_bias, 0.001);
  EXPECT_EQ(c.moe_capacity_factor, 1.25);
  EXPECT_EQ(c.moe_shared_expert_ffn, 64);
  EXPECT_EQ(c.moe_force_routing, ForcedRouting::biased);
  EXPECT_EQ(c.padding_fraction, 0.25);
  EXPECT_EQ(c.padding_token_shift, 3);
  EXPECT_TRUE(c.distributed_optimizer);
  // MTP and the gradient hooks need graphs none, which the call above cannot have.
  const ParsedCommand eager = parse_parity(
      {"run", "--graphs", "none", "--mtp-layers", "2", "--mtp-repeated-layer", "--observe-wgrad"});
  ASSERT_TRUE(eager.errors.empty()) << eager.errors.front();
  EXPECT_EQ(eager.config.mtp_layers, 2);
  EXPECT_TRUE(eager.config.mtp_repeated_layer);
  EXPECT_TRUE(eager.config.observe_wgrad);
  // Pipeline stages need graphs none too; an uneven split, the account flags
  // and a layout string exclude each other (Megatron's rules).
  const ParsedCommand uneven = parse_parity(
      {"run", "--pp", "4", "--layers", "6", "--pp-first-layers", "1", "--pp-last-layers", "1"});
  ASSERT_TRUE(uneven.errors.empty()) << uneven.errors.front();
  EXPECT_EQ(uneven.config.pp, 4);
  EXPECT_EQ(uneven.config.pp_first_layers, 1);
  EXPECT_EQ(uneven.config.pp_last_layers, 1);
  const ParsedCommand accounted =
      parse_parity({"run", "--pp", "2", "--vpp", "2", "--layers", "6", "--microbatches", "2",
                    "--pp-account-embedding", "--pp-account-loss"});
  ASSERT_TRUE(accounted.errors.empty()) << accounted.errors.front();
  EXPECT_EQ(accounted.config.vpp, 2);
  EXPECT_TRUE(accounted.config.pp_account_embedding);
  EXPECT_TRUE(accounted.config.pp_account_loss);
  const ParsedCommand laid_out = parse_parity({"run", "--pp", "2", "--pp-layout", "Et|tL"});
  ASSERT_TRUE(laid_out.errors.empty()) << laid_out.errors.front();
  EXPECT_EQ(laid_out.config.pp_layout, "Et|tL");
  // Packed documents (micro-batch 1, the padded documents within seq).
  const ParsedCommand packed =
      parse_parity({"run", "--packed-seq-lengths", "5,11", "--micro-batch", "1", "--seq", "32"});
  ASSERT_TRUE(packed.errors.empty()) << packed.errors.front();
  EXPECT_EQ(packed.config.packed_seq_lengths, "5,11");
  // The optimizer and the checkpoints: saving in run, resuming inside check.
  const ParsedCommand saving =
      parse_parity({"run", "--optimizer", "adam", "--adam-beta1", "0.8", "--adam-beta2", "0.99",
                    "--adam-eps", "1e-6", "--save-checkpoint", "ck", "--save-every", "1"});
  ASSERT_TRUE(saving.errors.empty()) << saving.errors.front();
  EXPECT_EQ(saving.config.optimizer, OptimizerKind::adam);
  EXPECT_EQ(saving.config.adam_beta1, 0.8);
  EXPECT_EQ(saving.config.adam_beta2, 0.99);
  EXPECT_EQ(saving.config.adam_eps, 1e-6);
  EXPECT_EQ(saving.config.save_checkpoint, "ck");
  EXPECT_EQ(saving.config.save_every, 1);
  const ParsedCommand resumed =
      parse_parity({"check", "--resume-at", "1", "--resume-layout", "dp=1"});
  ASSERT_TRUE(resumed.errors.empty()) << resumed.errors.front();
  EXPECT_EQ(resumed.config.resume_at, 1);
  EXPECT_EQ(resumed.config.resume_layout, "dp=1");
  // Every field of the table was given a non-default value by one of the
  // calls, except the input files: they are read at parse time
  // (tests/cli/test_load_files.cpp passes them with files that fit;
  // tests/cli/test_checkpoint_cli.cpp a checkpoint to --resume).
  const RunConfig defaults;
  for (const RunConfigField& f : run_config_fields())
    if (f.key != "backend" && f.key != "load-weights" && f.key != "load-batch" &&
        f.key != "resume") {
      bool set = false;
      for (const RunConfig* r : {&c, &eager.config, &uneven.config, &accounted.config,
                                 &laid_out.config, &saving.config, &resumed.config, &packed.config})
        set = set || f.get(*r) != f.get(defaults);
      EXPECT_TRUE(set) << f.key;
    }
}

TEST(CommandLine, DefaultsAreRunConfigDefaults) {
  const ParsedCommand p = parse_parity({"run"});
  ASSERT_TRUE(p.errors.empty());
  EXPECT_TRUE(p.config == RunConfig{});
  const ParsedCommand s = parse_parity({"selfcheck"});
  ASSERT_TRUE(s.errors.empty());
  EXPECT_TRUE(s.config == RunConfig{});
}

TEST(CommandLine, EveryBooleanHasANegativeSpelling) {
  int booleans = 0;
  for (const RunConfigField& f : run_config_fields()) {
    if (f.type != FieldType::flag) continue;
    ++booleans;
    const std::string on = "--" + std::string(f.key), off = "--no-" + std::string(f.key);
    std::vector<std::string> extra;
    if (f.key == "sp") extra = {"--tp", "2"};
    if (f.key == "moe-seq-aux-loss") extra = {"--moe-experts", "4", "--moe-aux-loss", "0.01"};
    if (f.key == "moe-per-layer-logging") extra = {"--moe-experts", "4"};
    if (f.key == "mtp-repeated-layer") extra = {"--mtp-layers", "2"};
    if (f.key == "rotary-interleaved") extra = {"--position-embedding", "rope"};
    std::vector<std::string> a = {"run", on};
    a.insert(a.end(), extra.begin(), extra.end());
    ParsedCommand p = parse_parity(a);
    ASSERT_TRUE(p.errors.empty()) << f.key << ": " << p.errors.front();
    EXPECT_EQ(f.get(p.config), true) << on;
    a.push_back(off);
    p = parse_parity(a);
    ASSERT_TRUE(p.errors.empty()) << f.key << ": " << p.errors.front();
    EXPECT_EQ(f.get(p.config), false) << off;
  }
  // sp, check-collectives, fp32-residual, untie, bias-linear, qk-layernorm, rotary-interleaved,
  // gather-output, distributed-optimizer, moe-seq-aux-loss, moe-per-layer-logging,
  // mtp-repeated-layer, observe-wgrad, pp-account-embedding, pp-account-loss
  EXPECT_EQ(booleans, 15);
  // --no-sp over the embedded default (which sets --sp) makes tp 1 valid.
  const ParsedCommand p = parse_parity({"check", "--tp", "1", "--cp", "4", "--no-sp"});
  EXPECT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_FALSE(p.config.sp);
}

}  // namespace
}  // namespace parity::cli
