#include "harness/runtime/launch_spec.h"
#include "harness/base/check.h"

#include <nlohmann/json.hpp>

namespace parity {

nlohmann::json launch_spec_to_json(const LaunchSpec& s) {
  return {{"tp", s.tp},
          {"cp", s.cp},
          {"dp", s.dp},
          {"ep", s.ep},
          {"pp", s.pp},
          {"etp", s.etp},
          {"mode", std::string(launch_mode_name(s.mode))},
          {"timeout_seconds", s.timeout_seconds},
          {"faults", s.faults},
          {"check_collectives", s.check_collectives},
          {"transport", s.transport},
          {"worker_executable", s.worker_executable}};
}

LaunchSpec launch_spec_from_json(const nlohmann::json& j) {
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(key))
      PARITY_FAIL(std::string("launch spec: missing \"") + key + "\"");
    return j.at(key);
  };
  try {
    LaunchSpec s;
    s.tp = field("tp").get<int>();
    s.cp = field("cp").get<int>();
    s.dp = field("dp").get<int>();
    s.ep = field("ep").get<int>();
    s.pp = field("pp").get<int>();
    s.etp = field("etp").get<int>();
    const std::string mode = field("mode").get<std::string>();
    if (mode == "threads")
      s.mode = LaunchMode::threads;
    else if (mode == "processes")
      s.mode = LaunchMode::processes;
    else if (mode == "env")
      s.mode = LaunchMode::env;
    else
      PARITY_FAIL("launch spec: \"mode\" = \"" + mode + "\" is not a launch mode");
    s.timeout_seconds = field("timeout_seconds").get<double>();
    s.faults = field("faults").get<std::vector<std::string>>();
    s.check_collectives = field("check_collectives").get<bool>();
    s.transport = field("transport").get<std::string>();
    s.worker_executable = field("worker_executable").get<std::string>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    PARITY_FAIL(std::string("launch spec: ") + e.what());
  }
}

namespace {
std::string lines(const std::vector<LaunchProblem>& problems) {
  std::string text;
  for (const LaunchProblem& p : problems)
    text += (text.empty() ? "" : "\n") + p.field + (p.value.empty() ? "" : "=" + p.value) + ": " +
            p.rule;
  return text;
}
}  // namespace

LaunchSpecError::LaunchSpecError(std::vector<LaunchProblem> problems)
    : std::invalid_argument(lines(problems)), problems_(std::move(problems)) {}

}  // namespace parity
