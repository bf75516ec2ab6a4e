#pragma once
// The one place that decides whether a ColumnParallelLinear's output (the
// vocab-parallel logits above all) is gathered over TP, and how the output_logits
// site labels it. Megatron: `runtime_gather_output` (a forward argument) wins
// over the constructor's `gather_output`; the review of PR #6648 asked for one
// helper instead of copies of the rule (megatron-reference.md section 2.2, 7.7).
#include <cstdint>
#include <optional>

#include "harness/faults/code_path_faults.h"

namespace parity {

// runtime flag wins over constructor flag.
constexpr bool resolve_gather_output(bool constructor_gather_output,
                                     std::optional<bool> runtime_gather_output) {
  return runtime_gather_output.has_value() ? *runtime_gather_output : constructor_gather_output;
}

// output_logits' tp_shard_dim: -1 (vocab-sharded last dim) unless gathered,
// from the same resolution as the output layer's.
inline std::optional<std::int64_t> logits_tp_shard_dim(bool constructor_gather_output,
                                                       std::optional<bool> runtime_gather_output) {
  bool gathered = resolve_gather_output(constructor_gather_output, runtime_gather_output);
  // Fault wrong-gather-precedence: the label follows the constructor flag even
  // when the runtime value won (megatron-reference 7.7).
  static const CodePathFault wrong_precedence = code_path_fault_with_id("wrong_gather_precedence");
  if (fault_active(wrong_precedence)) gathered = constructor_gather_output;
  return gathered ? std::nullopt : std::optional<std::int64_t>(-1);
}

}  // namespace parity
