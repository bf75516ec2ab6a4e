#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"
#include "harness/config/run_config_fields.h"

namespace parity::cli {
namespace {

struct Args {
  std::vector<std::string> strings;
  std::vector<const char*> argv;
  explicit Args(std::vector<std::string> a) : strings(std::move(a)) {
    strings.insert(strings.begin(), "parity");
    for (const std::string& s : strings) argv.push_back(s.c_str());
  }
  int argc() const { return static_cast<int>(argv.size()); }
};

ParsedCommand parse(std::vector<std::string> a) {
  Args args(std::move(a));
  std::ostringstream out;
  return parse_command_line(args.argc(), args.argv.data(), out);
}

TEST(CommandLine, EveryFlagMapsIntoRunConfig) {
  const ParsedCommand p = parse({"run",
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
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_TRUE(c.fp32_residual);
  EXPECT_EQ(c.dropout, 0.1);
  EXPECT_EQ(c.norm, NormOption::rmsnorm);
  EXPECT_EQ(c.activation, ActivationOption::swiglu);
  EXPECT_EQ(c.position_embedding, PositionEmbeddingOption::rope);
  EXPECT_EQ(c.rotary_base, 500000.0);
  EXPECT_EQ(c.rotary_percent, 0.5);
  EXPECT_TRUE(c.rotary_interleaved);
  EXPECT_EQ(c.norm_epsilon, 1e-6);
  EXPECT_FALSE(c.untie);
  EXPECT_FALSE(c.bias_linear);
  EXPECT_EQ(c.recompute, "selective:core_attn,mlp");
  EXPECT_EQ(c.recompute_layers, 2);
  EXPECT_EQ(c.graphs, GraphOption::per_layer);
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
  EXPECT_EQ(c.moe_score, RouterScoreOption::sqrt_softplus);
  EXPECT_EQ(c.moe_ffn_hidden, 48);
  EXPECT_EQ(c.moe_layers, "every:2");
  EXPECT_EQ(c.moe_aux_loss, 0.01);
  EXPECT_TRUE(c.moe_seq_aux_loss);
  EXPECT_EQ(c.moe_z_loss, 0.002);
  EXPECT_TRUE(c.moe_per_layer_logging);
  EXPECT_EQ(c.moe_expert_bias, 0.001);
  EXPECT_EQ(c.moe_capacity_factor, 1.25);
  EXPECT_EQ(c.moe_shared_expert_ffn, 64);
  EXPECT_EQ(c.moe_force_routing, ForceRoutingOption::biased);
  EXPECT_EQ(c.padding_fraction, 0.25);
  EXPECT_EQ(c.padding_token_shift, 3);
  EXPECT_TRUE(c.distributed_optimizer);
  // MTP and the gradient hooks need graphs none, which the call above cannot have.
  const ParsedCommand eager = parse(
      {"run", "--graphs", "none", "--mtp-layers", "2", "--mtp-repeated-layer", "--observe-wgrad"});
  ASSERT_TRUE(eager.errors.empty()) << eager.errors.front();
  EXPECT_EQ(eager.config.mtp_layers, 2);
  EXPECT_TRUE(eager.config.mtp_repeated_layer);
  EXPECT_TRUE(eager.config.observe_wgrad);
  // Pipeline stages need graphs none too; an uneven split, the account flags
  // and a layout string exclude each other (Megatron's rules).
  const ParsedCommand uneven = parse(
      {"run", "--pp", "4", "--layers", "6", "--pp-first-layers", "1", "--pp-last-layers", "1"});
  ASSERT_TRUE(uneven.errors.empty()) << uneven.errors.front();
  EXPECT_EQ(uneven.config.pp, 4);
  EXPECT_EQ(uneven.config.pp_first_layers, 1);
  EXPECT_EQ(uneven.config.pp_last_layers, 1);
  const ParsedCommand accounted =
      parse({"run", "--pp", "2", "--vpp", "2", "--layers", "6", "--microbatches", "2",
             "--pp-account-embedding", "--pp-account-loss"});
  ASSERT_TRUE(accounted.errors.empty()) << accounted.errors.front();
  EXPECT_EQ(accounted.config.vpp, 2);
  EXPECT_TRUE(accounted.config.pp_account_embedding);
  EXPECT_TRUE(accounted.config.pp_account_loss);
  const ParsedCommand laid_out = parse({"run", "--pp", "2", "--pp-layout", "Et|tL"});
  ASSERT_TRUE(laid_out.errors.empty()) << laid_out.errors.front();
  EXPECT_EQ(laid_out.config.pp_layout, "Et|tL");
  // Packed documents (micro-batch 1, the padded documents within seq).
  const ParsedCommand packed =
      parse({"run", "--packed-seq-lengths", "5,11", "--micro-batch", "1", "--seq", "32"});
  ASSERT_TRUE(packed.errors.empty()) << packed.errors.front();
  EXPECT_EQ(packed.config.packed_seq_lengths, "5,11");
  // The optimizer and the checkpoints: saving in run, resuming inside check.
  const ParsedCommand saving =
      parse({"run", "--optimizer", "adam", "--adam-beta1", "0.8", "--adam-beta2", "0.99",
             "--adam-eps", "1e-6", "--save-checkpoint", "ck", "--save-every", "1"});
  ASSERT_TRUE(saving.errors.empty()) << saving.errors.front();
  EXPECT_EQ(saving.config.optimizer, OptimizerOption::adam);
  EXPECT_EQ(saving.config.adam_beta1, 0.8);
  EXPECT_EQ(saving.config.adam_beta2, 0.99);
  EXPECT_EQ(saving.config.adam_eps, 1e-6);
  EXPECT_EQ(saving.config.save_checkpoint, "ck");
  EXPECT_EQ(saving.config.save_every, 1);
  const ParsedCommand resumed = parse({"check", "--resume-at", "1", "--resume-layout", "dp=1"});
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
  const ParsedCommand p = parse({"run"});
  ASSERT_TRUE(p.errors.empty());
  EXPECT_TRUE(p.config == RunConfig{});
  const ParsedCommand s = parse({"selfcheck"});
  ASSERT_TRUE(s.errors.empty());
  EXPECT_TRUE(s.config == RunConfig{});
}

TEST(CommandLine, ViolationsAreOneLineEach) {
  ParsedCommand p = parse({"run", "--tp", "3", "--dtype", "fp16"});
  // The model's rules name the field they constrain, and the values the user
  // did not type say where they came from.
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "--dtype fp16: must be one of fp32, fp64, bf16",
                          "--heads 4: must be divisible by tp (3) (the built-in default sets "
                          "--heads 4; pass --heads to override it)",
                          "--ffn-hidden 256: must be divisible by tp (3) (the built-in default "
                          "sets --ffn-hidden 256; pass --ffn-hidden to override it)",
                          "--vocab 128: must be divisible by tp (3) (the built-in default sets "
                          "--vocab 128; pass --vocab to override it)",
                      }));
  p = parse({"selfcheck", "--inject", "crash-rank=1", "garbage"});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].find('\n'), std::string::npos);
  EXPECT_EQ(p.errors[0].rfind("parity: ", 0), 0u) << p.errors[0];
}

TEST(CommandLine, ExitCodes) {
  std::ostringstream out, err;
  auto run = [&](std::vector<std::string> a) {
    Args args(std::move(a));
    out.str("");
    err.str("");
    return run_command_line(args.argc(), args.argv.data(), out, err);
  };
  EXPECT_EQ(run({"selfcheck", "--tp", "2"}), kExitOk) << err.str();
  EXPECT_NE(out.str().find("self-check passed: 2 rank(s)"), std::string::npos) << out.str();
  EXPECT_EQ(run({"run", "--sp"}), kExitBadInput);
  EXPECT_EQ(err.str(), "--sp: sequence parallelism requires tp > 1 (tp = 1)\n");
  EXPECT_EQ(run({"selfcheck", "--tp", "2", "--inject", "throw-rank=1", "--timeout", "5"}),
            kExitRankFailure);
  EXPECT_NE(err.str().find("rank 1 (tp=1, cp=0, dp=0) threw: injected fault: throw-rank=1"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(run({"mutants", "--fault", "boom"}), kExitBadInput);
  EXPECT_NE(err.str().find("--fault boom: not a code-path fault"), std::string::npos) << err.str();
  EXPECT_EQ(run({"check", "--help"}), kExitOk);
  EXPECT_NE(out.str().find("--ffn-hidden"), std::string::npos);
}

TEST(CommandLine, ReportIsWrittenAtomically) {
  const files::TempDir dir("parity-cli-test");
  const std::string path = dir.path() + "/report.json";
  Args args({"selfcheck", "--tp", "2", "--dp", "2", "--report", path});
  std::ostringstream out, err;
  ASSERT_EQ(run_command_line(args.argc(), args.argv.data(), out, err), kExitOk) << err.str();
  const nlohmann::json report = nlohmann::json::parse(files::read(path).value_or("null"));
  EXPECT_EQ(report["command"], "selfcheck");
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["config"]["tp"], 2);
  EXPECT_EQ(report["launch"]["results"].size(), 4u);
  EXPECT_TRUE(report["launch"]["ok"].get<bool>());
  // Only the report itself: the temp file was renamed over it.
  DIR* d = ::opendir(dir.path().c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..")
      names.push_back(e->d_name);
  ::closedir(d);
  EXPECT_EQ(names, std::vector<std::string>{"report.json"});
}

// Every boolean has a negative spelling that wins when it comes last.
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
    ParsedCommand p = parse(a);
    ASSERT_TRUE(p.errors.empty()) << f.key << ": " << p.errors.front();
    EXPECT_EQ(f.get(p.config), true) << on;
    a.push_back(off);
    p = parse(a);
    ASSERT_TRUE(p.errors.empty()) << f.key << ": " << p.errors.front();
    EXPECT_EQ(f.get(p.config), false) << off;
  }
  // sp, check-collectives, fp32-residual, untie, bias-linear, qk-layernorm, rotary-interleaved,
  // gather-output, distributed-optimizer, moe-seq-aux-loss, moe-per-layer-logging,
  // mtp-repeated-layer, observe-wgrad, pp-account-embedding, pp-account-loss
  EXPECT_EQ(booleans, 15);
  // --no-sp over the embedded default (which sets --sp) makes tp 1 valid.
  const ParsedCommand p = parse({"check", "--tp", "1", "--cp", "4", "--no-sp"});
  EXPECT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_FALSE(p.config.sp);
}

TEST(CommandLine, HelpListsNegationsAndOnlyRealCommands) {
  std::ostringstream out, err;
  Args top({"--help"});
  ASSERT_EQ(run_command_line(top.argc(), top.argv.data(), out, err), kExitOk);
  for (const char* command :
       {"check", "selfcheck", "run", "repro", "mutants", "diff", "sweep", "list"})
    EXPECT_NE(out.str().find(command), std::string::npos) << command;
  out.str("");
  Args run({"run", "--help"});
  ASSERT_EQ(run_command_line(run.argc(), run.argv.data(), out, err), kExitOk);
  for (const char* negation : {"--no-sp", "--no-fp32-residual", "--no-gather-output",
                               "--no-check-collectives", "--backend"})
    EXPECT_NE(out.str().find(negation), std::string::npos) << negation << " in\n" << out.str();
  Args unknown({"sweeps"});
  EXPECT_EQ(run_command_line(unknown.argc(), unknown.argv.data(), out, err), kExitBadInput);
  EXPECT_EQ(err.str(),
            "parity: unknown command \"sweeps\": did you mean \"sweep\"? (known: check, "
            "selfcheck, run, repro, mutants, diff, sweep, list; see parity --help)\n");
}

// Issue 10: the embedded default's values are named as such.
TEST(CommandLine, ErrorsNameTheSourceOfValuesNotTyped) {
  ParsedCommand p = parse({"check", "--tp", "1", "--cp", "4"});
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "--sp: sequence parallelism requires tp > 1 (tp = 1) (the embedded "
                          "default sets --sp; pass --no-sp)"}));
  p = parse({"check", "--recompute", "full-uniform"});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].rfind("--recompute full-uniform: full recompute cannot be combined with "
                              "per-layer graphs",
                              0),
            0u)
      << p.errors[0];
  EXPECT_NE(p.errors[0].find("(the embedded default sets --graphs per-layer; pass --graphs to "
                             "override it)"),
            std::string::npos)
      << p.errors[0];
  // A value the user typed carries no note.
  p = parse({"run", "--sp"});
  EXPECT_EQ(p.errors,
            (std::vector<std::string>{"--sp: sequence parallelism requires tp > 1 (tp = 1)"}));
  // A scenario file names itself, for its own keys and for the keys a rule reads.
  files::TempDir dir("parity-cli-sources");
  const std::string file = dir.path() + "/s.json";
  files::write_atomically(file, R"({"graphs": "per-layer", "sp": true})");
  p = parse({"check", file, "--recompute", "full-block"});
  ASSERT_EQ(p.errors.size(), 2u) << p.errors[0];
  EXPECT_EQ(p.errors[0], file + ": \"sp\" = true: sequence parallelism requires tp > 1 (tp = 1)");
  EXPECT_NE(
      p.errors[1].find("(" + file + " sets --graphs per-layer; pass --graphs to override it)"),
      std::string::npos)
      << p.errors[1];
}

TEST(CommandLine, MetricsTheModelCannotObserveAreRejected) {
  for (const char* metric :
       {"layer-router-logits-l2", "layer-router-decision-entropy", "global-mtp-logits-l2"}) {
    for (const char* command : {"run", "check"}) {
      const ParsedCommand p = parse({command, "--metrics", metric});
      ASSERT_EQ(p.errors.size(), 1u) << command << " " << metric;
      EXPECT_EQ(p.errors[0].rfind(
                    "--metrics " + std::string(metric) + ": metric " + metric + " reads ", 0),
                0u)
          << p.errors[0];
      EXPECT_NE(p.errors[0].find("it needs "), std::string::npos) << p.errors[0];
    }
  }
  EXPECT_TRUE(parse({"run", "--metrics", "layer-residual-contribution-l2,global-output-logits-l2"})
                  .errors.empty());
}

// ------------------------------------------------------------ every option, a bad value

struct BadValue {
  std::string flag;               // "--tp"
  std::vector<std::string> args;  // the command-line words after the command
};

void PrintTo(const BadValue& b, std::ostream* os) {
  *os << b.flag;
  for (const std::string& a : b.args) *os << " " << a;
}

// One bad value per run option; the test below fails when a field has none.
std::vector<BadValue> bad_values() {
  auto one = [](std::string flag, std::string value) {
    return BadValue{"--" + flag, {"--" + flag, value}};
  };
  return {
      one("tp", "0"),
      one("cp", "-2"),
      one("dp", "two"),
      {"--ep", {"--ep", "3", "--dp", "2"}},  // must divide cp*dp
      one("etp", "-1"),
      {"--sp", {"--sp=maybe"}},
      one("launch", "mpi"),
      one("backend", "cuda-nope"),
      one("seed", "-5"),
      one("timeout", "-1"),
      one("report", "/nonexistent-parity-dir/r.json"),
      one("inject", "boom"),
      {"--check-collectives", {"--check-collectives=maybe"}},
      one("hidden", "0"),
      one("heads", "-1"),
      one("num-query-groups", "3"),  // must divide heads (4)
      one("kv-channels", "-2"),
      {"--qk-layernorm", {"--qk-layernorm=maybe"}},
      one("ffn-hidden", "0"),
      one("layers", "0"),
      one("seq", "0"),
      one("packed-seq-lengths", "5,x"),
      one("micro-batch", "0"),
      one("microbatches", "0"),
      one("steps", "0"),
      one("eval-every", "-1"),
      one("vocab", "1.5"),
      one("dtype", "fp16"),
      {"--fp32-residual", {"--fp32-residual=maybe"}},
      one("dropout", "1.5"),
      one("norm", "batchnorm"),
      one("activation", "relu"),
      one("position-embedding", "alibi"),
      one("rotary-base", "0"),
      {"--rotary-percent", {"--position-embedding", "rope", "--rotary-percent", "1.5"}},
      {"--rotary-interleaved", {"--rotary-interleaved"}},  // needs rope
      one("norm-epsilon", "-1e-5"),
      {"--untie", {"--untie=maybe"}},
      {"--bias-linear", {"--bias-linear=maybe"}},
      one("recompute", "partial"),
      one("recompute-layers", "0"),
      one("graphs", "cuda"),
      one("graph-warmup", "-1"),
      {"--graph-scope", {"--graphs", "per-layer", "--graph-scope", "attn,ffn"}},
      one("trace", "/nonexistent-parity-dir/t.jsonl"),
      {"--gather-output", {"--gather-output=maybe"}},
      one("runtime-gather-output", "sometimes"),
      one("lr", "-0.5"),
      {"--distributed-optimizer", {"--distributed-optimizer=maybe"}},
      one("metrics", "nope"),
      one("load-weights", "/nonexistent-parity-dir/w.safetensors"),
      one("load-batch", "/nonexistent-parity-dir/b.safetensors"),
      one("dump", "/nonexistent-parity-dir/d"),
      one("optimizer", "lamb"),
      one("adam-beta1", "1"),
      one("adam-beta2", "-0.5"),
      one("adam-eps", "0"),
      one("save-checkpoint", "/nonexistent-parity-dir/ck"),
      one("save-every", "-1"),
      one("resume", "/nonexistent-parity-dir/ck"),
      one("resume-at", "-1"),
      {"--resume-layout", {"--resume-layout", "tp=1"}},  // needs --resume-at
      one("moe-experts", "-1"),
      {"--moe-topk", {"--moe-experts", "4", "--moe-topk", "5"}},  // in [1, E]
      one("moe-score", "relu"),
      {"--moe-ffn-hidden", {"--moe-experts", "4", "--moe-ffn-hidden", "-3"}},
      {"--moe-layers", {"--moe-experts", "4", "--moe-layers", "every:0"}},
      one("moe-aux-loss", "-0.1"),
      {"--moe-seq-aux-loss", {"--moe-experts", "4", "--moe-seq-aux-loss"}},  // needs aux loss
      one("moe-z-loss", "-0.1"),
      {"--moe-per-layer-logging", {"--moe-per-layer-logging"}},  // needs experts
      one("moe-expert-bias", "-1"),
      one("moe-capacity-factor", "-2"),
      one("moe-shared-expert-ffn", "-8"),
      one("moe-force-routing", "always"),
      {"--padding-fraction", {"--moe-experts", "4", "--padding-fraction", "1.0"}},
      one("mtp-layers", "-1"),
      {"--mtp-repeated-layer", {"--mtp-repeated-layer"}},                 // needs --mtp-layers
      {"--observe-wgrad", {"--observe-wgrad", "--graphs", "per-layer"}},  // needs graphs none
      one("padding-token-shift", "-1"),
      one("pp", "0"),
      {"--vpp", {"--pp", "2", "--vpp", "2"}},  // 2 layers: one per stage, not divisible by 2 chunks
      one("pp-first-layers", "-1"),
      {"--pp-last-layers", {"--pp", "2", "--pp-last-layers", "5"}},  // more than the layers
      {"--pp-account-embedding", {"--pp-account-embedding=maybe"}},
      {"--pp-account-loss", {"--pp-account-loss=maybe"}},
      {"--pp-layout", {"--pp", "2", "--pp-layout", "Ex|tL"}},  // unknown layer character
  };
}

std::string name_of(const testing::TestParamInfo<BadValue>& info) {
  std::string name = info.param.flag.substr(2);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

class EveryOption : public testing::TestWithParam<BadValue> {};

// The options parity selfcheck takes (the layout and the launch), from its help.
bool selfcheck_takes(const std::string& flag) {
  static const std::string help = [] {
    Args args({"selfcheck", "--help"});
    std::ostringstream out, err;
    run_command_line(args.argc(), args.argv.data(), out, err);
    return out.str();
  }();
  return help.find(flag + " ") != std::string::npos || help.find(flag + ",") != std::string::npos;
}

TEST_P(EveryOption, RejectsABadValueWithExit2NamingTheFlag) {
  for (const char* command : {"run", "selfcheck"}) {
    if (std::string(command) == "selfcheck" && !selfcheck_takes(GetParam().flag)) continue;
    std::vector<std::string> a = {command};
    a.insert(a.end(), GetParam().args.begin(), GetParam().args.end());
    Args args(a);
    std::ostringstream out, err;
    EXPECT_EQ(run_command_line(args.argc(), args.argv.data(), out, err), kExitBadInput)
        << command << ": " << err.str();
    EXPECT_NE(err.str().find(GetParam().flag), std::string::npos) << err.str();
    EXPECT_EQ(err.str().find('\n'), err.str().size() - 1) << "one line: " << err.str();
  }
}

INSTANTIATE_TEST_SUITE_P(CommandLine, EveryOption, testing::ValuesIn(bad_values()), name_of);

TEST(CommandLine, EveryOptionHasABadValueCase) {
  std::vector<std::string> covered;
  for (const BadValue& b : bad_values()) covered.push_back(b.flag);
  for (const RunConfigField& f : run_config_fields())
    EXPECT_NE(std::find(covered.begin(), covered.end(), "--" + std::string(f.key)), covered.end())
        << "no bad-value case for --" << f.key;
  EXPECT_EQ(covered.size(), run_config_fields().size());
}

// mutants' own numbers: a negative seed no longer wraps.
TEST(CommandLine, MutantsOptionsHaveRangeRules) {
  for (const std::vector<std::string>& a :
       std::vector<std::vector<std::string>>{{"mutants", "--seed", "-5"},
                                             {"mutants", "--cases", "0"},
                                             {"mutants", "--shrink-steps", "-1"}}) {
    const ParsedCommand p = parse(a);
    ASSERT_EQ(p.errors.size(), 1u) << a[1];
    EXPECT_NE(p.errors[0].find(a[1]), std::string::npos) << p.errors[0];
  }
}

}  // namespace
}  // namespace parity::cli
