#pragma once
// Inputs from a file (--load-batch FILE, docs/weights.md): safetensors with
// "tokens" and "labels", int64 [rows, seq], rows a multiple of the global batch
// (micro_batch * microbatches * dp). Row g * micro_batch + j is sequence j of
// global microbatch g (the step driver's numbering, Megatron's sampler's: DP
// rank d's local microbatch m is g = m * dp + d). Step s uses block s mod
// (rows / global_batch): one global batch is reused by every step.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "harness/model/init.h"

namespace parity {

// One line naming the file and the field: "FILE: tokens: shape [4, 8], expected [8k, 16] ...".
class BatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LoadedBatch {
 public:
  // Throws BatchError (or TensorFileError for an unreadable/corrupt file).
  LoadedBatch(const std::string& path, std::int64_t global_batch, std::int64_t seq,
              std::int64_t micro_batch, std::int64_t vocab);
  // Global microbatch `index` counted over all steps (step * microbatches_per_step + g):
  // tokens and labels [seq, micro_batch] (the model's [s, b] order).
  MicrobatchData microbatch(std::int64_t index) const;
  std::int64_t rows() const { return tokens_.size(0); }

 private:
  at::Tensor tokens_, labels_;  // [rows, seq]
  std::int64_t micro_batch_;
};

}  // namespace parity
