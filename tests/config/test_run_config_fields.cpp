// RunConfig's field table, the sources of its values, and its JSON form (the scenario
// files' keys are the flag names).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "harness/config/run_config.h"
#include "harness/config/run_config_fields.h"
#include "harness/config/value_sources.h"
#include "tests/config/unusual_run_config.h"

namespace parity {
namespace {

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

TEST(RunConfigJson, RoundTripEveryField) {
  const RunConfig c = testing::unusual_run_config();
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

}  // namespace
}  // namespace parity
