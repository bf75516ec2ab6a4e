// parse_command_line: CLI11 subcommands from the command table, the run
// options from RunConfig's field table, the scenario under check/repro, and
// validation; every violation names where its values came from.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harness/backend/version.h"
#include "harness/base/files.h"
#include "harness/base/nearest_names.h"
#include "harness/checks/baseline.h"
#include "harness/checks/check.h"
#include "harness/checks/scenario.h"
#include "harness/cli/commands.h"
#include "harness/cli/help_formatter.h"
#include "harness/cli/run_options.h"
#include "harness/config/input_files.h"
#include "harness/config/memory_estimate.h"
#include "harness/config/run_config_fields.h"
#include "harness/config/value_sources.h"
#include "harness/faults/code_path_faults.h"
#include "harness/observation/source_kind.h"
#include "harness/runtime/failure_report.h"

namespace parity::cli {
namespace {

std::string one_error_line(const std::string& what) {
  return "parity: " + one_line(what, 400) + " (see parity --help)";
}

// CLI11's own checks print their whole numeric range; these say the rule.
CLI::Validator rule(std::string name, bool (*ok)(const std::string&), const std::string& text) {
  return CLI::Validator(
      [ok, text](std::string& value) { return ok(value) ? std::string() : value + ": " + text; },
      "", std::move(name));
}

bool positive_integer(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && *end == '\0' && v >= 1 && v <= 1000000;
}
bool non_negative_integer(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

void add_mutants_options(CLI::App* sub, MutantsOptions& m) {
  sub->add_option("--fault", m.faults,
                  "only this code-path fault (repeatable; parity list faults lists them)")
      ->type_name("FAULT");
  sub->add_option("--cases", m.cases, "generated scenarios per fault")
      ->type_name("INT")
      ->capture_default_str()
      ->check(rule("CASES", positive_integer, "must be an integer in [1, 1000000]"));
  // Checked as text: CLI11 would wrap "-5" into a 64-bit seed.
  sub->add_option("--seed", m.seed, "rapidcheck seed (the only seed: the table is deterministic)")
      ->type_name("UINT")
      ->capture_default_str()
      ->check(rule("SEED", non_negative_integer, "must be a non-negative integer"));
  sub->add_option("--shrink-steps", m.shrink_steps,
                  "stop shrinking a counterexample after this many candidates")
      ->type_name("INT")
      ->capture_default_str()
      ->check(
          rule("STEPS", non_negative_integer, "must be a non-negative integer (0: no shrinking)"));
  sub->add_option("--report", m.report, "write the table as JSON to FILE")->type_name("FILE");
}

void add_list_options(CLI::App* sub, ListOptions& l) {
  std::string kinds;
  for (const std::string& k : list_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  sub->add_option("what", l.what, "what to list: " + kinds)->type_name("");
  sub->add_flag("--json", l.json, "a JSON array of {name, doc, needs} instead of the table");
}

// The run options parity selfcheck reads: the layout, the launch and what a
// launch takes. The model's options would be accepted and ignored (its sizes
// checked against a model the self-check never builds).
const std::vector<std::string_view>& selfcheck_keys() {
  static const std::vector<std::string_view> keys = {"tp",
                                                     "cp",
                                                     "dp",
                                                     "ep",
                                                     "pp",
                                                     "launch",
                                                     "backend",
                                                     "timeout",
                                                     "report",
                                                     "inject",
                                                     "check-collectives"};
  return keys;
}
bool selfcheck_reads(std::string_view key) {
  const std::vector<std::string_view>& k = selfcheck_keys();
  return std::find(k.begin(), k.end(), key) != k.end();
}

// The first `--word` of the command line that `scope` (the command, or parity
// itself) has no option for, as one line naming the nearest options; empty
// when every option is known (CLI11's own message then says what is wrong).
std::string unknown_option(const CLI::App& scope, bool top, int argc, const char* const* argv) {
  std::vector<std::string> names;
  for (const CLI::Option* o : scope.get_options())
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
  const std::string command = top ? "parity" : "parity " + scope.get_name();
  for (int i = top ? 1 : 2; i < argc; ++i) {
    const std::string word = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
    if (word.rfind("--", 0) != 0 || word == "--" ||
        std::find(names.begin(), names.end(), word) != names.end())
      continue;
    std::string line = "parity: " + word + ": not an option of " + command;
    std::string key = word.substr(2);
    if (key.rfind("no-", 0) == 0) key = key.substr(3);
    if (scope.get_name() == "selfcheck" && find_run_config_field(key) != nullptr)
      return line + " (it builds no model: it takes the layout and launch options only; see " +
             command + " --help)";
    const std::string nearest = did_you_mean(word, names, "");
    return line + (nearest.empty() ? "" : ": " + nearest) + " (see " + command + " --help)";
  }
  return "";
}

void add_diff_options(CLI::App* sub, DiffOptions& d) {
  sub->add_option("a", d.a,
                  "the first trace (JSONL, docs/trace-format.md), or a parity run --dump folder "
                  "(its trace.jsonl)")
      ->type_name("PATH")
      ->required();
  sub->add_option("b", d.b, "the second trace, or a --dump folder")->type_name("PATH")->required();
  sub->add_option("--kinds", d.kinds,
                  "compare only records of these kinds (comma-separated, e.g. "
                  "residual_accumulator,residual_contribution,output_logits)")
      ->type_name("KIND,...")
      ->delimiter(',');
}

void add_sweep_options(CLI::App* sub, sweep::SweepOptions& o, std::string& shard) {
  sub->add_option("matrix", o.matrix,
                  "the matrix file: axes (key -> values), base, exclude, include (docs/sweep.md)")
      ->type_name("FILE");
  sub->add_option("--out", o.out, "the sweep folder (created): results.jsonl, summary.json, ...")
      ->type_name("DIR")
      ->required();
  sub->add_flag("--resume", o.resume,
                "continue the sweep in --out: skip the cases results.jsonl holds (refused when "
                "its matrix differs)");
  sub->add_option("--jobs", o.jobs, "cases run side by side (each case's ranks are threads)")
      ->capture_default_str()
      ->check(rule("N", positive_integer, "must be an integer in [1, 1000000]"));
  sub->add_option("--shard", shard,
                  "K/N: run only the cases whose index % N == K-1 (K from 1 to N), e.g. a Slurm "
                  "array task or a CI matrix job; --merge combines the folders")
      ->type_name("K/N");
  sub->add_flag("--shrink", o.shrink, "shrink each failing case before saving it in failures/");
  sub->add_option("--shrink-steps", o.shrink_steps,
                  "with --shrink: at most this many candidate checks per failure")
      ->capture_default_str()
      ->check(rule("STEPS", non_negative_integer, "must be a non-negative integer"));
  sub->add_option("--junit", o.junit, "also write JUnit XML to FILE (one testcase per case)")
      ->type_name("FILE");
  sub->add_option("--merge", o.merge,
                  "combine these sweep folders (of one matrix) into --out instead of running")
      ->type_name("DIR");
  sub->add_option("--baseline", o.baseline,
                  "a stored sweep folder: each case's report against the same case there; a "
                  "changed outcome or property status, or a metric moved beyond its tolerance, "
                  "fails the sweep (docs/sweep.md, Baselines)")
      ->type_name("DIR");
}

// "K/N" with 1 <= K <= N: the shard; false otherwise.
bool parse_shard(const std::string& text, int* k, int* n) {
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  const std::string a = text.substr(0, slash), b = text.substr(slash + 1);
  if (!positive_integer(a) || !positive_integer(b)) return false;
  *k = std::stoi(a);
  *n = std::stoi(b);
  return *k <= *n;
}

// The scenario a check starts from: its JSON run options and their sources.
bool load_scenario(const std::string& file, ParsedCommand& parsed, nlohmann::json* base,
                   ValueSources* sources) {
  try {
    if (file.empty()) {
      parsed.scenario_source = "embedded default";
      const RunConfig embedded = checks::default_check_scenario();
      *base = to_json(embedded);
      sources->set_differing(embedded, {ValueOrigin::embedded_default, ""});
    } else {
      parsed.scenario_source = file;
      checks::ScenarioMeta meta;
      *base = checks::read_scenario_file(file, &meta);
      parsed.expect = meta.expect;
      parsed.about = meta.about;
      run_config_from_json(*base);  // unknown keys, wrong types: named with the file
      sources->set_present(*base, {ValueOrigin::scenario_file, file});
    }
  } catch (const std::exception& e) {
    const bool file_error = dynamic_cast<const checks::ScenarioError*>(&e) != nullptr;
    parsed.errors.push_back(file_error ? std::string(e.what()) : file + ": " + e.what());
    return false;
  }
  return true;
}

}  // namespace

ParsedCommand parse_command_line(int argc, const char* const* argv, std::ostream& out,
                                 const LaunchOptions& options) {
  ParsedCommand parsed;
  CLI::App app{
      "parity: a LibTorch harness for Megatron Core's tensor-observation semantics.\n"
      "Exit codes: 0 all good, 1 a property failed, 2 bad input or usage, 3 rank failure or "
      "timeout.",
      "parity"};
  app.formatter(make_help_formatter());  // before the subcommands: they copy it
  app.set_version_flag(
      "--version", [] { return version_text(); },
      "print the version, git commit, LibTorch version and backends, then exit");
  app.require_subcommand(1);
  std::deque<RunOptionValues> run_values;  // one per subcommand (stable addresses)
  std::vector<CLI::App*> subs;
  std::string scenario_file;
  bool self_check = false;
  std::string shard;  // sweep --shard K/N, as typed
  for (const CommandInfo& c : command_table()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    run_values.emplace_back();
    if (c.name == "mutants") {
      add_mutants_options(sub, parsed.mutants);
    } else if (c.name == "list") {
      add_list_options(sub, parsed.list);
    } else if (c.name == "selfcheck") {
      add_run_options(sub, run_values.back(), RunConfig{}, selfcheck_keys());
    } else if (c.name == "diff") {
      add_diff_options(sub, parsed.diff);
    } else if (c.name == "sweep") {
      add_sweep_options(sub, parsed.sweep, shard);
    } else {
      const bool check_like = c.name == "check" || c.name == "repro";
      add_run_options(sub, run_values.back(),
                      check_like ? checks::default_check_scenario() : RunConfig{});
      if (check_like)
        sub->add_option("--baseline", parsed.baseline_path,
                        "compare with this stored parity check report (--report's JSON): a "
                        "property whose status changed or a metric that moved beyond its "
                        "tolerance fails the check (docs/cli.md \"Baselines\")")
            ->type_name("FILE");
      if (c.name == "repro") {
        sub->add_option("scenario", scenario_file, "the saved scenario file")
            ->type_name("FILE")
            ->required();
      } else if (c.name == "check") {
        sub->add_option("scenario", scenario_file,
                        "scenario file: a JSON object with the run options' keys (docs/cli.md); "
                        "flags override its values; without it, the embedded default (whose "
                        "values the flag defaults show)")
            ->type_name("FILE");
        sub->add_flag("--self-check", self_check,
                      "run the runtime self-check instead (= parity selfcheck, which takes only "
                      "the layout and launch options)");
      }
    }
    subs.push_back(sub);
  }

  // A word where the command goes that names no command (`parity sweep`): CLI11
  // would only say that a subcommand is required.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CommandInfo& c : command_table()) {
      known = known || c.name == argv[1];
      names += (names.empty() ? "" : ", ") + c.name;
    }
    if (!known) {
      std::vector<std::string> commands;
      for (const CommandInfo& c : command_table()) commands.push_back(c.name);
      const std::string nearest = did_you_mean(argv[1], commands);
      parsed.errors.push_back("parity: unknown command \"" + std::string(argv[1]) + "\"" +
                              (nearest.empty() ? "" : ": " + nearest) + " (known: " + names +
                              "; see parity --help)");
      return parsed;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    std::ostringstream err;
    app.exit(e, out, err);
    parsed.help_shown = true;
    return parsed;
  } catch (const CLI::ParseError& e) {
    const CLI::App* scope = &app;
    for (const CLI::App* sub : subs)
      if (argc > 1 && sub->get_name() == argv[1]) scope = sub;
    const std::string unknown = unknown_option(*scope, scope == &app, argc, argv);
    parsed.errors.push_back(unknown.empty() ? one_error_line(e.what()) : unknown);
    return parsed;
  }
  std::size_t index = 0;
  for (std::size_t i = 0; i < subs.size(); ++i)
    if (subs[i]->parsed()) index = i, parsed.command = command_table()[i].name;
  if (parsed.command == "mutants") {
    std::vector<std::string> names;
    for (const CodePathFaultInfo& f : code_path_faults()) names.emplace_back(f.name);
    for (const std::string& f : parsed.mutants.faults) {
      if (parse_code_path_fault(f)) continue;
      const std::string nearest = did_you_mean(f, names);
      parsed.errors.push_back("--fault " + f + ": not a code-path fault" +
                              (nearest.empty() ? "" : ": " + nearest) +
                              " (parity list faults lists them)");
    }
    if (!parsed.mutants.report.empty()) {
      const std::string why = files::why_not_writable(parsed.mutants.report);
      if (!why.empty())
        parsed.errors.push_back("--report " + parsed.mutants.report +
                                ": cannot be written: " + why);
    }
    return parsed;
  }
  if (parsed.command == "list") {
    const std::vector<std::string>& kinds = list_kinds();
    std::string known;
    for (const std::string& k : kinds) known += (known.empty() ? "" : ", ") + k;
    if (parsed.list.what.empty()) {
      parsed.errors.push_back("parity list: what to list is required: " + known);
    } else if (std::find(kinds.begin(), kinds.end(), parsed.list.what) == kinds.end()) {
      const std::string nearest = did_you_mean(parsed.list.what, kinds);
      parsed.errors.push_back("parity list " + parsed.list.what + ": not a list" +
                              (nearest.empty() ? "" : ": " + nearest) + " (lists: " + known + ")");
    }
    return parsed;
  }
  if (parsed.command == "diff") {
    for (const std::string& k : parsed.diff.kinds)
      if (!source_kind_from_string(k))
        parsed.errors.push_back("--kinds " + k +
                                ": not a source kind (docs/trace-format.md lists "
                                "them)");
    return parsed;
  }
  if (parsed.command == "sweep") {
    sweep::SweepOptions& o = parsed.sweep;
    if (!shard.empty() && !parse_shard(shard, &o.shard, &o.shards))
      parsed.errors.push_back("--shard " + shard +
                              ": must be K/N with integers 1 <= K <= N (e.g. 2/4)");
    if (o.merge.empty() && o.matrix.empty())
      parsed.errors.push_back(
          "parity sweep: a MATRIX.json, or --merge DIR... (see parity sweep --help)");
    if (!o.merge.empty() && !o.matrix.empty())
      parsed.errors.push_back("--merge: takes sweep folders, not a matrix file (" + o.matrix +
                              "): the folders hold their matrix");
    if (!o.merge.empty() && (o.resume || !shard.empty() || o.shrink))
      parsed.errors.push_back(
          "--merge: combines finished folders: --resume, --shard and --shrink "
          "apply to running a matrix");
    return parsed;
  }
  if (parsed.command == "check" && self_check) {
    parsed.command = "selfcheck";
    // check's options beyond the self-check's: refused, not ignored.
    const std::vector<RunConfigField>& fields = run_config_fields();
    const RunOptionValues& given = run_values[index];
    for (std::size_t i = 0; i < fields.size(); ++i)
      if (given.options[i] != nullptr && given.options[i]->count() > 0 &&
          !selfcheck_reads(fields[i].key))
        parsed.errors.push_back("--" + std::string(fields[i].key) +
                                ": not an option of the runtime self-check (check --self-check = "
                                "parity selfcheck; see parity selfcheck --help)");
    if (!scenario_file.empty())
      parsed.errors.push_back(scenario_file +
                              ": the runtime self-check takes no scenario (check --self-check = "
                              "parity selfcheck)");
    if (!parsed.baseline_path.empty())
      parsed.errors.push_back("--baseline: not an option of the runtime self-check");
    if (!parsed.errors.empty()) return parsed;
  }
  const bool check_like = parsed.command == "check" || parsed.command == "repro";
  const bool selfcheck = parsed.command == "selfcheck";

  // The base (built-in defaults, or check's scenario), then the flags over it.
  // A value of the wrong type was typed on the command line: its flag says so.
  std::vector<ConfigViolation> typed;
  const nlohmann::json given = given_run_options(run_values[index], &typed);
  for (const ConfigViolation& v : typed) parsed.errors.push_back(format_for_cli(v));
  std::vector<ConfigViolation> violations;
  nlohmann::json base = to_json(RunConfig{});
  ValueSources sources;
  if (check_like && !load_scenario(scenario_file, parsed, &base, &sources)) return parsed;
  if (check_like && !parsed.baseline_path.empty()) {
    try {
      parsed.baseline_report = checks::read_baseline_report(parsed.baseline_path);
    } catch (const checks::BaselineError& e) {
      parsed.errors.push_back("--baseline " + std::string(e.what()));
      return parsed;
    }
  }
  for (const auto& [key, value] : given.items()) {
    base[key] = value;
    sources.set(key, {ValueOrigin::command_line, ""});
  }
  RunConfig c = run_config_from_json(base);
  if (check_like && !c.dump.empty())
    violations.push_back({"dump", c.dump, "parity run only (parity check launches several runs)",
                          ConfigViolation::Kind::text});
  // Checkpoints: parity run saves and resumes; parity check's resume_invariance
  // saves and resumes inside the check (--resume-at, --resume-layout).
  if (check_like) {
    const nlohmann::json given_config = to_json(c), defaults = to_json(RunConfig{});
    for (const char* key : {"save-checkpoint", "save-every", "resume"})
      if (given_config[key] != defaults[key])
        violations.push_back(
            {key, field_value_text(given_config[key]),
             "parity run only (parity check saves and resumes with --resume-at and "
             "--resume-layout)",
             std::string(key) == "save-every" ? ConfigViolation::Kind::number
                                              : ConfigViolation::Kind::text});
  }
  // (--resume-layout alone is validate_run_config's: it needs --resume-at.)
  if (!check_like && c.resume_at > 0)
    violations.push_back(
        {"resume-at", std::to_string(c.resume_at),
         "parity check only (parity run: --save-checkpoint DIR, then --resume DIR)",
         ConfigViolation::Kind::number});
  if (check_like && c.launch == LaunchMode::env)
    violations.push_back({"launch", "env",
                          "parity check launches several worlds (the single-rank reference "
                          "among them): use threads or processes",
                          ConfigViolation::Kind::text});
  // check simulates full-iteration graphs with metrics off in (a) (they are
  // collected in the eager references), so the metrics rule does not apply.
  // The self-check builds no model: only the rules of the options it reads apply.
  for (ConfigViolation& v :
       check_like ? checks::validate_check_scenario(c) : validate_run_config(c))
    if (!selfcheck || selfcheck_reads(v.field)) violations.push_back(std::move(v));
  if (c.launch == LaunchMode::env && !check_like)
    for (ConfigViolation& v : read_env_rank(c, nullptr, options.getenv))
      violations.push_back(std::move(v));
  // The weight and batch files are read only for a config that is otherwise valid.
  if (violations.empty() && parsed.errors.empty())
    for (ConfigViolation& v : check_input_files(c)) violations.push_back(std::move(v));
  for (ConfigViolation& v : check_output_files(c)) violations.push_back(std::move(v));
  // selfcheck builds no model; env ranks each check their own process.
  if (violations.empty() && parsed.command != "selfcheck")
    for (ConfigViolation& v : check_memory(c, c.launch == LaunchMode::env ? 1 : c.world_size(),
                                           check_like, available_memory_bytes()))
      violations.push_back(std::move(v));
  if (check_like && !parsed.baseline_path.empty()) {
    const auto differences =
        checks::baseline_scenario_differences(parsed.baseline_report, to_json(c));
    if (!differences.empty()) {
      const checks::BaselineDifference& d = differences.front();
      parsed.errors.push_back(
          "--baseline " + parsed.baseline_path + ": made from another scenario (" +
          parsed.baseline_report.value("scenario_source", std::string("unknown source")) +
          "): " + d.what.substr(d.what.find(' ') + 1) + " is " + d.baseline + " there, " +
          d.current + " here" +
          (differences.size() > 1
               ? " (and " + std::to_string(differences.size() - 1) + " more option(s) differ)"
               : "") +
          "; a baseline compares the same scenario only");
    }
  }
  for (const ConfigViolation& v : violations)
    parsed.errors.push_back(describe_violation(v, sources, c));
  parsed.config = c;
  return parsed;
}

}  // namespace parity::cli
