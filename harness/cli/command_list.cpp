// parity list WHAT: the registries as a table (or JSON), one row per entry with
// its one-line doc and what it needs. Each list reads its registry, so it
// cannot fall behind: the faults of --inject (runtime faults and the code-path
// table), the properties parity check evaluates, the metric names, the
// scenario files beside the embedded default, the run options' field table.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <ostream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/checks/property.h"
#include "harness/checks/scenario.h"
#include "harness/cli/commands.h"
#include "harness/config/run_config_fields.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/metric_names.h"
#include "harness/runtime/runtime_faults.h"

namespace parity::cli {
namespace {

struct Row {
  std::string name, doc, needs;
};

std::vector<Row> fault_rows() {
  std::vector<Row> rows;
  for (const FaultInfo& f : fault_registry()) {
    if (f.argument == FaultArgument::rank) {
      rows.push_back({f.name + "=R", f.doc,
                      "a rank R of the world; fires at the rank program's fault point (any "
                      "command that launches ranks; exit 3)"});
    } else if (const std::optional<CodePathFault> c = parse_code_path_fault(f.name)) {
      const CodePathFaultInfo& i = info(*c);
      rows.push_back({f.name, f.doc,
                      "caught by " + std::string(i.caught_by) + " when " + std::string(i.needs)});
    } else {
      rows.push_back({f.name, f.doc, "registered by this build"});
    }
  }
  return rows;
}

std::vector<Row> property_rows() {
  std::vector<Row> rows;
  for (const checks::Property* p : checks::registered_properties())
    rows.push_back({std::string(p->name()), std::string(p->doc()), std::string(p->needs())});
  return rows;
}

std::vector<Row> metric_rows() {
  std::vector<Row> rows;
  for (const MetricSpec& m : known_metrics())
    rows.push_back({m.name, metric_doc(m), metric_needs(m)});
  return rows;
}

// An option's type, rule and default: "INT, must be >= 1, default 1".
std::string option_needs(const RunConfigField& f, const nlohmann::json& value) {
  std::string needs;
  switch (f.type) {
    case FieldType::flag:
      needs = "flag (--no-" + std::string(f.key) + " turns it off)";
      break;
    case FieldType::choice:
      needs = "one of " + f.choices();
      break;
    case FieldType::text_list:
      needs = help_type_name(f) + (f.comma_separated ? ", comma-separated" : ", repeatable");
      break;
    default:
      needs = help_type_name(f);
  }
  if (f.range) needs += ", " + std::string(f.range->rule);
  std::string shown = field_value_text(value);
  if (f.type == FieldType::flag) shown = value.get<bool>() ? "on" : "off";
  return needs + ", default " + (shown.empty() ? "none" : shown);
}

std::vector<Row> option_rows() {
  std::vector<Row> rows;
  const RunConfig defaults;
  for (const RunConfigField& f : run_config_fields())
    rows.push_back(
        {"--" + std::string(f.key), std::string(f.help), option_needs(f, f.get(defaults))});
  return rows;
}

// What a scenario needs to run: its ranks, a backend other than the
// reference, and the faults it is a negative control for.
std::string scenario_needs(const RunConfig& c, const nlohmann::json& about) {
  std::string needs = std::to_string(c.world_size()) + " rank(s) (tp " + std::to_string(c.tp) +
                      " x cp " + std::to_string(c.cp) + " x dp " + std::to_string(c.dp) + ")";
  if (c.backend != "reference") needs += ", --backend " + c.backend;
  if (about.is_object() && about.contains("guards") && about["guards"].is_object()) {
    std::string guards;
    for (const auto& [fault, property] : about["guards"].items())
      guards += (guards.empty() ? "" : ", ") + fault + " (" +
                (property.is_string() ? property.get<std::string>() : property.dump()) + ")";
    if (!guards.empty()) needs += "; --inject FAULT shows its FAIL: " + guards;
  }
  return needs;
}

std::string about_line(const nlohmann::json& about) {
  if (about.is_string()) return about.get<std::string>();
  if (about.is_object())
    for (const char* key : {"pitfall", "why", "bug"})
      if (about.contains(key) && about[key].is_string()) return about[key].get<std::string>();
  return "";
}

// The scenario files under `dir`, recursively, sorted; sweeps/ holds sweep
// matrices, not scenarios. (opendir: no <filesystem>, harness/base/files.h.)
void find_scenarios(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (name == "." || name == ".." || name == "sweeps") continue;
    const std::string path = dir + "/" + name;
    if (files::is_directory(path))
      find_scenarios(path, out);
    else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
      out.push_back(path);
  }
}

// The folder the scenario files are in: the source tree's scenarios/ (the
// build records it), shown relative to the working directory when under it.
std::string shown_path(const std::string& path) {
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return path;
  const std::string prefix = std::string(cwd) + "/";
  return path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
}

std::vector<Row> scenario_rows(std::vector<std::string>* notes) {
  const RunConfig embedded = checks::default_check_scenario();
  std::vector<Row> rows = {{"(embedded default)",
                            "what parity check runs without a scenario file (parity check --help "
                            "shows its values; scenarios/default.json equals it)",
                            scenario_needs(embedded, nullptr)}};
  const std::string dir = PARITY_SCENARIO_DIR;
  std::vector<std::string> paths;
  find_scenarios(dir, paths);
  if (paths.empty())
    notes->push_back("no scenario files in " + dir + " (the source tree's scenarios/)");
  for (const std::string& path : paths) {
    try {
      checks::ScenarioMeta meta;
      const RunConfig c = run_config_from_json(checks::read_scenario_file(path, &meta));
      std::string doc = about_line(meta.about);
      if (doc.empty()) {  // no "about": what it sets
        std::string keys;
        const nlohmann::json defaults = to_json(RunConfig{}), values = to_json(c);
        for (const auto& [key, value] : values.items())
          if (defaults[key] != value)
            keys += (keys.empty() ? "" : ", ") + key +
                    (value.is_array()     ? " (" + std::to_string(value.size()) + ")"
                     : value.is_boolean() ? (value.get<bool>() ? "" : " off")
                                          : " " + field_value_text(value));
        doc = "sets " + (keys.empty() ? std::string("nothing: the built-in defaults") : keys);
      }
      rows.push_back({shown_path(path), doc, scenario_needs(c, meta.about)});
    } catch (const std::exception& e) {
      rows.push_back({shown_path(path), std::string("not a valid scenario: ") + e.what(), "-"});
    }
  }
  return rows;
}

void print_table(const std::vector<Row>& rows, std::ostream& out) {
  std::size_t width = 0;
  for (const Row& r : rows) width = std::max(width, r.name.size());
  width = std::min<std::size_t>(width, 40);
  const std::string indent(width + 2, ' ');
  for (const Row& r : rows) {
    out << r.name;
    if (r.name.size() > width)
      out << "\n" << indent;
    else
      out << std::string(width + 2 - r.name.size(), ' ');
    out << r.doc << "\n" << indent << "needs: " << r.needs << "\n";
  }
}

}  // namespace

const std::vector<std::string>& list_kinds() {
  static const std::vector<std::string> kinds = {"faults", "properties", "metrics", "scenarios",
                                                 "options"};
  return kinds;
}

int run_list_command(const CommandContext& ctx) {
  const std::string& what = ctx.parsed.list.what;
  std::vector<std::string> notes;
  std::vector<Row> rows;
  if (what == "faults")
    rows = fault_rows();
  else if (what == "properties")
    rows = property_rows();
  else if (what == "metrics")
    rows = metric_rows();
  else if (what == "scenarios")
    rows = scenario_rows(&notes);
  else if (what == "options")
    rows = option_rows();
  else {
    ctx.err << "parity list " << what << ": not a list\n";
    return kExitBadInput;
  }
  if (ctx.parsed.list.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) j.push_back({{"name", r.name}, {"doc", r.doc}, {"needs", r.needs}});
    ctx.out << j.dump(2) << "\n";
  } else {
    print_table(rows, ctx.out);
    ctx.out << rows.size() << " " << what << "\n";
  }
  for (const std::string& n : notes) ctx.err << "parity list " << what << ": " << n << "\n";
  return kExitOk;
}

}  // namespace parity::cli
