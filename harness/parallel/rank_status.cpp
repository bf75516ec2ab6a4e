#include "harness/parallel/rank_status.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <thread>

#include "harness/observation/execution_point.h"

namespace parity {

std::string_view to_string(RankState state) {
  switch (state) {
    case RankState::starting:
      return "starting";
    case RankState::running:
      return "running";
    case RankState::in_collective:
      return "in_collective";
    case RankState::finished:
      return "finished";
    case RankState::failed:
      return "failed";
    case RankState::capturing:
      return "capturing";
  }
  return "?";
}

std::string describe(const StepPoint& point) {
  std::string out;
  auto add = [&](const char* name, std::int64_t value) {
    if (value < 0) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(value);
  };
  add("step", point.step);
  add("microbatch", point.microbatch);
  add("layer", point.layer);
  if (point.pass == StepPass::forward) out += " (forward)";
  if (point.pass == StepPass::backward) out += " (backward)";
  return out;
}

namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Seqlock over the record's text fields. Writers make `version` odd while they
// write (a CAS, so concurrent writers serialize); readers retry until they see
// the same even version before and after their copy. The text copies are plain
// memcpy between fences: the usual seqlock idiom (readers discard torn copies).
// A writer that died mid-write (processes mode: a crashed child) leaves the
// version odd forever; readers then give up after a bounded number of tries
// and return what they copied, which is NUL-terminated in any case.
template <std::size_t N>
void write_text(RankStatusRecord& r, char (&field)[N], const std::string& text) {
  std::uint32_t v = r.version.load(std::memory_order_relaxed);
  for (;;) {
    if ((v & 1u) == 0 && r.version.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
                                                         std::memory_order_relaxed))
      break;
    std::this_thread::yield();
    v = r.version.load(std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  field[n] = '\0';
  r.version.store(v + 2, std::memory_order_release);
}

template <std::size_t N>
std::string read_text(const RankStatusRecord& r, const char (&field)[N]) {
  char copy[N];
  for (int attempt = 0;; ++attempt) {
    const std::uint32_t before = r.version.load(std::memory_order_acquire);
    std::memcpy(copy, field, N);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint32_t after = r.version.load(std::memory_order_relaxed);
    if ((before == after && (before & 1u) == 0) || attempt >= 10000) break;
    if (attempt > 100) std::this_thread::yield();
  }
  copy[N - 1] = '\0';
  return std::string(copy);
}

}  // namespace

void RankStatus::reset(RankStatusRecord* record, int rank) {
  record->state.store(static_cast<std::int32_t>(RankState::starting), std::memory_order_relaxed);
  record->progress_ms.store(steady_ms(), std::memory_order_relaxed);
  record->version.store(0, std::memory_order_relaxed);
  record->point_step.store(-1, std::memory_order_relaxed);
  record->point_microbatch.store(-1, std::memory_order_relaxed);
  record->point_layer.store(-1, std::memory_order_relaxed);
  record->point_pass.store(static_cast<std::int32_t>(StepPass::none), std::memory_order_relaxed);
  record->steps_done.store(0, std::memory_order_relaxed);
  for (StepRowSlot& slot : record->step_rows) {
    slot.version.store(0, std::memory_order_relaxed);
    slot.loss_bits.store(0, std::memory_order_relaxed);
    slot.observations.store(0, std::memory_order_relaxed);
    slot.seconds_bits.store(0, std::memory_order_relaxed);
  }
  for (std::atomic<std::int64_t>& calls : record->calls_entered)
    calls.store(0, std::memory_order_relaxed);
  record->last_axis_plus_one.store(0, std::memory_order_relaxed);
  record->rank = rank;
  record->last_collective[0] = '\0';
  record->error[0] = '\0';
  std::atomic_thread_fence(std::memory_order_release);
}

void RankStatus::set_state(RankState state) {
  record_->state.store(static_cast<std::int32_t>(state), std::memory_order_release);
  mark_progress();
}

RankState RankStatus::state() const {
  return static_cast<RankState>(record_->state.load(std::memory_order_acquire));
}

void RankStatus::enter_collective(const CollectiveCall& call) {
  const auto axis = static_cast<std::size_t>(call.axis);
  if (axis < std::size(record_->calls_entered)) {
    record_->calls_entered[axis].store(call.sequence + 1, std::memory_order_relaxed);
    record_->last_axis_plus_one.store(static_cast<std::int32_t>(axis) + 1,
                                      std::memory_order_relaxed);
  }
  write_text(*record_, record_->last_collective, call.describe());
  set_state(RankState::in_collective);
}

void RankStatus::enter_collective(const std::string& description) {
  // A point-to-point batch: not a group call, so a wait in it is not reported
  // against the rank's last group call.
  record_->last_axis_plus_one.store(0, std::memory_order_relaxed);
  write_text(*record_, record_->last_collective, description);
  set_state(RankState::in_collective);
}

std::int64_t RankStatus::calls_entered(Axis axis) const {
  const auto a = static_cast<std::size_t>(axis);
  return a < std::size(record_->calls_entered)
             ? record_->calls_entered[a].load(std::memory_order_acquire)
             : 0;
}

bool RankStatus::last_axis(Axis* axis) const {
  const std::int32_t a = record_->last_axis_plus_one.load(std::memory_order_acquire);
  if (a <= 0) return false;
  *axis = static_cast<Axis>(a - 1);
  return true;
}

void RankStatus::leave_collective() {
  // The last collective stays recorded: a report names the last one entered.
  set_state(RankState::running);
}

void RankStatus::mark_progress() {
  record_->progress_ms.store(steady_ms(), std::memory_order_release);
}

void RankStatus::beat(const StepPoint& point) {
  record_->point_step.store(point.step, std::memory_order_relaxed);
  record_->point_microbatch.store(point.microbatch, std::memory_order_relaxed);
  record_->point_layer.store(point.layer, std::memory_order_relaxed);
  record_->point_pass.store(static_cast<std::int32_t>(point.pass), std::memory_order_relaxed);
  mark_progress();  // release: a reader that sees the new time sees the point
}

StepPoint RankStatus::last_step_point() const {
  StepPoint p;
  p.pass = static_cast<StepPass>(record_->point_pass.load(std::memory_order_acquire));
  if (p.pass == StepPass::none) return p;
  p.step = record_->point_step.load(std::memory_order_relaxed);
  p.microbatch = record_->point_microbatch.load(std::memory_order_relaxed);
  p.layer = record_->point_layer.load(std::memory_order_relaxed);
  return p;
}

void RankStatus::set_error(const std::string& message) {
  write_text(*record_, record_->error, message);
  mark_progress();
}

std::string RankStatus::last_collective() const {
  return read_text(*record_, record_->last_collective);
}

std::string RankStatus::error() const { return read_text(*record_, record_->error); }

std::int64_t RankStatus::progress_ms() const {
  return record_->progress_ms.load(std::memory_order_acquire);
}

std::int64_t RankStatus::now_ms() { return steady_ms(); }

namespace {

static_assert(std::atomic<std::int64_t>::is_always_lock_free &&
                  std::atomic<std::uint64_t>::is_always_lock_free,
              "step rows are read across processes");

std::uint64_t bits_of(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

double double_of(std::uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

// The seqlock with fences (Boehm, "Can seqlocks get along with programming
// language memory models?"): the writer's release fence orders the odd version
// before the fields, the reader's acquire fence the fields before its second
// look at the version.
void RankStatus::publish_step(const StepRow& row) {
  StepRowSlot& slot = record_->step_rows[row.step % kStepRowSlots];
  slot.version.store(2 * row.step + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.loss_bits.store(bits_of(row.loss), std::memory_order_relaxed);
  slot.observations.store(row.observations, std::memory_order_relaxed);
  slot.seconds_bits.store(bits_of(row.seconds), std::memory_order_relaxed);
  slot.version.store(2 * row.step + 2, std::memory_order_release);
  record_->steps_done.store(row.step + 1, std::memory_order_release);
}

std::int64_t RankStatus::steps_done() const {
  return record_->steps_done.load(std::memory_order_acquire);
}

RankStatus::StepRowState RankStatus::read_step(std::int64_t step, StepRow* row) const {
  const StepRowSlot& slot = record_->step_rows[step % kStepRowSlots];
  const std::int64_t written = 2 * step + 2;
  const std::int64_t before = slot.version.load(std::memory_order_acquire);
  if (before < written) return StepRowState::not_yet;  // older, or `step` being written
  if (before > written) return StepRowState::lost;
  StepRow copy;
  copy.step = step;
  copy.loss = double_of(slot.loss_bits.load(std::memory_order_relaxed));
  copy.observations = slot.observations.load(std::memory_order_relaxed);
  copy.seconds = double_of(slot.seconds_bits.load(std::memory_order_relaxed));
  std::atomic_thread_fence(std::memory_order_acquire);
  // Changed meanwhile: only a later step writes this slot again.
  if (slot.version.load(std::memory_order_relaxed) != before) return StepRowState::lost;
  *row = copy;
  return StepRowState::ready;
}

namespace {
thread_local RankStatus* t_rank_status = nullptr;
}  // namespace

RankStatus* rank_status_of_this_thread() { return t_rank_status; }

void step_heartbeat(StepPass pass, std::int64_t layer) {
  if (t_rank_status == nullptr) return;
  const ExecutionPoint& at = current_execution_point();
  t_rank_status->beat(StepPoint{at.step, at.microbatch, layer, pass});
}

void publish_step_row(const StepRow& row) {
  if (t_rank_status != nullptr) t_rank_status->publish_step(row);
}

RankStatusScope::RankStatusScope(RankStatus* status) : previous_(t_rank_status) {
  t_rank_status = status;
}
RankStatusScope::~RankStatusScope() { t_rank_status = previous_; }

GraphCaptureScope::GraphCaptureScope() : status_(t_rank_status) {
  if (status_ == nullptr) return;
  previous_ = status_->state();
  status_->set_state(RankState::capturing);
  status_->mark_progress();
}

GraphCaptureScope::~GraphCaptureScope() {
  if (status_ == nullptr) return;
  // A failure inside the capture already moved the state on (failed): keep it.
  if (status_->state() == RankState::capturing) status_->set_state(previous_);
  status_->mark_progress();
}

}  // namespace parity
