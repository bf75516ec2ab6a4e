#pragma once
// Weights from a file (--load-weights FILE, docs/weights.md) as the model's
// ParameterSource: Megatron's state-dict key names (which are parity's
// parameter names), either one unsharded file FILE, or one file per TP rank
// FILE.tp0 ... FILE.tp{k-1}, or a Megatron-LM legacy checkpoint (a folder or
// one model_optim_rng.pt, megatron_checkpoint.h: per TP rank of its layout).
// With k TP ranks' files (any k) parity reassembles the full tensor with the
// parameter's ShardSpec and shards it for the run's TP size. Keys ending in
// "_extra_state" are ignored. Floating tensors are converted to the model's
// dtype (at::Tensor::to: exact into a wider type, round-to-nearest-even into a
// narrower one); any other dtype is a problem.
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/base/tensor_file.h"
#include "harness/model/parameter_source.h"

namespace parity {

// Every problem the files have against the model, one line each
// ("decoder.layers.0.mlp.linear_fc1.weight: the file has shape [256, 64], the
// model expects [512, 64]"); what() joins them with "; ".
class WeightsError : public std::runtime_error {
 public:
  WeightsError(std::string path, std::vector<std::string> problems);
  const std::string& path() const { return path_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::string path_;
  std::vector<std::string> problems_;
};

class LoadedWeights : public ParameterSource {
 public:
  // Reads FILE (a Megatron-LM checkpoint when it is a folder, or a torch.save
  // file holding "model"), or FILE.tp0.. when FILE does not exist. Throws
  // TensorFileError (unreadable or corrupt file, a checkpoint folder that does
  // not hold what Megatron-LM writes), WeightsError (both FILE and FILE.tp0
  // exist; the same key twice).
  explicit LoadedWeights(const std::string& path);
  // A problem is recorded (and a zero tensor of the expected shape returned)
  // instead of thrown, so that finish() can name every problem at once.
  at::Tensor local_value(const ParameterRequest& request) override;
  void held_elsewhere(const std::string& name) override;
  void held_elsewhere_under(const std::string& prefix) override;
  // Records every file entry no parameter asked for (or another rank holds),
  // then throws WeightsError when there is any problem.
  void finish() override;

  // Files read: {FILE} or {FILE.tp0, ...}; a checkpoint's TP ranks
  // ({DIR/iter_0000010/mp_rank_00_*, ...}).
  const std::vector<std::string>& files() const { return files_; }
  // What FILE is, for messages: FILE, or a checkpoint's description.
  const std::string& description() const { return description_; }

 private:
  std::string path_, description_;
  std::vector<std::string> files_;
  std::vector<NamedTensors> ranks_;  // one per file (TP rank)
  // A pipeline-parallel checkpoint: its last stage's output_layer.weight may be
  // the tied embeddings' copy.
  bool output_layer_copy_possible_ = false;
  std::set<std::string> used_;
  std::vector<std::string> elsewhere_prefixes_;
  std::vector<std::string> problems_;

  // Asked for by the model, or held by another rank.
  bool accounted_for(const std::string& name) const;

  const at::Tensor* find(std::size_t file, const std::string& name) const;
  void add_file(const std::string& source, NamedTensors tensors);
  void skip_tied_output_copy();
};

}  // namespace parity
