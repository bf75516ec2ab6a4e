#pragma once
// Code-path faults: small, documented deviations compiled into the real code
// paths of parity (off by default), each reproducing a bug class of
// megatron-reference.md section 7. `--inject NAME` switches one on for a run;
// `parity mutants` proves the property suite catches every one of them.
//
// One table (code_path_faults.cpp) names them all, says what each changes, and
// which property is expected to catch it under which scenario. Code asks
// `fault_active(CodePathFault::x)`: a thread-local bit, set for the rank
// thread by the launcher (run_rank_body) from the run's --inject values. Autograd on
// CPU runs backward on the calling thread, so recomputation sees the bit too; a
// backend whose backward runs elsewhere carries the bits with the per-thread
// context (harness/observation/thread_context.h).
//
// A leaf room: it includes nothing of parity's.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

enum class CodePathFault : std::uint8_t {
  missing_recompute_suspension,
  observe_recompute_not_forward,
  grad_mode_gating,
  replica_overcount,
  sqrt_before_sum,
  mean_of_means,
  sp_residual_mislabel,
  cp_population_dropped,
  dp_population_dropped,
  prepare_aliases_buffer,
  notify_on_replay,
  warmup_counted_as_step,
  asymmetric_collective,
  wrong_gather_precedence,
  contribution_with_autograd,
  observe_forced_logits,
  padding_included,
  diagnostics_under_cp,
  expert_index_local,
  router_silent_missing,
  median_unpadded_gather,
  // Field bugs (docs/field-bugs.md): public trackers' bugs by their mechanism.
  recompute_rng_not_restored,
  expert_skip_empty_rank,
  sp_grad_not_reduced,
  cp_loss_scale,
  cp_kv_grad_local_only,
  eval_loss_cp_unscaled,
  aux_loss_tracked_on_recompute,
  router_stats_include_padding,
  expert_load_count_ungated,
  aux_loss_tracker_host_side,
  replica_marked_tp_sharded,
  wgrad_hook_per_graph_task,
};
inline constexpr int kCodePathFaultCount = 33;
static_assert(kCodePathFaultCount <= 64, "fault bits are a std::uint64_t");

struct CodePathFaultInfo {
  CodePathFault fault;
  std::string_view name;       // the --inject spelling: "sqrt-before-sum"
  std::string_view doc;        // what the deviation does, one line
  std::string_view caught_by;  // the property expected to fail: "sharded_reduction"
  std::string_view needs;      // the scenario that exposes it: "an l2/rms metric on a split tensor"
};

// Every code-path fault, in enum order.
const std::array<CodePathFaultInfo, kCodePathFaultCount>& code_path_faults();
const CodePathFaultInfo& info(CodePathFault fault);
std::optional<CodePathFault> parse_code_path_fault(std::string_view name);
// The bit of `fault` in a set of switched-on faults (fault_active's encoding).
constexpr std::uint64_t code_path_fault_bit(CodePathFault fault) {
  return std::uint64_t{1} << static_cast<unsigned>(fault);
}

namespace detail {
// Inline and constant-initialized: every TU reads the thread-local slot directly
// (no TLS wrapper call; UBSan flagged the extern form's wrapper as a null load).
inline thread_local std::uint64_t t_active_code_path_faults = 0;
// The innermost live CodePathFaultScope: a scope destroyed while a later one is
// alive aborts with a message instead of restoring a stale set.
inline thread_local const void* t_code_path_fault_owner = nullptr;
}  // namespace detail

// Whether `fault` is switched on for this thread. Inline: the check sits in
// hot paths (observe, every collective).
inline bool fault_active(CodePathFault fault) {
  return (detail::t_active_code_path_faults >> static_cast<unsigned>(fault)) & 1u;
}

// RAII: switches this thread's code-path faults to exactly those named (or adds
// the single `fault`) and restores the previous set on exit.
class [[nodiscard]] CodePathFaultScope {
 public:
  // The run's `--inject` values; names that are no code-path fault (such as
  // `crash-rank=1`) are ignored.
  explicit CodePathFaultScope(const std::vector<std::string>& injected);
  explicit CodePathFaultScope(CodePathFault fault);
  ~CodePathFaultScope();
  CodePathFaultScope(const CodePathFaultScope&) = delete;
  CodePathFaultScope& operator=(const CodePathFaultScope&) = delete;

 private:
  struct Exactly {
    std::uint64_t bits;
  };
  explicit CodePathFaultScope(Exactly set);
  std::uint64_t previous_;
  const void* outer_;
};

}  // namespace parity
