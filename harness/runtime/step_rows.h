#pragma once
// The step rows of a whole run while it runs: a RunWatcher (launch_spec.h)
// polls every rank's ring (rank_status.h) and gets each step's row once every
// rank has published it, in step order, each exactly once. A row combines the
// ranks as `parity run`'s table does: the loss of the lowest rank (the loss is
// all-reduced, the same on every rank), observations summed, the slowest
// rank's seconds. A row some rank's ring lost (steps faster than the polls)
// stops the stream there: rows print in order, so the rest comes from the
// ranks' results at the end (next_step() says where to start).
#include <cstdint>
#include <vector>

#include "harness/parallel/rank_status.h"

namespace parity {

class StepRowStream {
 public:
  // A run's first step (a resumed run's is its checkpoint's step).
  explicit StepRowStream(std::int64_t first_step = 0) : next_(first_step) {}
  // The rows every rank has published since the last poll that this stream
  // had not returned yet, in step order. `ranks` by rank, as a RunWatcher gets them.
  std::vector<StepRow> poll(const std::vector<RankStatus>& ranks);
  // The step of the next row poll() would return (= the rows returned so far).
  std::int64_t next_step() const { return next_; }
  // A rank's ring lost the row of next_step(): poll() returns nothing more.
  bool lost() const { return lost_; }
  // The steps every rank has completed, at the last poll (rows lost or not).
  std::int64_t steps_done() const { return steps_done_; }

 private:
  std::int64_t next_ = 0;
  std::int64_t steps_done_ = 0;
  bool lost_ = false;
};

}  // namespace parity
