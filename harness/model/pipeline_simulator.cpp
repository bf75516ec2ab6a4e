#include "harness/model/pipeline_simulator.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace parity {
namespace {

struct OpRef {
  int stage = 0;
  std::size_t step = 0, op = 0;
};

// (sender, receiver, tensor kind or -1 when tagless).
using Channel = std::tuple<int, int, int>;

Channel channel_of(int stage, const P2POp& op, P2PMatching matching) {
  const int kind = matching == P2PMatching::tagless ? -1 : static_cast<int>(op.tensor);
  return op.direction == P2PDirection::send ? Channel{stage, op.peer, kind}
                                            : Channel{op.peer, stage, kind};
}

class Simulator {
 public:
  Simulator(const std::vector<std::vector<ScheduleStep>>& stages, P2PMatching matching)
      : stages_(stages), pp_(static_cast<int>(stages.size())), cursor_(stages.size(), 0) {
    // Pair the ops channel by channel, in posting order.
    std::map<Channel, std::vector<OpRef>> sends, recvs;
    for (int s = 0; s < pp_; ++s) {
      const auto& steps = stages_[static_cast<std::size_t>(s)];
      done_.emplace_back();
      partner_.emplace_back();
      for (std::size_t i = 0; i < steps.size(); ++i) {
        done_.back().emplace_back(steps[i].ops.size(), false);
        partner_.back().emplace_back(steps[i].ops.size(), std::nullopt);
        for (std::size_t j = 0; j < steps[i].ops.size(); ++j) {
          const P2POp& op = steps[i].ops[j];
          auto& side = op.direction == P2PDirection::send ? sends : recvs;
          side[channel_of(s, op, matching)].push_back({s, i, j});
        }
      }
    }
    for (const auto& [channel, list] : sends) {
      const auto it = recvs.find(channel);
      for (std::size_t k = 0; it != recvs.end() && k < list.size() && k < it->second.size(); ++k) {
        partner(list[k]) = it->second[k];
        partner(it->second[k]) = list[k];
      }
    }
  }

  PipelineSimulation run() {
    PipelineSimulation result;
    for (;;) {
      for (int s = 0; s < pp_; ++s) advance(s);
      bool progress = false;
      for (int s = 0; s < pp_ && result.message.empty(); ++s) {
        if (finished(s)) continue;
        const std::size_t i = cursor_[static_cast<std::size_t>(s)];
        for (std::size_t j = 0; j < step(s, i).ops.size(); ++j) {
          const OpRef self{s, i, j};
          const auto& other = partner(self);
          if (done(self) || !other ||
              cursor_[static_cast<std::size_t>(other->stage)] != other->step)
            continue;
          if (!same_tensor(self, *other)) {
            result.outcome = PipelineSimulation::Outcome::mismatched_pair;
            result.message = mismatch(self, *other);
            break;
          }
          done(self) = done(*other) = true;
          progress = true;
        }
      }
      if (!result.message.empty() || !progress) break;
    }
    if (result.message.empty()) describe_end(result);
    for (int s = 0; s < pp_; ++s) result.steps_done.push_back(cursor_[static_cast<std::size_t>(s)]);
    return result;
  }

 private:
  const ScheduleStep& step(int s, std::size_t i) const {
    return stages_[static_cast<std::size_t>(s)][i];
  }
  const P2POp& op(const OpRef& r) const { return step(r.stage, r.step).ops[r.op]; }
  std::vector<bool>::reference done(const OpRef& r) {
    return done_[static_cast<std::size_t>(r.stage)][r.step][r.op];
  }
  std::optional<OpRef>& partner(const OpRef& r) {
    return partner_[static_cast<std::size_t>(r.stage)][r.step][r.op];
  }
  bool finished(int s) const {
    return cursor_[static_cast<std::size_t>(s)] == stages_[static_cast<std::size_t>(s)].size();
  }

  // Past compute steps, empty batches and completed batches.
  void advance(int s) {
    std::size_t& i = cursor_[static_cast<std::size_t>(s)];
    const auto& steps = stages_[static_cast<std::size_t>(s)];
    while (i < steps.size()) {
      bool complete = true;
      for (bool d : done_[static_cast<std::size_t>(s)][i]) complete = complete && d;
      if (!complete) break;
      ++i;
    }
  }

  bool same_tensor(const OpRef& a, const OpRef& b) const {
    const OpRef& send = op(a).direction == P2PDirection::send ? a : b;
    const OpRef& recv = op(a).direction == P2PDirection::send ? b : a;
    const P2POp &s = op(send), &r = op(recv);
    if (s.tensor != r.tensor || s.microbatch != r.microbatch) return false;
    const int from = s.chunk * pp_ + send.stage, to = r.chunk * pp_ + recv.stage;
    return to == from + (s.tensor == P2PTensor::activation ? 1 : -1);
  }

  std::string where(const OpRef& r) const {
    return "stage " + std::to_string(r.stage) + " (" + p2p_call_name(step(r.stage, r.step).call) +
           ", step " + std::to_string(r.step) + ")";
  }

  std::string mismatch(const OpRef& a, const OpRef& b) const {
    const OpRef& send = op(a).direction == P2PDirection::send ? a : b;
    const OpRef& recv = op(a).direction == P2PDirection::send ? b : a;
    return "mismatched pair: " + where(send) + " posts '" + describe(op(send)) + "' and " +
           where(recv) + " meets it with '" + describe(op(recv)) + "'";
  }

  void describe_end(PipelineSimulation& result) const {
    std::string blocked;
    for (int s = 0; s < pp_; ++s) {
      if (finished(s)) continue;
      const std::size_t i = cursor_[static_cast<std::size_t>(s)];
      for (std::size_t j = 0; j < step(s, i).ops.size(); ++j) {
        const OpRef self{s, i, j};
        if (done_[static_cast<std::size_t>(s)][i][j]) continue;
        const auto& other = partner_[static_cast<std::size_t>(s)][i][j];
        if (!other) {
          result.outcome = PipelineSimulation::Outcome::unmatched;
          const P2POp& o = op(self);
          result.message = "unmatched: " + where(self) + " posts '" + describe(o) + "' but stage " +
                           std::to_string(o.peer) + " posts no " +
                           (o.direction == P2PDirection::send ? "recv" : "send") +
                           " for it on that channel";
          return;
        }
        if (!blocked.empty()) blocked += "; ";
        blocked += where(self) + " waits on '" + describe(op(self)) + "', whose partner is " +
                   where(*other) + "'s '" + describe(op(*other)) + "', but stage " +
                   std::to_string(other->stage) + " is " + position(other->stage);
        break;  // one op per blocked stage
      }
    }
    if (blocked.empty()) return;
    result.outcome = PipelineSimulation::Outcome::deadlock;
    result.message = "deadlock: " + blocked;
  }

  std::string position(int s) const {
    if (finished(s)) return "finished";
    const std::size_t i = cursor_[static_cast<std::size_t>(s)];
    return "at step " + std::to_string(i) + " (" + describe(step(s, i)) + ")";
  }

  const std::vector<std::vector<ScheduleStep>>& stages_;
  int pp_;
  std::vector<std::size_t> cursor_;
  std::vector<std::vector<std::vector<bool>>> done_;
  std::vector<std::vector<std::vector<std::optional<OpRef>>>> partner_;
};

}  // namespace

PipelineSimulation simulate_pipeline(const std::vector<std::vector<ScheduleStep>>& stages,
                                     P2PMatching matching) {
  return Simulator(stages, matching).run();
}

const char* outcome_name(PipelineSimulation::Outcome outcome) {
  switch (outcome) {
    case PipelineSimulation::Outcome::completed:
      return "completed";
    case PipelineSimulation::Outcome::mismatched_pair:
      return "mismatched pair";
    case PipelineSimulation::Outcome::unmatched:
      return "unmatched";
    case PipelineSimulation::Outcome::deadlock:
      return "deadlock";
  }
  return "?";
}

}  // namespace parity
