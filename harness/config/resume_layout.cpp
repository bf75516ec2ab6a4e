#include "harness/config/resume_layout.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "harness/config/run_config_fields.h"

namespace parity {

const std::vector<std::string>& resume_layout_keys() {
  static const std::vector<std::string> keys = {"tp",
                                                "cp",
                                                "dp",
                                                "ep",
                                                "pp",
                                                "vpp",
                                                "sp",
                                                "distributed-optimizer",
                                                "pp-first-layers",
                                                "pp-last-layers"};
  return keys;
}

std::optional<RunConfig> resumed_config(const RunConfig& scenario, std::string* why) {
  auto fail = [&](std::string rule) -> std::optional<RunConfig> {
    if (why) *why = std::move(rule);
    return std::nullopt;
  };
  nlohmann::json values = to_json(scenario);
  std::vector<std::string> named;
  std::string text = scenario.resume_layout;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) return fail("\"" + item + "\" is not key=value (e.g. tp=1,dp=2)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const auto& keys = resume_layout_keys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
      return fail("\"" + key + "\" is not a layout key (" + known + ")");
    }
    if (std::find(named.begin(), named.end(), key) != named.end())
      return fail("\"" + key + "\" is given twice");
    named.push_back(key);
    std::string rule;
    const std::optional<nlohmann::json> v =
        field_value_from_text(*find_run_config_field(key), {value}, &rule);
    if (!v) return fail(key + "=" + value + ": " + rule);
    values[key] = *v;
  }
  RunConfig c;
  try {
    c = run_config_from_json(values);
  } catch (const ConfigParseError& e) {
    return fail(e.what());
  }
  c.resume_at = 0;
  c.resume_layout.clear();
  const long long microbatches = static_cast<long long>(scenario.microbatches) * scenario.dp;
  if (c.dp < 1 || microbatches % c.dp != 0)
    return fail("dp " + std::to_string(c.dp) + " cannot split the global batch's " +
                std::to_string(microbatches) + " microbatches (" +
                std::to_string(scenario.microbatches) + " per DP rank x dp " +
                std::to_string(scenario.dp) + ")");
  c.microbatches = static_cast<int>(microbatches / c.dp);
  auto given = [&](const char* key) {
    return std::find(named.begin(), named.end(), key) != named.end();
  };
  if (c.pp != scenario.pp) {
    if (!given("pp-first-layers")) c.pp_first_layers = 0;
    if (!given("pp-last-layers")) c.pp_last_layers = 0;
    c.pp_layout.clear();
    if (!given("vpp")) c.vpp = 1;
    if (c.pp == 1) c.clear_pipeline();
  }
  if (!given("sp") && c.tp == 1) c.sp = false;
  return c;
}

bool same_layout(const RunConfig& a, const RunConfig& b) {
  return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && a.ep == b.ep && a.pp == b.pp &&
         a.vpp == b.vpp && a.sp == b.sp && a.pp_first_layers == b.pp_first_layers &&
         a.pp_last_layers == b.pp_last_layers && a.pp_layout == b.pp_layout &&
         a.pp_account_embedding == b.pp_account_embedding &&
         a.pp_account_loss == b.pp_account_loss && a.microbatches == b.microbatches &&
         a.micro_batch == b.micro_batch && a.seq == b.seq;
}

std::vector<ResumeProblem> resume_problems(const RunConfig& run, const RunConfig& saved,
                                           long long step) {
  std::vector<ResumeProblem> out;
  if (run.steps <= step)
    out.push_back({"steps", "the checkpoint is at step " + std::to_string(step) +
                                " and --steps counts from step 0: give more than " +
                                std::to_string(step) + " steps"});
  if (run.global_batch() != saved.global_batch())
    out.push_back(
        {"microbatches",
         "the checkpoint's run trained on " + std::to_string(saved.global_batch()) +
             " sequences per step (micro-batch " + std::to_string(saved.micro_batch) + " x " +
             std::to_string(saved.microbatches) + " microbatches x dp " + std::to_string(saved.dp) +
             "), this run on " + std::to_string(run.global_batch()) +
             ": keep micro-batch x microbatches x dp so the data continues where it stopped"});
  if (run.seq != saved.seq)
    out.push_back({"seq", "the checkpoint's run trained on sequences of " +
                              std::to_string(saved.seq) + " tokens, this run on " +
                              std::to_string(run.seq)});
  if (run.optimizer != saved.optimizer)
    out.push_back({"optimizer", "the checkpoint was saved by --optimizer " +
                                    std::string(to_string(saved.optimizer)) + ", this run uses " +
                                    std::string(to_string(run.optimizer)) +
                                    " (its state does not carry over)"});
  return out;
}

}  // namespace parity
