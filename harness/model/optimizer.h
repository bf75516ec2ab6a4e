#pragma once
// The training step's optimizer (docs/model.md "Optimizer"): plain SGD
// (p -= lr * g, parity's default) or Megatron's Adam (torch.optim.Adam's
// update with bias correction and no weight decay: Megatron's --optimizer
// adam --weight-decay 0), on whole parameters or, under the distributed
// optimizer, on this DP rank's FlatShard ranges (flat_shard_layout.h), where
// Megatron keeps the optimizer state. The state (the step count, Adam's two
// moments) is what a checkpoint saves (checkpoint.h).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/model/flat_shard_layout.h"
#include "harness/model/model_options.h"  // OptimizerKind

namespace parity {

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.1;  // 0: no update at all (the step count stays)
  // Adam (Megatron's defaults).
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool distributed = false;  // --distributed-optimizer
};

class Optimizer {
 public:
  // `params`: the model's, in its order (the layout's flat order).
  Optimizer(const OptimizerSettings& settings, const std::vector<Parameter>& params, int dp_rank,
            int dp_size);

  // One update from every parameter's gradient (after finalize_grads); counts
  // the step. Under the distributed optimizer every DP rank must call it (the
  // all-gather over `dp`). A no-op with lr 0.
  void step(std::vector<Parameter>& params, Communicator* dp);

  const OptimizerSettings& settings() const { return settings_; }
  // The updates applied so far: Adam's t before the next update.
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  // Null without the distributed optimizer.
  const FlatShardLayout* layout() const { return layout_ ? &*layout_ : nullptr; }

  // The state tensors' names: "exp_avg", "exp_avg_sq" for Adam; none for SGD.
  const std::vector<std::string>& moment_names() const;
  // Moment `m` (index into moment_names()) of parameter `index` as this rank
  // keeps it, a view to read or fill: the parameter's local shape without the
  // distributed optimizer (and for an expert under it); under it, the owned
  // elements (layout()->owned(index)), 1-D, inside flat_moment(m).
  at::Tensor moment(std::size_t m, std::size_t index) const;
  // Under the distributed optimizer: moment `m` of this rank's flat shard,
  // [layout()->shard_elements()], the dense parameters' owned elements at their
  // shard_offset (the padding past the last parameter stays zero).
  const at::Tensor& flat_moment(std::size_t m) const { return flat_.at(m); }

 private:
  OptimizerSettings settings_;
  std::optional<FlatShardLayout> layout_;
  std::int64_t steps_ = 0;
  std::vector<std::vector<at::Tensor>> per_parameter_;  // [moment][parameter]; experts too
  std::vector<at::Tensor> flat_;                        // [moment], distributed only
  // Adam on one piece; `m`, `v` the piece's moments.
  void adam(at::Tensor& value, const at::Tensor& grad, const at::Tensor& m,
            const at::Tensor& v) const;
};

}  // namespace parity
