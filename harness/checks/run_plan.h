#pragma once
// The runs of parity check, each described by what it changes relative to the
// scenario's own run. A property declares the variants it compares
// (property.h); plan_check (check.h) launches their union, each once, in
// run_precedes' order. A variant's report name ("a", "b", ...) and title come
// from one table (run_plan.cpp): the names the report, baselines and sweep
// records carry. docs/properties.md "Runs".
#include <cstdint>
#include <string>
#include <vector>

#include "harness/config/run_config.h"

namespace parity::checks {

// One change of a run relative to the scenario as given.
enum class RunChange : std::uint8_t {
  // The same global batch on one rank: tp = cp = dp = ep = 1, no sp, dp times
  // the microbatches; and without dropout when the scenario draws dropout on
  // several ranks (per-rank mask streams, as Megatron's tracker: one rank
  // cannot draw the same masks).
  single_rank = 1U << 0,
  without_recompute = 1U << 1,
  // Graphs off. Rank-targeted faults (--inject throw-rank=R ...) are left
  // out: such a run is a reference; code-path faults still apply.
  eager = 1U << 2,
  without_dropout = 1U << 3,
  reference_backend = 1U << 4,  // the oracle every other backend is compared with
  again = 1U << 5,              // a second launch of the same run
  // Routing without --moe-force-routing and, with padding, every padding
  // token's id shifted (--padding-token-shift 1).
  router_inputs_changed = 1U << 6,
  // Two launches (resume_invariance): the scenario's layout trains
  // --resume-at steps and saves a checkpoint, then the run resumes from it at
  // --resume-layout for the rest. Its config keeps resume-at and
  // resume-layout (check.cpp launches the two); every other run's drops them.
  resumed = 1U << 7,
};

class RunVariant {
 public:
  constexpr RunVariant() = default;  // the scenario as given
  constexpr RunVariant with(RunChange change) const {
    return RunVariant(static_cast<std::uint8_t>(bits_ | static_cast<std::uint8_t>(change)));
  }
  constexpr bool has(RunChange change) const {
    return (bits_ & static_cast<std::uint8_t>(change)) != 0;
  }
  constexpr bool operator==(RunVariant other) const { return bits_ == other.bits_; }
  constexpr bool operator!=(RunVariant other) const { return bits_ != other.bits_; }
  constexpr std::uint8_t bits() const { return bits_; }

 private:
  constexpr explicit RunVariant(std::uint8_t bits) : bits_(bits) {}
  std::uint8_t bits_ = 0;
};

// The variants the properties compare today, by what they are (report name).
namespace variant {
inline constexpr RunVariant scenario{};                                        // (a)
inline constexpr RunVariant scenario_again = scenario.with(RunChange::again);  // (a2)
inline constexpr RunVariant eager = scenario.with(RunChange::eager);  // (d): recompute kept
inline constexpr RunVariant eager_without_recompute =
    eager.with(RunChange::without_recompute);  // (c)
inline constexpr RunVariant single_rank =
    eager_without_recompute.with(RunChange::single_rank);  // (b)
inline constexpr RunVariant eager_without_recompute_or_dropout =
    eager_without_recompute.with(RunChange::without_dropout);                                 // (e)
inline constexpr RunVariant reference_backend = scenario.with(RunChange::reference_backend);  // (f)
inline constexpr RunVariant reference_backend_without_dropout =
    reference_backend.with(RunChange::without_dropout);  // (f) when the scenario has dropout
inline constexpr RunVariant without_dropout = scenario.with(RunChange::without_dropout);  // (g)
inline constexpr RunVariant router_inputs_changed =
    scenario.with(RunChange::router_inputs_changed);                   // (h)
inline constexpr RunVariant resumed = eager.with(RunChange::resumed);  // (r): recompute kept
inline constexpr RunVariant resumed_without_dropout =
    resumed.with(RunChange::without_dropout);  // (r) when the layout changes under dropout
}  // namespace variant

// The report's name of a run ("a", "c", ...) and its title ("scenario's
// sharding, no recompute, no graphs"). A variant outside the table is named
// after the table's run closest to it and the changes that one lacks
// ("b+again": the single-rank run, again).
struct RunLabel {
  std::string name, title;
};
RunLabel label_of(RunVariant v);
std::string run_ref(RunVariant v);  // "(c)": how reports and notes name it

// Launch order: the table's (the scenario's own run first), then the
// variants outside it by their changes. Deterministic for any set.
bool run_precedes(RunVariant x, RunVariant y);

// The oracle every other backend is compared with (backend_parity).
inline constexpr const char* kReferenceBackend = "reference";

// The scenario draws dropout masks on more than one rank (single_rank's rule).
bool dropout_on_many_ranks(const RunConfig& scenario);

// What a run under full-iteration graphs collects of `metrics`: the
// optimizer's norms only (computed outside the graph; replays observe nothing).
std::vector<std::string> parameter_metrics_of(const std::vector<std::string>& metrics);

// What `v` launches for `scenario`: the scenario with its changes, no report
// file, a trace, and `metrics` (what the check compares); under full-iteration
// graphs only the parameter metrics (forward metrics are rejected there). A
// resumed variant's config is the saving launch's plan (resumed_launches).
RunConfig run_config(RunVariant v, const RunConfig& scenario,
                     const std::vector<std::string>& metrics);

// The two launches of a resumed run whose planned config is `planned`: the
// saving launch (the planned config for resume-at steps, saving into
// `checkpoint`), then the resume launch (the config at the resume layout,
// resuming from `checkpoint`, to the planned steps). Neither carries
// resume-at or resume-layout.
struct ResumedLaunches {
  RunConfig saving, resuming;
};
ResumedLaunches resumed_launches(const RunConfig& planned, const std::string& checkpoint);

}  // namespace parity::checks
