// parity diff A B: the first divergence between two traces (harness/trace/trace_diff.h),
// judged with the project's tolerance rule (harness/checks/tolerance.h). A or B may
// be a `parity run --dump` folder: its trace.jsonl is compared.
#include <optional>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/checks/properties.h"
#include "harness/checks/tolerance.h"
#include "harness/cli/commands.h"
#include "harness/trace/trace_diff.h"

namespace parity::cli {

namespace {

// A trace's dtype name as the precision the tolerance rule knows; the lowest
// precision rule for half types (bf16's tolerance is the loosest parity has).
ModelDType precision_of(const std::string& dtype) {
  if (dtype == "float64") return ModelDType::fp64;
  if (dtype == "float32") return ModelDType::fp32;
  return ModelDType::bf16;
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

// The trace file an operand names: a file is itself; a folder must be a dump
// (manifest.json with "format": "parity-dump"), whose trace.jsonl it names.
// nullopt (and `why`, one line) for any other folder.
std::optional<std::string> trace_file_of(const std::string& operand, std::string* why) {
  if (!files::is_directory(operand)) return operand;
  const std::string manifest_path = operand + "/manifest.json";
  bool dump = false;
  if (const std::optional<std::string> text = files::read(manifest_path)) {
    const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
    dump =
        manifest.is_object() && manifest.contains("format") && manifest["format"] == "parity-dump";
  }
  if (dump) return operand + "/trace.jsonl";
  *why = operand +
         ": a folder, but not a dump (parity diff reads a folder only when it holds "
         "manifest.json with \"format\": \"parity-dump\", as parity run --dump writes; "
         "otherwise give a trace file)";
  return std::nullopt;
}

}  // namespace

int run_diff_command(const CommandContext& ctx) {
  DiffOptions d = ctx.parsed.diff;
  for (std::string* operand : {&d.a, &d.b}) {
    std::string why;
    const std::optional<std::string> file = trace_file_of(*operand, &why);
    if (!file) {
      ctx.err << why << "\n";
      return kExitBadInput;
    }
    *operand = *file;  // messages name the trace file itself (file:line)
  }
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
