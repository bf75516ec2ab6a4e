#include "harness/runtime/runtime_faults.h"

#include "harness/base/nearest_names.h"
#include "harness/faults/code_path_faults.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

namespace parity {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, FaultInfo> faults;
  Registry() {
    add({"crash-rank",
         "rank R aborts at its fault point (processes/env: std::abort, SIGABRT; "
         "threads: the rank thread ends without a result)",
         FaultArgument::rank});
    add({"hang-rank",
         "rank R blocks at its fault point without progress until the supervisor "
         "stops the run",
         FaultArgument::rank});
    add({"throw-rank",
         "rank R throws std::runtime_error(\"injected fault: throw-rank=R\") at its "
         "fault point",
         FaultArgument::rank});
    // The code-path faults: one list (code_path_faults.def).
    for (const CodePathFaultInfo& f : code_path_faults())
      add({std::string(f.name), std::string(f.doc), FaultArgument::none});
  }
  void add(FaultInfo info) {
    std::string name = info.name;
    faults[name] = std::move(info);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::optional<int> parse_int(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::vector<FaultInfo> fault_registry() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<FaultInfo> out;
  for (const auto& [name, info] : r.faults) out.push_back(info);
  return out;
}

void register_fault(FaultInfo info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.add(std::move(info));
}

std::string known_fault_names() {
  std::string out;
  for (const FaultInfo& f : fault_registry()) {
    if (!out.empty()) out += ", ";
    out += f.name;
    if (f.argument == FaultArgument::rank) out += "=R";
  }
  return out;
}

namespace {
// `unknown fault "boom" (parity list faults lists the 36 known)`, with the
// nearest names when `name` looks like a typo of them.
std::string unknown_fault(const std::string& name) {
  std::vector<std::string> names;
  for (const FaultInfo& f : fault_registry()) names.push_back(f.name);
  const std::string nearest = did_you_mean(name, names);
  return "unknown fault \"" + name + "\"" + (nearest.empty() ? "" : ": " + nearest) +
         " (parity list faults lists the " + std::to_string(names.size()) + " known)";
}
}  // namespace

std::string_view to_string(RankFaultKind kind) {
  switch (kind) {
    case RankFaultKind::crash:
      return "crash-rank";
    case RankFaultKind::hang:
      return "hang-rank";
    case RankFaultKind::throw_error:
      return "throw-rank";
  }
  return "?";
}

std::optional<FaultSpec> parse_fault_spec(std::string_view text, int world_size, std::string* why) {
  auto fail = [&](std::string rule) -> std::optional<FaultSpec> {
    if (why) *why = std::move(rule);
    return std::nullopt;
  };
  const std::size_t eq = text.find('=');
  const std::string name(text.substr(0, eq));
  std::optional<FaultInfo> info;
  for (FaultInfo& f : fault_registry())
    if (f.name == name) info = std::move(f);
  if (!info) return fail(unknown_fault(name));
  FaultSpec spec{name, std::nullopt, std::string(text)};
  if (info->argument == FaultArgument::none) {
    if (eq != std::string_view::npos) return fail("fault " + name + " takes no argument");
    return spec;
  }
  if (eq == std::string_view::npos) return fail("fault " + name + " needs a rank: " + name + "=R");
  const std::optional<int> rank = parse_int(text.substr(eq + 1));
  if (!rank) return fail("the rank of " + name + " must be a non-negative integer");
  if (*rank >= world_size)
    return fail("rank " + std::to_string(*rank) + " is outside the world (world size " +
                std::to_string(world_size) + ")");
  spec.rank = rank;
  return spec;
}

std::vector<LaunchProblem> fault_spec_problems(const std::vector<std::string>& specs,
                                               int world_size) {
  std::vector<LaunchProblem> out;
  std::map<int, std::string> rank_faults;
  std::set<std::string> seen;
  for (const std::string& text : specs) {
    std::string why;
    const std::optional<FaultSpec> spec = parse_fault_spec(text, world_size, &why);
    if (!spec) {
      out.push_back({"inject", text, why});
      continue;
    }
    if (!seen.insert(text).second) {
      out.push_back({"inject", text, "given twice"});
      continue;
    }
    if (spec->rank) {
      auto [it, inserted] = rank_faults.emplace(*spec->rank, text);
      if (!inserted)
        out.push_back(
            {"inject", text,
             "rank " + std::to_string(*spec->rank) + " already has a fault (" + it->second + ")"});
    }
  }
  return out;
}

FaultPlan FaultPlan::from_specs(const std::vector<std::string>& specs, int world_size) {
  std::vector<LaunchProblem> v = fault_spec_problems(specs, world_size);
  if (!v.empty()) throw LaunchSpecError(std::move(v));
  FaultPlan plan;
  for (const std::string& text : specs)
    plan.specs_.push_back(*parse_fault_spec(text, world_size, nullptr));
  return plan;
}

std::optional<RankFaultKind> FaultPlan::rank_fault(int rank) const {
  for (const FaultSpec& s : specs_) {
    if (!s.rank || *s.rank != rank) continue;
    if (s.name == "crash-rank") return RankFaultKind::crash;
    if (s.name == "hang-rank") return RankFaultKind::hang;
    if (s.name == "throw-rank") return RankFaultKind::throw_error;
  }
  return std::nullopt;
}

bool FaultPlan::enabled(std::string_view code_path_fault) const {
  return std::any_of(specs_.begin(), specs_.end(),
                     [&](const FaultSpec& s) { return s.name == code_path_fault; });
}

void CancelToken::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool CancelToken::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return cancelled(); });
}

void CancelToken::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return cancelled(); });
}

void fire_rank_fault(const FaultPlan& plan, int rank, bool own_process, const CancelToken& cancel) {
  const std::optional<RankFaultKind> kind = plan.rank_fault(rank);
  if (!kind) return;
  switch (*kind) {
    case RankFaultKind::crash:
      if (own_process) std::abort();
      throw SimulatedCrash{rank};
    case RankFaultKind::hang:
      cancel.wait();
      throw RankCancelled();
    case RankFaultKind::throw_error:
      throw std::runtime_error("injected fault: throw-rank=" + std::to_string(rank));
  }
}

}  // namespace parity
