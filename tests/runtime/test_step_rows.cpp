// The step rows `parity run` prints while a run goes on: each rank's ring of
// its last steps (rank_status.h), the stream that merges the ranks' rings in
// step order (step_rows.h), and the table filled from the results where the
// ring lost rows (run_output.h): never a torn, skipped or repeated row.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/run_output.h"
#include "harness/parallel/rank_status.h"
#include "harness/runtime/launcher.h"
#include "harness/runtime/step_rows.h"

namespace parity {
namespace {

using State = RankStatus::StepRowState;

// Each field a different function of (rank, step): a row mixing two writes
// (a torn copy) does not satisfy all of them.
StepRow row_of(int rank, std::int64_t step) {
  return StepRow{step, 1.0 + double(step) / 7.0, 1000 * step + rank, 0.001 * double(step + rank)};
}

// The row the stream must merge from `ranks` ranks' row_of.
StepRow merged_row(int ranks, std::int64_t step) {
  StepRow row = row_of(0, step);
  for (int r = 1; r < ranks; ++r) {
    row.observations += row_of(r, step).observations;
    row.seconds = std::max(row.seconds, row_of(r, step).seconds);
  }
  return row;
}

void expect_row(const StepRow& got, const StepRow& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.loss, want.loss) << "step " << want.step;
  EXPECT_EQ(got.observations, want.observations) << "step " << want.step;
  EXPECT_EQ(got.seconds, want.seconds) << "step " << want.step;
}

struct Ranks {
  std::unique_ptr<RankStatusRecord[]> records;
  std::vector<RankStatus> statuses;
  explicit Ranks(int n) : records(new RankStatusRecord[n]()) {
    for (int r = 0; r < n; ++r) {
      RankStatus::reset(&records[r], r);
      statuses.emplace_back(&records[r]);
    }
  }
};

TEST(StepRows, ARingHoldsItsLastStepsAndTellsNotYetFromLost) {
  Ranks ranks(1);
  RankStatus& s = ranks.statuses[0];
  StepRow row;
  EXPECT_EQ(s.read_step(0, &row), State::not_yet);  // a fresh record: no row
  const std::int64_t published = kStepRowSlots + 4;
  for (std::int64_t step = 0; step < published; ++step) s.publish_step(row_of(0, step));
  EXPECT_EQ(s.steps_done(), published);
  for (std::int64_t step = 0; step < 4; ++step)
    EXPECT_EQ(s.read_step(step, &row), State::lost) << step;  // overwritten
  for (std::int64_t step = 4; step < published; ++step) {
    ASSERT_EQ(s.read_step(step, &row), State::ready) << step;
    expect_row(row, row_of(0, step));
  }
  EXPECT_EQ(s.read_step(published, &row), State::not_yet);
  EXPECT_EQ(s.read_step(published + kStepRowSlots, &row), State::not_yet);
}

// A row is printed once every rank has published its step, merged as the
// table merges the results; the stream waits for the slowest rank.
TEST(StepRows, TheStreamWaitsForEveryRankAndMergesLikeTheTable) {
  Ranks ranks(3);
  StepRowStream stream;
  EXPECT_TRUE(stream.poll(ranks.statuses).empty());
  for (std::int64_t step = 0; step < 2; ++step) ranks.statuses[0].publish_step(row_of(0, step));
  ranks.statuses[1].publish_step(row_of(1, 0));
  for (std::int64_t step = 0; step < 3; ++step) ranks.statuses[2].publish_step(row_of(2, step));
  std::vector<StepRow> rows = stream.poll(ranks.statuses);
  ASSERT_EQ(rows.size(), 1u);
  expect_row(rows[0], merged_row(3, 0));
  EXPECT_EQ(stream.steps_done(), 1);
  EXPECT_TRUE(stream.poll(ranks.statuses).empty());  // nothing twice
  ranks.statuses[1].publish_step(row_of(1, 1));
  ranks.statuses[1].publish_step(row_of(1, 2));
  rows = stream.poll(ranks.statuses);
  ASSERT_EQ(rows.size(), 1u);  // rank 0 has not done step 2
  expect_row(rows[0], merged_row(3, 1));
  EXPECT_EQ(stream.next_step(), 2);
  EXPECT_FALSE(stream.lost());
}

// A rank that ran more steps than its ring holds between two polls: the
// stream stops at the first lost row (rows print in order) while the count of
// steps done goes on; the table from the results supplies the rest, so every
// step prints exactly once and as the whole table would print it.
TEST(StepRows, ALostRowStopsTheStreamAndTheResultsFillTheRest) {
  constexpr int kRanks = 2;
  const std::int64_t steps = 3 * kStepRowSlots;
  Ranks ranks(kRanks);
  StepRowStream stream;
  LaunchResult result;
  result.world_size = kRanks;
  for (int r = 0; r < kRanks; ++r) {
    nlohmann::json steps_json = nlohmann::json::array();
    for (std::int64_t step = 0; step < steps; ++step) {
      const StepRow row = row_of(r, step);
      steps_json.push_back(
          {{"loss", row.loss}, {"observations", row.observations}, {"seconds", row.seconds}});
    }
    result.results.push_back({{"rank", r}, {"steps", steps_json}});
  }
  std::string printed;
  auto print = [&](const std::vector<StepRow>& rows) {
    if (!rows.empty() && printed.empty()) printed = loss_table_header();
    for (const StepRow& row : rows) printed += format_loss_row(row);
  };
  for (std::int64_t step = 0; step < 3; ++step)
    for (int r = 0; r < kRanks; ++r) ranks.statuses[r].publish_step(row_of(r, step));
  print(stream.poll(ranks.statuses));
  EXPECT_EQ(stream.next_step(), 3);
  for (std::int64_t step = 3; step < steps; ++step)  // far past the ring, unpolled
    for (int r = 0; r < kRanks; ++r) ranks.statuses[r].publish_step(row_of(r, step));
  print(stream.poll(ranks.statuses));
  EXPECT_TRUE(stream.lost());
  EXPECT_EQ(stream.next_step(), 3);
  EXPECT_EQ(stream.steps_done(), steps);
  const std::vector<StepRow> all = loss_table_rows(result);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(steps));
  for (std::size_t s = static_cast<std::size_t>(stream.next_step()); s < all.size(); ++s)
    printed += format_loss_row(all[s]);
  EXPECT_EQ(printed, format_loss_table(result));
}

// Writers far faster than the reader (no pause between steps) against a
// reader polling as fast as it can: every row the stream returns is whole
// (each field belongs to its step) and steps come in order, each once; with
// the fill from the results, every step exactly once.
TEST(StepRows, WritersOverwritingFasterThanTheReaderNeverYieldATornOrRepeatedRow) {
  constexpr int kRanks = 2;
  constexpr std::int64_t kSteps = 200000;
  Ranks ranks(kRanks);
  std::atomic<int> writing{kRanks};
  std::vector<std::thread> writers;
  for (int r = 0; r < kRanks; ++r)
    writers.emplace_back([&, r] {
      for (std::int64_t step = 0; step < kSteps; ++step)
        ranks.statuses[r].publish_step(row_of(r, step));
      --writing;
    });
  StepRowStream stream;
  std::vector<std::int64_t> seen;
  bool whole = true;
  while (true) {
    const bool last = writing.load() == 0;  // one more poll after the writers ended
    for (const StepRow& row : stream.poll(ranks.statuses)) {
      const StepRow want = merged_row(kRanks, row.step);
      whole = whole && row.loss == want.loss && row.observations == want.observations &&
              row.seconds == want.seconds;
      seen.push_back(row.step);
    }
    if (last) break;
  }
  for (std::thread& w : writers) w.join();
  EXPECT_TRUE(whole) << "a row mixed two steps' fields";
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], std::int64_t(i));
  EXPECT_EQ(stream.next_step(), static_cast<std::int64_t>(seen.size()));
  EXPECT_EQ(stream.steps_done(), kSteps);
  // Unless a row was lost, the stream has them all; the fill starts where it stopped.
  if (!stream.lost()) {
    EXPECT_EQ(stream.next_step(), kSteps);
  }
}

// The ring alone under the same race: a reader copying the slots the writer
// is overwriting (the oldest steps still held) gets each row whole or is told
// it was lost, never a mix of two steps.
TEST(StepRows, AReaderRacingTheWriterGetsWholeRowsOrLost) {
  constexpr std::int64_t kSteps = 400000;
  Ranks ranks(1);
  RankStatus& s = ranks.statuses[0];
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (std::int64_t step = 0; step < kSteps; ++step) s.publish_step(row_of(0, step));
    writing = false;
  });
  long long ready = 0, torn = 0;
  while (writing.load()) {
    const std::int64_t done = s.steps_done();
    for (std::int64_t step = std::max<std::int64_t>(0, done - kStepRowSlots); step < done; ++step) {
      StepRow row;
      if (s.read_step(step, &row) != State::ready) continue;
      ++ready;
      const StepRow want = row_of(0, step);
      if (row.step != step || row.loss != want.loss || row.observations != want.observations ||
          row.seconds != want.seconds)
        ++torn;
    }
  }
  writer.join();
  EXPECT_EQ(torn, 0) << "of " << ready << " rows read";
  StepRow row;
  ASSERT_EQ(s.read_step(kSteps - 1, &row), State::ready);
  expect_row(row, row_of(0, kSteps - 1));
}

}  // namespace
}  // namespace parity
