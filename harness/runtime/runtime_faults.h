#pragma once
// Injected faults (`--inject NAME[=ARG]`): one registry of fault names, each with
// a one-line doc. Runtime faults (crash-rank, hang-rank, throw-rank) take a rank
// and fire at the rank program's fault point; code-path faults (known-bad
// variants such as `sqrt-before-sum`, the properties' negative controls, listed in
// harness/faults/code_path_faults.def) take no argument and are queried where the
// code path lives.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/runtime/launch_spec.h"

namespace parity {

class RankStatus;

enum class FaultArgument { none, rank };

struct FaultInfo {
  std::string name;  // "crash-rank"
  std::string doc;   // one line
  FaultArgument argument = FaultArgument::none;
};

// Every known fault, sorted by name. The runtime faults are built in.
std::vector<FaultInfo> fault_registry();
// Adds a code-path fault (call before parsing; e.g. from a backend's static
// registration). Re-registering a name replaces its doc.
void register_fault(FaultInfo info);
std::string known_fault_names();  // "crash-rank, hang-rank, throw-rank"

struct FaultSpec {
  std::string name;
  std::optional<int> rank;  // runtime faults
  std::string text;         // as written: "crash-rank=1"
};

// One `--inject` value; nullopt (and the rule in *why) when invalid.
std::optional<FaultSpec> parse_fault_spec(std::string_view text, int world_size, std::string* why);
// The `inject` rules: unknown names (listing the known ones), a
// missing/bad/out-of-range rank, two runtime faults on one rank. Field
// "inject", the value as written. (validate_run_config maps them through
// harness/config/launch_mapping.h.)
std::vector<LaunchProblem> fault_spec_problems(const std::vector<std::string>& specs,
                                               int world_size);

enum class RankFaultKind { crash, hang, throw_error };
std::string_view to_string(RankFaultKind kind);  // "crash-rank", ...

class FaultPlan {
 public:
  FaultPlan() = default;
  // Throws LaunchSpecError on any invalid spec.
  static FaultPlan from_specs(const std::vector<std::string>& specs, int world_size);

  std::optional<RankFaultKind> rank_fault(int rank) const;
  bool enabled(std::string_view code_path_fault) const;
  bool empty() const { return specs_.empty(); }
  const std::vector<FaultSpec>& specs() const { return specs_; }

 private:
  std::vector<FaultSpec> specs_;
};

// Cooperative cancellation: what a hung rank blocks on, so the supervisor can
// end it and no thread is orphaned.
class CancelToken {
 public:
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Blocks until cancelled (returns true) or `timeout` passes (false).
  bool wait_for(std::chrono::milliseconds timeout) const;
  void wait() const;

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
};

// Thrown out of a rank program when the supervisor cancelled it.
class RankCancelled : public std::runtime_error {
 public:
  RankCancelled() : std::runtime_error("rank cancelled by the supervisor") {}
};

// Thrown to simulate crash-rank in a rank that shares its process (threads
// mode): the rank thread ends at once without a result and is reported as
// crashed. Deliberately not a std::exception, so `catch (const
// std::exception&)` in rank code does not swallow it.
struct SimulatedCrash {
  int rank;
};

// Fires this rank's runtime fault, if the plan has one:
//  crash: own_process ? std::abort() : throw SimulatedCrash;
//  hang:  blocks on `cancel` without progress, then throws RankCancelled;
//  throw: throws std::runtime_error("injected fault: throw-rank=R").
void fire_rank_fault(const FaultPlan& plan, int rank, bool own_process, const CancelToken& cancel);

}  // namespace parity
