#pragma once
// A cross-check of contract.md section 5, evaluated by parity check over the
// runs it launched (run_data.h, by variant: run_plan.h), and the registry that
// lists them in report order. One file per property under
// harness/checks/properties/, registering itself; check.cpp plans and evaluates
// whatever the registry lists. docs/properties.md, docs/extending.md.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/checks/run_data.h"
#include "harness/checks/run_plan.h"
#include "harness/runtime/failure_report.h"

namespace parity::checks {

enum class Status { pass, fail, skip };
std::string_view to_string(Status s);  // "PASS", "FAIL", "SKIP"

struct PropertyResult {
  std::string name;
  Status status = Status::skip;
  std::string compared;  // which runs: "(a) vs (c)"
  std::string reason;  // FAIL: the first violation; SKIP: why it compared nothing; PASS: a summary
  // SKIP only: how to make the property compare ("use --steps 4"); may be empty
  // when no option of the scenario can (e.g. a property that needs a backend).
  std::string hint;
  std::optional<double> max_abs, max_rel;
  std::string worst_site, worst_label;
  std::string
      note;  // e.g. "losses bitwise; 24/26 gradients bitwise, the rest within fp32 rel 1e-6"
};

// One compared metric value (sharded_reduction's per-metric table).
struct MetricComparison {
  std::string run;  // "a" or "c"
  std::int64_t step = 0;
  std::string metric, label;
  double value = 0, reference = 0;
  double abs_err = 0, rel_err = 0;
  bool ok = true;
};

// The runs of one parity check by variant, and the scenario they were planned for.
class CheckRuns {
 public:
  explicit CheckRuns(RunConfig scenario = {}) : scenario_(std::move(scenario)) {}
  void add(RunVariant variant, const CheckRun& run);  // launch order
  const RunConfig& scenario() const { return scenario_; }
  const CheckRun* find(RunVariant variant) const;  // nullptr: not made
  // std::logic_error when not made: a property asks for the runs it declared
  // (evaluate_property makes sure they were).
  const CheckRun& at(RunVariant variant) const;
  const std::vector<const CheckRun*>& all() const { return all_; }  // launch order

 private:
  RunConfig scenario_;
  std::vector<std::pair<RunVariant, const CheckRun*>> by_variant_;
  std::vector<const CheckRun*> all_;
};

// A run's rank failure that is a property's FAIL rather than a crash, told by
// the ranks' typed causes (RankFailure::thrown, error_kind), never by their
// messages: the check stops at that run and reports this result alone.
struct ClaimedFailure {
  std::string label;  // the progress line's "FAILED (aliasing)"
  PropertyResult result;
};

// A property: one file under harness/checks/properties/ that declares the runs
// it compares, evaluates them and registers itself (PARITY_REGISTER_PROPERTY).
class Property {
 public:
  virtual ~Property() = default;
  virtual std::string_view name() const = 0;
  // One line each, for `parity list properties` and parity check's help: what
  // it compares, and what a scenario needs for it to compare (else it SKIPs).
  virtual std::string_view doc() const = 0;
  virtual std::string_view needs() const = 0;
  // The runs it compares for `scenario`, by what they are (run_plan.h); parity
  // check launches the union over every property, the scenario's own run always.
  virtual std::vector<RunVariant> runs_needed(const RunConfig& scenario) const = 0;
  // One line for parity check's notes when its choice of runs wants saying; "" = none.
  virtual std::string plan_note(const RunConfig&) const { return ""; }
  // `failure` of run `run` (its report name) when it is this property's FAIL.
  // Asked in report order: the first claim wins.
  virtual std::optional<ClaimedFailure> claim_failure(const std::string& /*run*/,
                                                      const FailureReport& /*failure*/) const {
    return std::nullopt;
  }
  // Called when every run of runs_needed(runs.scenario()) is in `runs`.
  // `rows` receives per-metric comparisons (sharded_reduction), may be null.
  virtual PropertyResult evaluate(const CheckRuns& runs,
                                  std::vector<MetricComparison>* rows) const = 0;
};

// property.evaluate(runs, rows) when every run it needs was made; else SKIP
// naming the first run that was not.
PropertyResult evaluate_property(const Property& property, const CheckRuns& runs,
                                 std::vector<MetricComparison>* rows);

// Every registered property, in report order (each one's place). Throws
// std::logic_error when none is: the properties' objects were not linked
// (harness/checks/CMakeLists.txt: parity_check_properties).
const std::vector<const Property*>& registered_properties();
const Property* find_property(std::string_view name);  // nullptr: none of that name

// PARITY_REGISTER_PROPERTY(Class, place) at file scope, beside the class: one
// static instance of Class in the registry at `place` (report order: contract.md
// section 5's order, a new property the next free number). Two properties of
// one name or one place abort every binary that links them, at start-up.
class PropertyRegistration {
 public:
  PropertyRegistration(const Property& property, int place);
};
#define PARITY_REGISTER_PROPERTY(Class, place)                              \
  namespace {                                                               \
  const Class parity_registered_##Class{};                                  \
  const ::parity::checks::PropertyRegistration parity_registration_##Class( \
      parity_registered_##Class, place);                                    \
  }

}  // namespace parity::checks
