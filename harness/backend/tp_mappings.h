#pragma once
// Megatron's tensor_parallel/mappings.py over parity's Communicator: the
// collectives inside the model's forward, each a custom autograd function whose
// backward is the adjoint collective. With a null communicator or a group of one
// every mapping is the identity (no autograd node, no collective).
//
// clang-format off
// | mapping                                         | forward           | backward          |
// |-------------------------------------------------|-------------------|-------------------|
// | copy_to_tensor_parallel_region                  | identity          | all-reduce        |
// | reduce_from_tensor_parallel_region              | all-reduce        | identity          |
// | scatter_to_tensor_parallel_region               | own chunk, last   | all-gather last   |
// | gather_from_tensor_parallel_region              | all-gather last   | own chunk, last   |
// | all_gather_last_dim_from_tensor_parallel_region | all-gather last   | reduce-scat. last |
// | scatter_to_sequence_parallel_region             | own chunk, dim 0  | all-gather dim 0  |
// | gather_from_sequence_parallel_region            | all-gather dim 0  | reduce-scat. dim 0 |
// | reduce_scatter_to_sequence_parallel_region      | reduce-scat. dim 0 | all-gather dim 0 |
// ("last": the last dim.)
// clang-format on
namespace at {
class Tensor;
}

namespace parity {

class Communicator;

at::Tensor copy_to_tensor_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor gather_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp);
// Every rank's whole tensor afterwards, so each rank's gradient is a partial
// sum (Megatron's all_gather_last_dim_from_tensor_parallel_region: the grouped
// QKV with fewer query groups than TP ranks).
at::Tensor all_gather_last_dim_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor scatter_to_sequence_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor gather_from_sequence_parallel_region(const at::Tensor& x, Communicator* tp);
at::Tensor reduce_scatter_to_sequence_parallel_region(const at::Tensor& x, Communicator* tp);

}  // namespace parity
