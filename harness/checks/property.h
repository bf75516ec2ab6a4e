#pragma once
// A cross-check of contract.md section 5, evaluated by parity check over the
// runs it launched (run_data.h), and the registry that lists them in report
// order. One file per property under harness/checks/properties/; check.cpp
// evaluates whatever the registry lists. docs/properties.md.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/checks/run_data.h"

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

// The runs of one parity check (check.h says what each is). d to h are
// null when the plan has none; `all` lists every run in launch order.
struct CheckRuns {
  const CheckRun* a = nullptr;
  const CheckRun* b = nullptr;
  const CheckRun* c = nullptr;
  const CheckRun* a2 = nullptr;
  const CheckRun* d = nullptr;
  const CheckRun* e = nullptr;
  const CheckRun* f = nullptr;
  const CheckRun* g = nullptr;
  const CheckRun* h = nullptr;
  std::vector<const CheckRun*> all;
};

class Property {
 public:
  virtual ~Property() = default;
  virtual std::string_view name() const = 0;
  // One line each, for `parity list properties` and parity check's help: what
  // it compares, and what a scenario needs for it to compare (else it SKIPs).
  virtual std::string_view doc() const = 0;
  virtual std::string_view needs() const = 0;
  // `rows` receives per-metric comparisons (sharded_reduction), may be null.
  virtual PropertyResult evaluate(const CheckRuns& runs,
                                  std::vector<MetricComparison>* rows) const = 0;
};

// Every property this backend evaluates, in report order.
const std::vector<const Property*>& registered_properties();

}  // namespace parity::checks
