#pragma once
// The reductions of one observed tensor that several metrics read, from the
// run's backend (Backend::tensor_statistics, Backend::sums_of_squares), each
// computed on first use and shared by every metric of the observation: one
// read of the tensor, not one per metric. Lives for one observation.
#include <optional>

#include <ATen/core/Tensor.h>

#include "harness/backend/backend.h"
#include "harness/backend/tensor_statistics.h"

namespace parity {

class ObservationReductions {
 public:
  ObservationReductions(const Backend& backend, at::Tensor tensor)
      : backend_(backend), tensor_(std::move(tensor)) {}

  // Never for an empty tensor (the metrics give the identity then).
  const TensorStatistics& statistics();
  // Per row (over the last dim) or per column.
  const at::Tensor& sums_of_squares(bool per_row);

 private:
  const Backend& backend_;
  at::Tensor tensor_;  // detached
  std::optional<TensorStatistics> statistics_;
  std::optional<at::Tensor> by_row_, by_column_;
};

}  // namespace parity
