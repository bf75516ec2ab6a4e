// parity's pipeline schedules (harness/model/pipeline_schedule.h) against
// Megatron Core's own schedule functions, read from the JSON
// tools/megatron/pipeline_schedules.py writes (label `megatron`,
// tool_live.sh pipeline_schedules.py). parity must accept exactly the configurations
// Megatron runs, and for those give every pp rank the same steps in the same
// order: each forward and backward (microbatch, chunk), each P2PCommunicator
// call and the ops of its batch (direction, tensor, peer, microbatch, chunk:
// the tensor Megatron's mocks saw sent or consumed). Also the warmup count
// (get_pp_rank_microbatches) and the chunk order Megatron derives from its
// schedule table (convert_schedule_table_to_order). Megatron's recorded ops,
// played against each other (pipeline_simulator.h), must complete when the
// transport tags activations and gradients apart; under tagless matching the
// outcomes are counted and must be parity's own.
// Usage: pipeline_schedule_conformance MEGATRON.json; exit 0 all equal, 1 not.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/pipeline_schedule.h"
#include "harness/model/pipeline_simulator.h"
#include "tests/megatron/conformance.h"

namespace {

using nlohmann::json;
using parity::P2PCall;
using parity::P2POp;
using parity::PipelineScheduleConfig;
using parity::ScheduleStep;

using parity::conformance::fail;

PipelineScheduleConfig config_of(const json& c) {
  PipelineScheduleConfig p;
  p.pp = c.at("pp").get<int>();
  p.vpp = c.at("vpp").get<int>();
  p.microbatches = c.at("microbatches").get<int>();
  if (!c.at("microbatch-group").is_null()) p.microbatch_group = c.at("microbatch-group").get<int>();
  p.forward_only = c.value("forward-only", false);
  return p;
}

int int_or(const json& v, int fallback) { return v.is_null() ? fallback : v.get<int>(); }

// Megatron's recorded step as parity's; a recorded oddity (a send carrying
// another kind of tensor, a received tensor nothing consumed, more than one
// batch in a call) is a failure of its own and leaves a -1 that differs.
ScheduleStep step_of(const json& s, const std::string& where) {
  ScheduleStep out;
  if (s.contains("compute")) {
    out.kind = ScheduleStep::Kind::compute;
    out.pass = s.at("compute") == "forward" ? parity::PipelinePass::forward
                                            : parity::PipelinePass::backward;
    out.microbatch = int_or(s.at("microbatch"), -1);
    out.chunk = int_or(s.at("chunk"), -1);
    return out;
  }
  out.kind = ScheduleStep::Kind::communicate;
  const std::string name = s.at("call").get<std::string>();
  bool known = false;
  for (int c = 0; c <= static_cast<int>(P2PCall::send_forward_backward_recv_forward_backward); ++c)
    if (name == parity::p2p_call_name(static_cast<P2PCall>(c))) {
      out.call = static_cast<P2PCall>(c);
      known = true;
    }
  if (!known) fail(where + ": Megatron calls " + name + ", which parity does not know");
  if (s.at("batches").size() > 1)
    fail(where + ": Megatron's " + name + " made " + std::to_string(s.at("batches").size()) +
         " batches");
  for (const json& batch : s.at("batches"))
    for (const json& o : batch) {
      P2POp op;
      op.direction = o.at("op") == "send" ? parity::P2PDirection::send : parity::P2PDirection::recv;
      op.tensor = o.at("tensor") == "activation" ? parity::P2PTensor::activation
                                                 : parity::P2PTensor::gradient;
      op.peer = o.at("peer").get<int>();
      op.microbatch = int_or(o.at("microbatch"), -1);
      op.chunk = int_or(o.at("chunk"), -1);
      if (op.direction == parity::P2PDirection::send && o.at("carries") != o.at("tensor"))
        fail(where + ": Megatron's " + name + " sends a " + o.at("carries").dump() + " as " +
             o.at("tensor").dump());
      if (op.direction == parity::P2PDirection::recv &&
          o.value("consumed_as", "") !=
              (op.tensor == parity::P2PTensor::activation ? "forward" : "backward"))
        fail(where + ": Megatron's " + name + " receives an " + o.at("tensor").dump() +
             " consumed by " + o.value("consumed_as", "nothing"));
      out.ops.push_back(op);
    }
  return out;
}

bool same(const ScheduleStep& a, const ScheduleStep& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == ScheduleStep::Kind::compute)
    return a.pass == b.pass && a.microbatch == b.microbatch && a.chunk == b.chunk;
  return a.call == b.call && a.ops == b.ops;
}

std::vector<int> order_of(const std::vector<ScheduleStep>& steps) {
  std::vector<int> order;
  for (const ScheduleStep& s : steps)
    if (s.kind == ScheduleStep::Kind::compute)
      order.push_back(s.pass == parity::PipelinePass::forward ? s.chunk + 1 : -(s.chunk + 1));
  return order;
}

std::map<std::string, int> tagless_outcomes;  // "pp 2 with vpp > 1: mismatched pair" -> count

// Returns the number of stages compared.
int compare_case(const json& c) {
  const json& m = c.at("megatron");
  const PipelineScheduleConfig p = config_of(c.at("config"));
  const std::string where = c.at("config").dump();
  const auto violations = parity::validate_pipeline_schedule(p);
  const bool megatron_accepts = m.at("accepted").get<bool>();
  if (megatron_accepts != violations.empty()) {
    fail(where + ": parity " +
         (violations.empty()
              ? std::string("accepts")
              : "rejects (" + violations.front().field + " = " + violations.front().value + ": " +
                    violations.front().rule + ")") +
         "; Megatron " +
         (megatron_accepts ? std::string("runs it") : m.at("error").get<std::string>()));
    return 0;
  }
  if (!megatron_accepts) return 0;
  std::vector<std::vector<ScheduleStep>> recorded;
  for (const json& stage : m.at("stages")) {
    const int rank = stage.at("rank").get<int>();
    const std::string at = where + " pp rank " + std::to_string(rank);
    std::vector<ScheduleStep> theirs;
    for (std::size_t i = 0; i < stage.at("steps").size(); ++i)
      theirs.push_back(step_of(stage.at("steps")[i], at + " step " + std::to_string(i)));
    const std::vector<ScheduleStep> ours = parity::pipeline_schedule(p, rank);
    for (std::size_t i = 0; i < ours.size() || i < theirs.size(); ++i) {
      const bool both = i < ours.size() && i < theirs.size();
      if (both && same(ours[i], theirs[i])) continue;
      fail(at + " step " + std::to_string(i) + ": parity " +
           (i < ours.size() ? parity::describe(ours[i]) : "(ends)") + ", Megatron " +
           (i < theirs.size() ? parity::describe(theirs[i]) : "(ends)"));
      break;
    }
    if (parity::pipeline_warmup_forwards(p, rank) != stage.at("warmup").get<int>())
      fail(at + ": warmup forwards: parity " +
           std::to_string(parity::pipeline_warmup_forwards(p, rank)) + ", Megatron " +
           stage.at("warmup").dump());
    // The order CUDA graphs capture in is a training order (forwards and
    // backwards); a forward_only schedule is compared step by step only.
    if (!p.forward_only && json(order_of(ours)) != stage.at("order"))
      fail(at + ": chunk order: parity " + json(order_of(ours)).dump() +
           ", Megatron's convert_schedule_table_to_order " + stage.at("order").dump());
    recorded.push_back(std::move(theirs));
  }
  const auto tagged = parity::simulate_pipeline(recorded, parity::P2PMatching::by_tensor_kind);
  if (tagged.outcome != parity::PipelineSimulation::Outcome::completed)
    fail(where + ": Megatron's ops, tagged by tensor kind: " + tagged.message);
  const auto tagless = parity::simulate_pipeline(recorded, parity::P2PMatching::tagless);
  const auto ours =
      parity::simulate_pipeline(parity::pipeline_schedules(p), parity::P2PMatching::tagless);
  if (tagless.outcome != ours.outcome || tagless.message != ours.message)
    fail(where + ": tagless simulation: Megatron's ops " + tagless.message + ", parity's " +
         ours.message);
  ++tagless_outcomes[std::string(p.pp == 2 && p.vpp > 1 ? "pp 2 with vpp > 1" : "the others") +
                     ": " + parity::outcome_name(tagless.outcome)];
  return static_cast<int>(recorded.size());
}

}  // namespace

namespace parity::conformance {

Summary compare(const json& megatron) {
  int accepted = 0, stages = 0;
  const json& cases = megatron.at("cases");
  for (const json& c : cases) {
    const int compared = compare_case(c);
    stages += compared;
    accepted += compared > 0;
  }
  // The grid must reach every schedule, or nothing above compared answers.
  if (accepted < 500) fail("only " + std::to_string(accepted) + " configurations accepted by both");
  std::ostringstream counts;
  counts << cases.size() << " configurations, " << accepted << " run by both (" << stages
         << " stages compared step by step); tagless matching:";
  for (const auto& [what, count] : tagless_outcomes) counts << " [" << what << ": " << count << "]";
  return {"pipeline schedules", counts.str()};
}

}  // namespace parity::conformance
