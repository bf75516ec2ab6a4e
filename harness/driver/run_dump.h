#pragma once
// parity run --dump DIR (docs/weights.md "Dumps"): the run's initial weights,
// inputs, step 0's logits, per-token loss and gradients, full and unsharded
// with Megatron's names, as safetensors files that --load-weights and
// --load-batch read back. Every rank takes part in the gathers (same
// collectives on every rank); global rank 0 writes them into `staging`
// (dump_staging_path), which the command renames to DIR after adding
// manifest.json and trace.jsonl. Every rank also writes its own step 0
// observations (observations.rank{r}.safetensors, this rank's local shards).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/init.h"

namespace parity {

class GPTModel;
class LoadedBatch;
struct Parameter;
class TraceRecorder;
struct TraceRecord;

// DIR + ".partial": where the ranks write before the rename.
std::string dump_staging_path(const std::string& dir);

// "observations.rank{rank}.safetensors".
std::string observations_file_name(int rank);
// The key of a record's values in its rank's observations file: "seq" + its
// seq zero-padded to 5 digits (more when it needs them) + "." + its site, e.g.
// "seq00012.decoder.layers.0.residual_contribution"; sorts in seq order below
// 100000 records per rank.
std::string observation_key(std::int64_t seq, const std::string& site);
// Which records a dump keeps the values of (TraceRecorder::keep_values): step 0's.
bool dump_keeps_values_of(const TraceRecord& record);

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
  // After training, on EVERY rank: the values `recorder` kept
  // (dump_keeps_values_of), keyed by observation_key, into
  // observations_file_name(recorder.rank()).
  void write_observations(const TraceRecorder& recorder);
  // file name -> {"holds", "tensors": {name: {"dtype", "shape"}}} of what THIS
  // rank wrote (rank 0: the shared files and its observations; any other rank:
  // its observations). The command merges every rank's into manifest.json.
  const nlohmann::json& files() const { return files_; }

 private:
  GPTModel& model_;
  std::string staging_;
  bool writer_;
  std::int64_t steps_, microbatches_;
  const LoadedBatch* batch_;
  nlohmann::json files_ = nlohmann::json::object();

  at::Tensor full_parameter_tensor(const at::Tensor& local, const ShardSpec& spec,
                                   bool expert) const;
  // (name, full tensor) of `local` (the parameter `p`'s value or gradient): one entry, or
  // under expert parallelism, for a routed expert, the same slot of every EP rank (the other
  // experts), each named by its global expert index.
  std::vector<std::pair<std::string, at::Tensor>> full_tensors(const Parameter& p,
                                                               const at::Tensor& local) const;
  // Under PP: every stage's `mine` (its parameters, or the last stage's
  // outputs), in stage order, a name held by two stages once; without PP `mine`.
  std::vector<std::pair<std::string, at::Tensor>> from_every_stage(
      std::vector<std::pair<std::string, at::Tensor>> mine) const;
  // [s_local, b, ...] per local microbatch -> [global batch, seq, ...] of the step.
  at::Tensor gather_batch(const std::vector<at::Tensor>& per_microbatch, bool vocab_sharded) const;
  // Writes (and lists) the file only when `writer` (default: this rank is the dump's writer).
  void write(const std::string& file, const std::string& holds,
             const std::vector<std::pair<std::string, at::Tensor>>& tensors, bool writer);
  void write(const std::string& file, const std::string& holds,
             const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    write(file, holds, tensors, writer_);
  }
};

}  // namespace parity
