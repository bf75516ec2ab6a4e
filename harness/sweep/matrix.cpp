#include "harness/sweep/matrix.h"

#include <algorithm>
#include <cstdio>

#include "harness/backend/stable_hash.h"
#include "harness/base/files.h"
#include "harness/checks/check.h"
#include "harness/config/run_config_fields.h"

namespace parity::sweep {
namespace {

using ojson = nlohmann::ordered_json;

// Keys the sweep sets itself (each case's report goes into results.jsonl) or
// that parity check refuses.
bool sweep_owned(const std::string& key) {
  return key == "report" || key == "trace" || key == "dump";
}

// One scenario key and its value, as run_config_from_json reads them; `where`
// is the path in the file ("\"axes\".\"tp\"[1]").
void check_key(const std::string& source, const std::string& where, const std::string& key) {
  if (!find_run_config_field(key))
    throw MatrixError(source + ": " + where + ": unknown key \"" + key +
                      "\" (every key of a scenario file is allowed: docs/cli.md)");
  if (sweep_owned(key))
    throw MatrixError(source + ": " + where + ": \"" + key +
                      "\" cannot be set in a sweep (each case's report goes into results.jsonl)");
}

void check_key_value(const std::string& source, const std::string& where, const std::string& key,
                     const ojson& value) {
  check_key(source, where, key);
  try {
    run_config_from_json(nlohmann::json{{key, nlohmann::json::parse(value.dump())}});
  } catch (const std::exception& e) {
    throw MatrixError(source + ": " + where + ": " + e.what());
  }
}

// A partial assignment of exclude/include: an object of scenario keys.
void check_entry(const std::string& source, const std::string& where, const ojson& entry,
                 const std::vector<std::string>& axes, bool axes_only) {
  if (!entry.is_object() || entry.empty())
    throw MatrixError(source + ": " + where + " = " + entry.dump() +
                      ": expected a non-empty object of scenario keys");
  for (const auto& [key, value] : entry.items()) {
    const std::string at = where + ".\"" + key + "\"";
    if (axes_only && std::find(axes.begin(), axes.end(), key) == axes.end())
      throw MatrixError(source + ": " + at + ": not an axis of the matrix (exclude names axes)");
    check_key_value(source, at, key, value);
  }
}

std::string one_line_violations(const std::vector<ConfigViolation>& violations) {
  std::string out;
  for (const ConfigViolation& v : violations) {
    std::string value = v.value;
    if (v.kind == ConfigViolation::Kind::text) value = nlohmann::json(v.value).dump();
    out += (out.empty() ? "" : "; ") + ("\"" + v.field + "\" = " + value + ": " + v.rule);
  }
  return out;
}

// Adds one expanded case (valid or invalid) to the matrix.
void add_case(Matrix& m, const ojson& base, ojson assignment) {
  const int index = m.expansion++;
  nlohmann::json scenario = nlohmann::json::parse(base.dump());
  for (const auto& [key, value] : assignment.items())
    scenario[key] = nlohmann::json::parse(value.dump());
  const std::string id = case_id(assignment);
  for (const SweepCase& c : m.cases)
    if (c.id == id) throw MatrixError("case \"" + id + "\" appears twice (an include repeats it)");
  RunConfig config = run_config_from_json(scenario);
  std::vector<ConfigViolation> violations = checks::validate_check_scenario(config);
  if (config.launch == LaunchMode::env)
    violations.push_back({"launch", "env",
                          "parity check launches several worlds: use threads or processes",
                          ConfigViolation::Kind::text});
  if (!violations.empty()) {
    m.invalid.push_back({index, id, std::move(assignment), one_line_violations(violations)});
    return;
  }
  m.cases.push_back({index, id, std::move(assignment), std::move(config)});
}

bool matches(const ojson& assignment, const ojson& partial) {
  for (const auto& [key, value] : partial.items())
    if (!assignment.contains(key) || assignment.at(key) != value) return false;
  return true;
}

}  // namespace

std::string case_id(const ojson& assignment) {
  std::string id;
  for (const auto& [key, value] : assignment.items())
    id +=
        (id.empty() ? "" : " ") + key + "=" + field_value_text(nlohmann::json::parse(value.dump()));
  return id;
}

std::string matrix_digest(const ojson& file) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(file.dump())));
  return hex;
}

Matrix expand_matrix(const ojson& file, const std::string& source) {
  if (!file.is_object())
    throw MatrixError(source + ": expected a JSON object with \"axes\", got " +
                      std::string(file.type_name()));
  for (const auto& [key, value] : file.items())
    if (key != "axes" && key != "base" && key != "exclude" && key != "include" && key != "about")
      throw MatrixError(source + ": \"" + key +
                        "\": unknown key (a matrix has axes, base, exclude, include, about)");
  Matrix m;
  m.source = file;
  m.digest = matrix_digest(file);
  const ojson axes = file.value("axes", ojson::object());
  if (!axes.is_object() || axes.empty())
    throw MatrixError(source + ": \"axes\" = " + axes.dump() +
                      ": expected a non-empty object of key -> list of values");
  for (const auto& [key, values] : axes.items()) {
    const std::string where = "\"axes\".\"" + key + "\"";
    check_key(source, where, key);
    if (!values.is_array() || values.empty())
      throw MatrixError(source + ": " + where + " = " + values.dump() +
                        ": expected a non-empty list of values");
    for (std::size_t i = 0; i < values.size(); ++i) {
      check_key_value(source, where + "[" + std::to_string(i) + "]", key, values[i]);
      for (std::size_t j = 0; j < i; ++j)
        if (values[j] == values[i])
          throw MatrixError(source + ": " + where + "[" + std::to_string(i) +
                            "] = " + values[i].dump() + ": the value appears twice");
    }
    m.axes.push_back(key);
  }
  const ojson base = file.value("base", ojson::object());
  if (!base.is_object())
    throw MatrixError(source + ": \"base\" = " + base.dump() +
                      ": expected an object of scenario keys");
  for (const auto& [key, value] : base.items()) {
    check_key_value(source, "\"base\".\"" + key + "\"", key, value);
    if (axes.contains(key))
      throw MatrixError(source + ": \"base\".\"" + key + "\": also an axis (set it in one place)");
  }
  ojson lists[2];
  const char* names[2] = {"exclude", "include"};
  for (int l = 0; l < 2; ++l) {
    lists[l] = file.value(names[l], ojson::array());
    if (!lists[l].is_array())
      throw MatrixError(source + ": \"" + names[l] + "\" = " + lists[l].dump() +
                        ": expected a list of objects");
    for (std::size_t i = 0; i < lists[l].size(); ++i)
      check_entry(source, "\"" + std::string(names[l]) + "\"[" + std::to_string(i) + "]",
                  lists[l][i], m.axes, l == 0);
  }

  // The cartesian product, last axis fastest (an odometer over value indices).
  std::vector<std::size_t> at(m.axes.size(), 0);
  try {
    for (bool more = true; more;) {
      ojson assignment = ojson::object();
      for (std::size_t a = 0; a < m.axes.size(); ++a)
        assignment[m.axes[a]] = axes.at(m.axes[a])[at[a]];
      bool excluded = false;
      for (const ojson& e : lists[0]) excluded = excluded || matches(assignment, e);
      if (excluded) {
        ++m.expansion;
        ++m.excluded;
      } else {
        add_case(m, base, std::move(assignment));
      }
      more = false;
      for (std::size_t a = m.axes.size(); a-- > 0;) {
        if (++at[a] < axes.at(m.axes[a]).size()) {
          more = true;
          break;
        }
        at[a] = 0;
      }
    }
    // Include entries: extra cases; axes they do not name take their first value.
    for (const ojson& entry : lists[1]) {
      ojson assignment = ojson::object();
      for (const std::string& axis : m.axes)
        assignment[axis] = entry.contains(axis) ? entry.at(axis) : axes.at(axis)[0];
      for (const auto& [key, value] : entry.items())
        if (!assignment.contains(key)) assignment[key] = value;
      add_case(m, base, std::move(assignment));
    }
  } catch (const MatrixError& e) {
    throw MatrixError(source + ": " + e.what());
  }
  return m;
}

Matrix read_matrix_file(const std::string& path) {
  const std::optional<std::string> text = files::read(path);
  if (!text) throw MatrixError(path + ": cannot read the matrix file");
  ojson file;
  try {
    file = ojson::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    const std::size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
    throw MatrixError(path + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + what);
  }
  return expand_matrix(file, path);
}

}  // namespace parity::sweep
