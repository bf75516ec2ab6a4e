#include "harness/metrics/observation_reductions.h"

namespace parity {

const TensorStatistics& ObservationReductions::statistics() {
  if (!statistics_) statistics_ = backend_.tensor_statistics(tensor_);
  return *statistics_;
}

const at::Tensor& ObservationReductions::sums_of_squares(bool per_row) {
  std::optional<at::Tensor>& sums = per_row ? by_row_ : by_column_;
  if (!sums) sums = backend_.sums_of_squares(tensor_, per_row);
  return *sums;
}

}  // namespace parity
