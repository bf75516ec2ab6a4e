#include "harness/cli/cli.h"
#include "harness/base/files.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/model/training_step.h"
#include "harness/parallel/code_path_faults.h"
#include "harness/runtime/self_check.h"

namespace parity::cli {
namespace {

MutantsRunner g_mutants_runner = nullptr;

// Enum-valued options are read as text and mapped afterwards, so a bad value
// is a ConfigViolation like any other (field, value, rule).
struct Flags {
  RunConfig config;
  std::string launch = "threads";
  std::string dtype = "fp32";
  std::string norm = "layernorm";
  std::string activation = "gelu";
  std::string graphs = "none";
  std::string runtime_gather_output = "unset";
};

void add_run_options(CLI::App* app, Flags& f) {
  RunConfig& c = f.config;
  app->option_defaults()->always_capture_default();
  // Runtime (issue 2).
  app->add_option("--tp", c.tp, "tensor-parallel size")->group("Parallel layout and runtime");
  app->add_option("--cp", c.cp, "context-parallel size")->group("Parallel layout and runtime");
  app->add_option("--dp", c.dp, "data-parallel size")->group("Parallel layout and runtime");
  app->add_flag("--sp", c.sp, "sequence parallelism (needs --tp > 1)")
      ->group("Parallel layout and runtime");
  app->add_option("--launch", f.launch,
                  "how ranks run: threads (one process), processes (one per rank), env "
                  "(torchrun/Slurm: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->group("Parallel layout and runtime");
  app->add_option("--seed", c.seed, "seed of weights, inputs and dropout")
      ->group("Parallel layout and runtime");
  app->add_option("--timeout", c.timeout,
                  "seconds without progress before a rank counts as hung; also the Gloo and "
                  "store timeout")
      ->group("Parallel layout and runtime");
  app->add_option("--report", c.report, "write a JSON report to FILE (atomically)")
      ->group("Parallel layout and runtime");
  app->add_option("--inject", c.inject,
                  "inject a fault, repeatable: " + known_fault_names())
      ->allow_extra_args(false)
      ->group("Parallel layout and runtime");
  app->add_flag("--check-collectives", c.check_collectives,
                "compare (op, dtype, shape, sequence) across each group before every collective")
      ->group("Parallel layout and runtime");
  // Model (issue 3).
  const char* model = "Model";
  app->add_option("--hidden", c.hidden, "hidden size")->group(model);
  app->add_option("--heads", c.heads, "attention heads")->group(model);
  app->add_option("--ffn-hidden", c.ffn_hidden, "MLP hidden size")->group(model);
  app->add_option("--layers", c.layers, "transformer layers")->group(model);
  app->add_option("--seq", c.seq, "sequence length")->group(model);
  app->add_option("--micro-batch", c.micro_batch, "micro-batch size")->group(model);
  app->add_option("--microbatches", c.microbatches, "microbatches per step per DP rank")
      ->group(model);
  app->add_option("--steps", c.steps, "training steps")->group(model);
  app->add_option("--vocab", c.vocab, "vocabulary size")->group(model);
  app->add_option("--dtype", f.dtype, "fp32, fp64 (exact checks) or bf16")->group(model);
  app->add_flag("--fp32-residual", c.fp32_residual, "keep the residual stream in fp32")
      ->group(model);
  app->add_option("--dropout", c.dropout, "dropout probability in [0, 1)")->group(model);
  app->add_option("--norm", f.norm, "layernorm or rmsnorm")->group(model);
  app->add_option("--activation", f.activation, "gelu or swiglu")->group(model);
  app->add_option("--recompute", c.recompute,
                  "none, full-uniform, full-block or selective:<modules> (core_attn, layernorm, "
                  "mlp; comma-separated)")
      ->group(model);
  app->add_option("--recompute-layers", c.recompute_layers,
                  "full-uniform: layers per checkpointed chunk; full-block: the first N layers")
      ->group(model);
  app->add_option("--graphs", f.graphs, "none, per-layer or full-iteration (CUDA-graph phases)")
      ->group(model);
  app->add_option("--graph-warmup", c.graph_warmup, "eager warmup runs before graph capture")
      ->group(model);
  app->add_option("--trace", c.trace, "write the observation trace as JSONL to FILE")
      ->group(model);
  app->add_flag("--gather-output", c.gather_output, "gather the logits over TP")->group(model);
  app->add_option("--runtime-gather-output", f.runtime_gather_output,
                  "the forward's runtime_gather_output: unset, on or off (a value wins over "
                  "--gather-output)")
      ->group(model);
  app->add_option("--lr", c.lr, "SGD learning rate of the training step (0: no update)")
      ->group(model);
  app->add_option("--metrics", c.metrics,
                  "metrics to collect after every step, comma-separated (docs/metrics.md), e.g. "
                  "layer-residual-contribution-l2,global-output-logits-l2")
      ->delimiter(',')
      ->group(model);
}

template <typename E>
void map_enum(const std::string& field, const std::string& text,
              std::optional<E> (*parse)(std::string_view), const std::string& known, E* out,
              std::vector<ConfigViolation>& violations) {
  if (const std::optional<E> e = parse(text)) *out = *e;
  else violations.push_back({field, text, "must be one of " + known, ConfigViolation::Kind::text});
}

struct Command {
  std::string name;
  std::string help;
  bool implemented;
  std::string pending;  // why not yet
};

const std::vector<Command>& commands() {
  static const std::vector<Command> c = {
      {"check", "the main job: run a scenario (the embedded default, or SCENARIO.json; flags "
                "override its values) against its single-rank, no-recompute and eager "
                "references and evaluate the properties (exactly_once, recompute_invariance, "
                "sharded_reduction, graph_replay, determinism, collective_symmetry)",
       true, ""},
      {"selfcheck", "the runtime self-check: every collective on every group (also: check "
                    "--self-check)",
       true, ""},
      {"run", "train the model for --steps steps on the options' scenario: per-step loss table, "
              "observation trace with --trace",
       true, ""},
      {"sweep", "run the property cross-checks over many generated scenarios", false,
       "parity sweep is not implemented yet (it needs the model and the properties)"},
      {"repro", "replay a saved scenario file (PARITY_SAVE_FAILURES, scenarios/*.json): the same "
                "runs, table and exit codes as parity check FILE",
       true, ""},
      {"mutants", "for each code-path fault: search generated scenarios with it injected until a "
                  "property FAILs, shrink, and print fault, caught, by which property, the "
                  "shrunk scenario, seconds (docs/property-suite.md)",
       true, ""},
  };
  return c;
}

std::string one_error_line(const std::string& what) {
  std::string s = one_line(what, 400);
  return "parity: " + s + " (see parity --help)";
}

}  // namespace

void set_mutants_runner(MutantsRunner runner) { g_mutants_runner = runner; }

ParsedCommand parse_command_line(int argc, const char* const* argv, std::ostream& out,
                                 const LaunchOptions& options) {
  ParsedCommand parsed;
  CLI::App app{
      "parity: a LibTorch harness for Megatron Core's tensor-observation semantics.\n"
      "Exit codes: 0 all good, 1 a property failed, 2 bad input or usage, 3 rank failure or "
      "timeout.",
      "parity"};
  app.require_subcommand(1);
  Flags flags;
  std::vector<CLI::App*> subs;
  std::string scenario_file;
  bool self_check = false;
  for (const Command& c : commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    if (c.name == "mutants") {
      sub->add_option("--fault", parsed.mutants.faults, "only this fault (repeatable)");
      sub->add_option("--cases", parsed.mutants.cases, "generated scenarios per fault")
          ->check(CLI::PositiveNumber);
      sub->add_option("--seed", parsed.mutants.seed, "rapidcheck seed");
      sub->add_option("--shrink-seconds", parsed.mutants.shrink_seconds,
                      "stop shrinking a counterexample after this long");
      sub->add_option("--report", parsed.mutants.report, "write the table as JSON to FILE");
    } else if (c.implemented || c.name == "run") {
      add_run_options(sub, flags);
      if (c.name == "repro") {
        sub->add_option("scenario", scenario_file, "the saved scenario file")->required();
      } else if (c.name == "check") {
        sub->add_option("scenario", scenario_file,
                        "scenario file: a JSON object with the run options' keys (docs/cli.md); "
                        "flags override its values");
        sub->add_flag("--self-check", self_check, "run the runtime self-check instead (= selfcheck)");
      }
    } else {
      sub->allow_extras();
      sub->footer("Not implemented yet.");
    }
    subs.push_back(sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    std::ostringstream err;
    app.exit(e, out, err);
    parsed.help_shown = true;
    return parsed;
  } catch (const CLI::ParseError& e) {
    parsed.errors.push_back(one_error_line(e.what()));
    return parsed;
  }
  for (std::size_t i = 0; i < subs.size(); ++i)
    if (subs[i]->parsed()) parsed.command = commands()[i].name;
  if (parsed.command == "mutants") {
    for (const std::string& f : parsed.mutants.faults)
      if (!parse_code_path_fault(f))
        parsed.errors.push_back("--fault " + f + ": not a code-path fault (parity --help lists them)");
    return parsed;
  }

  RunConfig& c = flags.config;
  std::vector<ConfigViolation> violations;
  map_enum("launch", flags.launch, parse_launch_mode, known_launch_modes(), &c.launch, violations);
  map_enum("dtype", flags.dtype, parse_dtype, known_dtypes(), &c.dtype, violations);
  map_enum("norm", flags.norm, parse_norm, known_norms(), &c.norm, violations);
  map_enum("activation", flags.activation, parse_activation, known_activations(), &c.activation,
           violations);
  map_enum("graphs", flags.graphs, parse_graph_mode, known_graph_modes(), &c.graphs, violations);
  map_enum("runtime-gather-output", flags.runtime_gather_output, parse_runtime_gather,
           known_runtime_gathers(), &c.runtime_gather_output, violations);
  if (parsed.command == "check" && self_check) parsed.command = "selfcheck";

  // check: the scenario (embedded default or file), then the flags given on
  // the command line over it; violations name the file's key or the flag.
  std::set<std::string> from_flags;
  const bool check_like = parsed.command == "check" || parsed.command == "repro";
  if (check_like) {
    CLI::App* sub = app.get_subcommand(parsed.command);
    for (const CLI::Option* o : sub->get_options())
      if (o->count() > 0 && o->get_name().rfind("--", 0) == 0)
        from_flags.insert(o->get_name().substr(2));
    nlohmann::json base;
    try {
      if (scenario_file.empty()) {
        parsed.scenario_source = "embedded default";
        base = to_json(checks::default_check_scenario());
      } else {
        parsed.scenario_source = scenario_file;
        checks::ScenarioMeta meta;
        base = checks::read_scenario_file(scenario_file, &meta);
        parsed.expect = meta.expect;
        parsed.about = meta.about;
        run_config_from_json(base);  // unknown keys, wrong types: named with the file
      }
    } catch (const std::exception& e) {
      const bool file_error = dynamic_cast<const checks::ScenarioError*>(&e) != nullptr;
      parsed.errors.push_back(file_error ? std::string(e.what())
                                         : scenario_file + ": " + e.what());
      return parsed;
    }
    const nlohmann::json given = to_json(c);
    for (const std::string& key : from_flags)
      if (given.contains(key)) base[key] = given[key];
    c = run_config_from_json(base);
    if (c.launch == LaunchMode::env)
      violations.push_back({"launch", "env",
                            "parity check launches several worlds (the single-rank reference "
                            "among them): use threads or processes",
                            ConfigViolation::Kind::text});
  }
  // check simulates full-iteration graphs with metrics off in (a) (they are
  // collected in the eager references), so the metrics rule does not apply.
  for (ConfigViolation& v : check_like ? checks::validate_check_scenario(c)
                                                      : validate_run_config(c))
    violations.push_back(std::move(v));
  if (c.launch == LaunchMode::env && !check_like)
    for (ConfigViolation& v : read_env_rank(c, nullptr, options.getenv))
      violations.push_back(std::move(v));
  for (const ConfigViolation& v : violations) {
    const bool in_file = check_like && !scenario_file.empty() &&
                         !from_flags.count(v.field);
    parsed.errors.push_back(in_file ? format_for_file(v, scenario_file) : format_for_cli(v));
  }
  parsed.config = c;
  return parsed;
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

void print_run_header(const RunConfig& c, std::ostream& out) {
  out << "parity run: " << c.layers << " layer(s), hidden " << c.hidden << ", heads " << c.heads
      << ", ffn " << c.ffn_hidden << ", seq " << c.seq << ", micro-batch " << c.micro_batch
      << " x " << c.microbatches << " microbatch(es) per DP rank, vocab " << c.vocab << ", "
      << to_string(c.dtype) << ", " << to_string(c.norm) << ", " << to_string(c.activation)
      << "; " << c.world_size() << " rank(s) = tp " << c.tp << " x cp " << c.cp << " x dp "
      << c.dp << (c.sp ? " (sp)" : "") << ", launch " << to_string(c.launch) << "; " << c.steps
      << " step(s), SGD lr " << c.lr << ", seed " << c.seed << std::endl;
}

}  // namespace

int run_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                     const LaunchOptions& options, bool* must_exit_now) {
  const ParsedCommand parsed = parse_command_line(argc, argv, out, options);
  if (parsed.help_shown) return kExitOk;
  if (!parsed.errors.empty()) {
    for (const std::string& e : parsed.errors) err << e << "\n";
    return kExitBadInput;
  }
  for (const Command& c : commands()) {
    if (c.name == parsed.command && !c.implemented) {
      err << c.pending << "\n";
      return kExitBadInput;
    }
  }
  if (parsed.command == "mutants") {
    if (!g_mutants_runner) {
      err << "parity mutants is not available in this program (no mutants runner installed)\n";
      return kExitBadInput;
    }
    return g_mutants_runner(parsed.mutants, out, err);
  }
  const bool run = parsed.command == "run";
  const RunConfig& config = parsed.config;
  if (parsed.command == "repro" && !parsed.about.is_null()) {
    // What the file says about itself (the failing property, its reason, the
    // rapidcheck reproduce string), then the same check.
    out << "parity repro: " << parsed.about.dump() << std::endl;
  }
  if (parsed.command == "check" || parsed.command == "repro")
    return checks::run_check(config, parsed.scenario_source, out, err, options, must_exit_now,
                             parsed.expect);

  const bool env = config.launch == LaunchMode::env;
  EnvRank env_rank;
  if (env) read_env_rank(config, &env_rank, options.getenv);
  const bool print_all = !env || env_rank.rank == 0;
  const std::string who = "parity " + parsed.command;

  if (print_all && run) {
    print_run_header(config, out);
  } else if (print_all) {
    // selfcheck: the runtime self-check.
    out << "parity selfcheck: runtime self-check on "
        << config.world_size() << " rank(s) = tp " << config.tp << " x cp " << config.cp
        << " x dp " << config.dp << ", launch " << to_string(config.launch) << ", timeout "
        << config.timeout << " s";
    if (!config.inject.empty()) {
      out << ", inject";
      for (const std::string& i : config.inject) out << " " << i;
    }
    out << std::endl;
  }

  LaunchResult result;
  try {
    if (run) register_model_program();
    result = launch(config, run ? kModelProgram : kSelfCheckProgram, options);
  } catch (const ConfigError& e) {
    for (const ConfigViolation& v : e.violations()) err << format_for_cli(v) << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    err << who << ": could not launch the ranks: " << one_line(e.what()) << "\n";
    return kExitRankFailure;
  }

  int code = kExitOk;
  if (!result.ok()) {
    code = kExitRankFailure;
    for (const std::string& line : result.failure->lines()) err << line << "\n";
    if (result.failure->abandoned_threads && must_exit_now) *must_exit_now = true;
  } else if (run && print_all) {
    out << format_loss_table(result);
    const std::string disagreement = loss_disagreement(result);
    if (!disagreement.empty()) {
      err << who << ": ranks disagree on the loss: " << disagreement << "\n";
      code = kExitPropertyFailed;
    }
    std::string trace_note;
    if (!config.trace.empty()) {
      const std::string jsonl = trace_jsonl(result);
      const long long lines = static_cast<long long>(std::count(jsonl.begin(), jsonl.end(), '\n'));
      try {
        files::write_atomically(config.trace, jsonl);
        trace_note = ", trace " + config.trace + " (" + std::to_string(lines) + " records)";
      } catch (const std::exception& e) {
        err << who << ": --trace " << config.trace << ": " << e.what() << "\n";
        if (code == kExitOk) code = kExitBadInput;
      }
    }
    out << "run " << (code == kExitOk ? "done" : "FAILED") << ": " << result.world_size
        << " rank(s), " << config.steps << " step(s)" << trace_note << ", "
        << seconds_text(result.wall_seconds) << " s (" << result.rendezvous << ")" << std::endl;
  } else if (run) {
    out << "rank " << env_rank.rank << ": run done (rank 0 prints the table and writes the trace)"
        << std::endl;
  } else if (print_all) {
    out << format_self_check_table(result);
    int checks = 0;
    for (const nlohmann::json& r : result.results)
      if (r.is_object()) checks += r.value("checks", 0);
    const bool passed = self_check_passed(result);
    out << "self-check " << (passed ? "passed" : "FAILED") << ": " << result.world_size
        << " rank(s), " << checks << " checks, " << seconds_text(result.wall_seconds) << " s ("
        << result.rendezvous << ")" << std::endl;
    if (!passed) code = kExitPropertyFailed;
  } else {
    out << "rank " << env_rank.rank << ": self-check done (rank 0 prints the table)" << std::endl;
    if (!self_check_passed(result)) code = kExitPropertyFailed;
  }

  if (!config.report.empty() && print_all) {
    nlohmann::json report;
    report["command"] = parsed.command;
    report["exit_code"] = code;
    report["config"] = to_json(config);
    nlohmann::json launched = result.to_json();
    // The trace has its own file; the report keeps the per-rank summaries.
    for (nlohmann::json& r : launched["results"])
      if (r.is_object()) r.erase("trace");
    report["launch"] = std::move(launched);
    try {
      files::write_atomically(config.report, report.dump(2) + "\n");
    } catch (const std::exception& e) {
      err << who << ": --report " << config.report << ": " << e.what() << "\n";
      if (code == kExitOk) code = kExitBadInput;
    }
  }
  return code;
}

}  // namespace parity::cli
