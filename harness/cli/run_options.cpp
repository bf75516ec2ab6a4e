#include "harness/cli/run_options.h"

#include <algorithm>

#include <CLI/CLI.hpp>

#include "harness/config/run_config_fields.h"

namespace parity::cli {
namespace {

ConfigViolation::Kind kind_of(const RunConfigField& f) {
  switch (f.type) {
    case FieldType::flag:
      return ConfigViolation::Kind::flag;
    case FieldType::text:
    case FieldType::choice:
    case FieldType::text_list:
      return ConfigViolation::Kind::text;
    default:
      return ConfigViolation::Kind::number;
  }
}

bool is_choice(const RunConfigField& f, const std::string& text) {
  const std::string known = f.choices();
  std::size_t start = 0;
  while (start <= known.size()) {
    const std::size_t comma = known.find(", ", start);
    if (known.substr(start, comma - start) == text) return true;
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return false;
}

}  // namespace

void add_run_options(CLI::App* app, RunOptionValues& values, const RunConfig& shown,
                     const std::vector<std::string_view>& only) {
  const std::vector<RunConfigField>& fields = run_config_fields();
  values.texts.assign(fields.size(), "");
  values.lists.assign(fields.size(), {});
  values.flags.assign(fields.size(), false);
  values.options.clear();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const RunConfigField& f = fields[i];
    if (!only.empty() && std::find(only.begin(), only.end(), f.key) == only.end()) {
      values.options.push_back(nullptr);
      continue;
    }
    const std::string key(f.key);
    const nlohmann::json value = f.get(shown);
    CLI::Option* o = nullptr;
    std::string help(f.help);
    switch (f.type) {
      case FieldType::flag:
        values.flags[i] = value.get<bool>();
        o = app->add_flag("--" + key + ",!--no-" + key, values.flags[i], help);
        o->default_str(value.get<bool>() ? "on" : "off");
        break;
      case FieldType::text_list:
        o = app->add_option("--" + key, values.lists[i], help);
        if (f.comma_separated)
          o->delimiter(',');
        else
          o->allow_extra_args(false);
        if (!value.empty()) o->default_str(field_value_text(value));
        break;
      default:
        o = app->add_option("--" + key, values.texts[i], help);
        o->default_str(field_value_text(value));
        break;
    }
    if (f.type != FieldType::flag) o->type_name(help_type_name(f));
    o->group(std::string(f.group));
    values.options.push_back(o);
  }
}

nlohmann::json given_run_options(const RunOptionValues& values,
                                 std::vector<ConfigViolation>* violations) {
  const std::vector<RunConfigField>& fields = run_config_fields();
  nlohmann::json given = nlohmann::json::object();
  for (std::size_t i = 0; i < fields.size() && i < values.options.size(); ++i) {
    if (values.options[i] == nullptr || values.options[i]->count() == 0) continue;
    const RunConfigField& f = fields[i];
    const std::string key(f.key);
    if (f.type == FieldType::flag) {
      given[key] = values.flags[i];
      continue;
    }
    const std::vector<std::string> texts = f.type == FieldType::text_list
                                               ? values.lists[i]
                                               : std::vector<std::string>{values.texts[i]};
    if (f.type == FieldType::choice && !is_choice(f, texts.back())) {
      violations->push_back({key, texts.back(), "must be one of " + f.choices(), kind_of(f)});
      continue;
    }
    std::string rule;
    if (std::optional<nlohmann::json> v = field_value_from_text(f, texts, &rule))
      given[key] = std::move(*v);
    else
      violations->push_back({key, texts.back(), rule, kind_of(f)});
  }
  return given;
}

}  // namespace parity::cli
