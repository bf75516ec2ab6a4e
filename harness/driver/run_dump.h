#pragma once
// parity run --dump DIR (docs/weights.md "Dumps"): the run's initial weights,
// inputs, step 0's logits, per-token loss and gradients, full and unsharded
// with Megatron's names, as safetensors files that --load-weights and
// --load-batch read back. Every rank takes part in the gathers (same
// collectives on every rank); global rank 0 writes into `staging`
// (dump_staging_path), which the command renames to DIR after adding
// manifest.json and trace.jsonl.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/init.h"

namespace parity {

class GPTModel;
class LoadedBatch;

// DIR + ".partial": where the ranks write before the rename.
std::string dump_staging_path(const std::string& dir);

class RunDump {
 public:
  // `steps`, `microbatches`: the run's; `batch` may be null (seeded inputs).
  RunDump(GPTModel& model, std::string staging, bool writer, std::int64_t steps,
          std::int64_t microbatches, const LoadedBatch* batch);
  // Before the first step: weights.safetensors and batch.safetensors.
  void write_weights_and_inputs();
  // Step 0's logits and per-token losses of this rank's microbatches.
  void write_outputs(std::int64_t step, const std::vector<at::Tensor>& logits,
                     const std::vector<at::Tensor>& token_losses);
  // Step 0's gradients, after finalize_grads and before the update.
  void write_gradients(std::int64_t step);
  // file name -> {"holds", "tensors": {name: {"dtype", "shape"}}} of what was written.
  const nlohmann::json& files() const { return files_; }

 private:
  GPTModel& model_;
  std::string staging_;
  bool writer_;
  std::int64_t steps_, microbatches_;
  const LoadedBatch* batch_;
  nlohmann::json files_ = nlohmann::json::object();

  at::Tensor full_parameter_tensor(const at::Tensor& local, const ShardSpec& spec) const;
  // [s_local, b, ...] per local microbatch -> [global batch, seq, ...] of the step.
  at::Tensor gather_batch(const std::vector<at::Tensor>& per_microbatch, bool vocab_sharded) const;
  void write(const std::string& file, const std::string& holds,
             const std::vector<std::pair<std::string, at::Tensor>>& tensors);
};

}  // namespace parity
