#include "harness/checks/run_data.h"

#include <limits>
#include <stdexcept>

namespace parity::checks {

namespace {
double number_or_nan(const nlohmann::json& v) {
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json without_timing(nlohmann::json j) {
  if (j.is_object() && j.contains("steps"))
    for (nlohmann::json& s : j["steps"]) {
      s.erase("seconds");
      s.erase("cpu_seconds");
    }
  return j;
}
}  // namespace

RankRun rank_run_from(const nlohmann::json& r) {
  RankRun out;
  out.rank = r.at("rank").get<int>();
  if (r.contains("parameters"))
    for (const auto& [k, v] : r["parameters"].items()) out.parameter_tp[k] = v.get<std::string>();
  for (const nlohmann::json& s : r.at("steps")) {
    StepData d;
    d.step = s.value("step", static_cast<std::int64_t>(out.steps.size()));
    d.loss = number_or_nan(s.at("loss"));
    if (s.contains("eval_loss")) d.eval_loss = number_or_nan(s["eval_loss"]);
    d.logits_digest = s.at("logits_digest").get<std::string>();
    for (const auto& [k, v] : s.at("grads").items()) d.grads[k] = v.get<std::string>();
    if (s.contains("grad_norms"))
      for (const auto& [k, v] : s["grad_norms"].items()) d.grad_norms[k] = number_or_nan(v);
    if (s.contains("input_grad_norms"))
      for (const auto& [k, v] : s["input_grad_norms"].items())
        d.input_grad_norms[k] = number_or_nan(v);
    if (s.contains("shared_values"))
      for (const auto& [k, v] : s["shared_values"].items())
        d.shared_values[k] = v.get<std::string>();
    if (s.contains("metrics"))
      for (const nlohmann::json& m : s["metrics"])
        d.metrics[{m.at("metric").get<std::string>(), m.at("label").get<std::string>()}] =
            number_or_nan(m.at("value"));
    out.steps.push_back(std::move(d));
  }
  if (r.contains("final_parameters"))
    for (const auto& [k, v] : r["final_parameters"].items())
      out.final_parameters[k] = {number_or_nan(v.at(0)), number_or_nan(v.at(1))};
  if (r.contains("trace"))
    for (const nlohmann::json& t : r["trace"]) {
      Observation o{out.rank,
                    t.at("step").get<std::int64_t>(),
                    t.at("microbatch").get<std::int64_t>(),
                    t.at("phase").get<std::string>(),
                    t.at("site").get<std::string>(),
                    t.at("kind").get<std::string>(),
                    t.at("digest").get<std::string>(),
                    t.value("grad_mode", false),
                    t.value("requires_grad", false),
                    t.value("aliases_accumulator", false)};
      o.numel = t.value("numel", std::int64_t{-1});
      if (t.contains("sum")) o.sum = number_or_nan(t["sum"]);
      if (t.contains("sum_sq")) o.sum_sq = number_or_nan(t["sum_sq"]);
      out.trace.push_back(std::move(o));
    }
  if (r.contains("coordinates") && r["coordinates"].contains("pp"))
    out.stage = r["coordinates"]["pp"].get<int>();
  if (r.contains("point_to_point"))
    for (const nlohmann::json& m : r["point_to_point"])
      out.point_to_point.push_back({m.at("peer").get<int>(), m.at("sends").get<std::int64_t>(),
                                    m.at("recvs").get<std::int64_t>(),
                                    m.at("send_hash").get<std::string>(),
                                    m.at("recv_hash").get<std::string>()});
  if (r.contains("collectives"))
    for (const auto& [axis, g] : r["collectives"].items())
      out.collectives[axis] = {g.at("ranks").get<std::vector<int>>(),
                               g.at("calls").get<std::int64_t>(), g.at("hash").get<std::string>()};
  return out;
}

CheckRun check_run_from(std::string name, std::string title, const RunConfig& config,
                        const std::vector<nlohmann::json>& results) {
  CheckRun run;
  run.name = std::move(name);
  run.title = std::move(title);
  run.config = config;
  run.results = nlohmann::json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json& r = results[i];
    if (!r.is_object() || !r.contains("steps"))
      throw std::runtime_error("run (" + run.name + "): rank " + std::to_string(i) +
                               " returned no result");
    run.ranks.push_back(rank_run_from(r));
    run.results.push_back(without_timing(r));
  }
  return run;
}

}  // namespace parity::checks
