#pragma once
// Host twins of dimwise_sums.h's kernels: the same sums of squares in the same
// order, on the CPU, bit for bit. x: contiguous [rows, cols]; out: rows
// (row sums) or cols (column sums) values.
#include <cstdint>

#include "cuda/kernels/bf16.h"

namespace parity::kernels {

void row_sums_of_squares_twin(const float* x, std::int64_t rows, std::int64_t cols, float* out);
void row_sums_of_squares_twin(const Bf16* x, std::int64_t rows, std::int64_t cols, float* out);
void row_sums_of_squares_twin(const double* x, std::int64_t rows, std::int64_t cols, double* out);

void column_sums_of_squares_twin(const float* x, std::int64_t rows, std::int64_t cols, float* out);
void column_sums_of_squares_twin(const Bf16* x, std::int64_t rows, std::int64_t cols, float* out);
void column_sums_of_squares_twin(const double* x, std::int64_t rows, std::int64_t cols,
                                 double* out);

}  // namespace parity::kernels
