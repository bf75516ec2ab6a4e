// parity diff A B: the first divergence between two traces (harness/trace/trace_diff.h),
// judged with the project's tolerance rule (harness/checks/tolerance.h).
#include <ostream>
#include <sstream>

#include "harness/checks/properties.h"
#include "harness/checks/tolerance.h"
#include "harness/cli/commands.h"
#include "harness/trace/trace_diff.h"

namespace parity::cli {

namespace {

// A trace's dtype name as the precision the tolerance rule knows; the lowest
// precision rule for half types (bf16's tolerance is the loosest parity has).
DType precision_of(const std::string& dtype) {
  if (dtype == "float64") return DType::fp64;
  if (dtype == "float32") return DType::fp32;
  return DType::bf16;
}

bool close(const std::string& dtype, double a, double b, double* rel, std::string* rule) {
  RunConfig config;
  config.dtype = precision_of(dtype);
  const checks::Tolerances t = checks::tolerances_for(config);
  std::ostringstream s;
  s << t.basis << " rel " << t.metric;
  *rule = s.str();
  return checks::within(a, b, t.metric, nullptr, rel);
}

}  // namespace

int run_diff_command(const CommandContext& ctx) {
  const DiffOptions& d = ctx.parsed.diff;
  std::vector<TraceLine> a, b;
  try {
    a = read_trace_file(d.a);
    b = read_trace_file(d.b);
  } catch (const TraceReadError& e) {
    ctx.err << e.what() << "\n";
    return kExitBadInput;
  }
  TraceDiffOptions options;
  options.kinds = d.kinds;
  options.close = close;
  const TraceDiffResult r = diff_traces(a, d.a, b, d.b, options);
  if (!r.equal) {
    ctx.out << "traces differ: " << r.first_divergence << "\n";
    return kExitPropertyFailed;
  }
  if (r.compared == 0) {
    // Nothing compared is not "equal" (an empty selection proves nothing).
    ctx.err << "parity diff: no records to compare"
            << (d.kinds.empty() ? "" : " of the --kinds given") << " in " << d.a << " and " << d.b
            << "\n";
    return kExitBadInput;
  }
  ctx.out << "traces equal: " << r.compared << " record pairs compared within the dtype's "
          << "tolerance (" << d.a << ", " << d.b << ")\n";
  return kExitOk;
}

}  // namespace parity::cli
