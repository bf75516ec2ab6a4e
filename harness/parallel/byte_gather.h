#pragma once
// Variable-length bytes from every rank of a group: what a collective of
// equal shapes cannot move directly (a stage's encoded metric values, a
// stage's serialized tensors for one file). One all-gather of the lengths,
// then one of the bytes padded to the longest; every rank of the group calls it.
#include <ATen/core/Tensor.h>

#include <vector>

namespace parity {

class Communicator;

// `bytes`: uint8, 1-D, on the CPU. Returns each group rank's bytes in rank
// order (this rank's own included), uint8 on the CPU.
std::vector<at::Tensor> all_gather_bytes(Communicator& group, const at::Tensor& bytes);

}  // namespace parity
