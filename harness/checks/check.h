#pragma once
// `parity check [SCENARIO.json]`: runs the scenario (a), the same global batch
// on a single rank with no recompute and no graphs (b), the scenario's
// sharding with recompute and graphs off (c) and (a) again, then evaluates the
// properties of contract.md section 5 that apply on this backend
// (properties.h) and prints/writes the report (report.h). docs/cli.md,
// docs/properties.md, docs/report-schema.md.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/run_config.h"
#include "harness/parallel/launcher.h"

namespace parity::checks {

struct CheckPlan {
  RunConfig a, b, c;
  // (d): the scenario with graphs off and its recompute kept, graph_replay's
  // reference when (a) has both graphs and recompute (else (c) serves).
  std::optional<RunConfig> d;
  std::vector<std::string> notes;  // e.g. why (a) runs without metrics
};
// The run configs for a validated scenario.
CheckPlan plan_check(const RunConfig& scenario);

// Exit codes: 0 every property PASS or SKIP, 1 a FAIL, 2 a report that cannot
// be written, 3 a rank failure (other than prepared state aliasing an observed
// tensor, which is graph_replay's FAIL).
int run_check(const RunConfig& scenario, const std::string& source, std::ostream& out,
              std::ostream& err, const LaunchOptions& options = {}, bool* must_exit_now = nullptr);

}  // namespace parity::checks
