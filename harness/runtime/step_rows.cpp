#include "harness/runtime/step_rows.h"

#include <algorithm>

namespace parity {

std::vector<StepRow> StepRowStream::poll(const std::vector<RankStatus>& ranks) {
  std::vector<StepRow> rows;
  if (ranks.empty()) return rows;
  std::int64_t done = ranks.front().steps_done();
  for (const RankStatus& r : ranks) done = std::min(done, r.steps_done());
  steps_done_ = std::max(steps_done_, done);
  while (!lost_ && next_ < steps_done_) {
    StepRow row;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      StepRow mine;
      const RankStatus::StepRowState state = ranks[i].read_step(next_, &mine);
      if (state == RankStatus::StepRowState::lost) lost_ = true;
      if (state != RankStatus::StepRowState::ready) return rows;
      if (i == 0) {
        row = mine;
      } else {
        row.observations += mine.observations;
        row.seconds = std::max(row.seconds, mine.seconds);
      }
    }
    rows.push_back(row);
    ++next_;
  }
  return rows;
}

}  // namespace parity
