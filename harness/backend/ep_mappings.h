#pragma once
// The token dispatcher's mappings for the mixture-of-experts layer, as
// autograd functions over parity's Communicator (Megatron's
// tensor_parallel/mappings.py all_to_all and the split-size forms of
// gather_from_sequence_parallel_region / reduce_scatter_to_sequence_parallel_region
// that MoEAlltoAllTokenDispatcher uses with expert tensor parallelism). Tokens
// are rows (dim 0); how many rows go to or come from each rank differs per
// rank. With a null communicator or a group of one every mapping is the
// identity (no autograd node, no collective).
//
// - all_to_all_expert_parallel: forward the uneven all-to-all; backward the
//   all-to-all of the gradient with send and receive counts swapped.
// - gather_rows_from_tensor_parallel_region: forward the uneven all-gather of
//   rows; backward the uneven reduce-scatter of rows.
// - reduce_scatter_rows_to_tensor_parallel_region: forward the uneven
//   reduce-scatter of rows; backward the uneven all-gather of rows.
#include <cstdint>
#include <vector>

#include "harness/parallel/all_to_all.h"  // AllToAllResult

namespace parity {

class Communicator;

// x [n, ...]: rows grouped by destination EP rank, send_counts[d] rows for rank
// d. Returns the rows every EP rank sent here (rank 0's first) and how many
// came from each; the output's gradient goes back along the same routes.
AllToAllResult all_to_all_expert_parallel(const at::Tensor& x,
                                          const std::vector<std::int64_t>& send_counts,
                                          Communicator* ep);

// Each TP rank's rows x [n_r, ...] (n_r may differ per rank), concatenated in
// TP-rank order on every rank, with the counts n_r. Backward: the output's
// gradient summed over TP, this rank's n_r rows of it.
AllToAllResult gather_rows_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp);

// The adjoint: x [sum(rows_per_rank), ...] on every TP rank (the same counts on
// every rank) -> the sum over TP of this rank's rows_per_rank[rank] rows.
// Backward: the uneven all-gather of the gradient.
at::Tensor reduce_scatter_rows_to_tensor_parallel_region(
    const at::Tensor& x, const std::vector<std::int64_t>& rows_per_rank, Communicator* tp);

}  // namespace parity
