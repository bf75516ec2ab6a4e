#pragma once
// parity's own sharded checkpoints (parity run --save-checkpoint DIR,
// --resume DIR; docs/weights.md "Saving and resuming"), after Megatron's
// sharded_state_dict: every rank saves the pieces it holds, each named by its
// key with the full tensor's shape, the piece's offset in it per dim and its
// replica id (0: the one rank of those holding the same piece that writes it),
// so a checkpoint written at one layout loads at any other: the loader
// assembles each full tensor from its main replicas and every rank slices what
// it holds.
//
//   DIR/latest_step.txt          the step of the newest complete checkpoint
//   DIR/step_00000004/           one checkpoint, renamed into place whole
//     manifest.json              format, step, layout, optimizer, every rank's pieces
//     rank00000.safetensors ...  each rank's main-replica pieces and its RNG state
//
// Keys: a parameter's name; a router's expert bias
// ("decoder.layers.1.mlp.router.expert_bias"); "optimizer.<moment>.<name>" for
// Adam's moments of a parameter; under the distributed optimizer
// "optimizer.flat.<moment>.<buffer>" for each DP rank's flat shard of a
// buffer (the dense parameters of one TP rank and pipeline stage,
// "tp<t>.pp<p>"), with the buffer's FlatShard ranges in the manifest.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/base/safetensors.h"
#include "harness/model/gpt_model.h"
#include "harness/model/optimizer.h"

namespace parity::checkpoint {

inline constexpr const char* kFormat = "parity-checkpoint";
inline constexpr int kVersion = 1;
inline constexpr const char* kTrackerFile = "latest_step.txt";

// One line naming the file and the key where it can: "DIR/step_00000002/
// rank00001.safetensors: decoder.layers.0.mlp.linear_fc1.weight: missing from
// the file". Bad input: the CLI exits 2.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "step_00000004".
std::string step_folder_name(std::int64_t step);
// "rank00003.safetensors".
std::string rank_file_name(int rank);

// A box of a full tensor: where a piece sits (offset and shape per dim) and,
// for a TP shard, where it sits in the rank's local tensor (local_begin along
// `dim`; a SwiGLU fc1 shard is two boxes, Megatron's [gate_r; up_r]).
struct Box {
  std::vector<std::int64_t> offset, shape;
  std::int64_t dim = -1;  // the split dim; -1: the whole local tensor
  std::int64_t local_begin = 0;
};
// The boxes of TP rank `tp_rank`'s shard (init.h shard_of) of a tensor of
// `full_shape`, in the local tensor's order.
std::vector<Box> tp_boxes(const std::vector<std::int64_t>& full_shape, const ShardSpec& spec,
                          int tp_rank, int tp_size);
// The full (unsharded) shape of a parameter held as a TP shard over tp_size ranks.
std::vector<std::int64_t> full_shape_of(const Parameter& p, int tp_size);
// The group a parameter's shard splits over: a routed expert's is the expert
// TP group (--etp), every other parameter's the TP group.
struct ShardGroup {
  int rank = 0, size = 1;
};
ShardGroup shard_group_of(const Parameter& p, const ParallelContext& par);
// The piece of `local` that `box` is (a view).
at::Tensor piece_of(const at::Tensor& local, const Box& box);

// One saved piece (Megatron's ShardedTensor).
struct Entry {
  std::string key;
  std::vector<std::int64_t> global_shape, global_offset, local_shape;
  int replica_id = 0;
  std::string storage;  // its name in the rank's file; "" where a replica wrote nothing
  std::string dtype;    // safetensors' name ("F32")
};
nlohmann::json to_json(const Entry& e);
Entry entry_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception

// The FlatShard ranges of one buffer (the distributed optimizer): its dense
// parameters in flat order, each with its element offset in the buffer, its
// local (TP shard) shape and that shard's boxes in the full tensor.
struct FlatParameter {
  std::string key;
  std::int64_t offset = 0, numel = 0;
  std::vector<std::int64_t> local_shape;
  std::vector<Box> boxes;
};
struct FlatBuffer {
  std::string id;  // "tp0.pp1"
  int dp = 1;
  std::int64_t shard = 0;  // elements per DP rank
  std::vector<FlatParameter> parameters;
};
nlohmann::json to_json(const FlatBuffer& b);
// The buffer of this rank's dense parameters: "tp<t>.pp<p>", its table.
std::string buffer_id(const ParallelContext& par);
FlatBuffer flat_buffer_of(const std::vector<Parameter>& params, const FlatShardLayout& layout,
                          const ParallelContext& par);
FlatBuffer flat_buffer_from_json(const std::string& id, const nlohmann::json& j);

// ------------------------------------------------------------------ saving

struct SaveRequest {
  std::string dir;        // DIR (made when missing; its parent must exist)
  std::int64_t step = 0;  // training steps done: the step the run resumes at
  // The run's options as JSON (the driver's RunConfig): "scenario" in the
  // manifest, read back to tell the same layout (RNG) and the global batch.
  nlohmann::json scenario;
  // Where the data stands ("data" in the manifest): the driver's numbering of
  // the global microbatches the run consumed.
  nlohmann::json data;
  int rank = 0;                   // global
  Communicator* world = nullptr;  // every rank of the run; null: a run of one rank
  // Called after this rank wrote its file, before the checkpoint is published
  // (the rank program's fault point).
  std::function<void()> after_write;
};
// Every rank calls it (collectives over `world`): writes DIR/step_<step>.partial,
// each rank its file, then global rank 0 the manifest, renames the folder to
// DIR/step_<step> and rewrites DIR/latest_step.txt (atomically): a save killed
// before then leaves the previous checkpoint the newest. Returns the step folder.
std::string save(const SaveRequest& request, GPTModel& model, const Optimizer& optimizer);

// ------------------------------------------------------------------ loading

// The step of the checkpoint `path` names (DIR or a step folder), from its
// manifest alone (Reader checks the rest). Throws CheckpointError.
std::int64_t saved_step(const std::string& path);

class Reader {
 public:
  // DIR (its latest_step.txt names the step folder) or a step folder. Reads the
  // manifest and every rank file, checks each piece against the manifest and
  // assembles every full tensor (each element from exactly one main replica);
  // throws CheckpointError naming the file and the key.
  explicit Reader(const std::string& path);

  const std::string& folder() const { return folder_; }
  const nlohmann::json& manifest() const { return manifest_; }
  std::int64_t step() const;
  const nlohmann::json& scenario() const;  // the saving run's options
  const std::vector<std::string>& parameter_names() const { return parameters_; }
  bool has(const std::string& key) const { return full_.count(key) > 0; }
  // The assembled tensor of `key`; throws CheckpointError when not saved.
  const at::Tensor& full(const std::string& key) const;
  // Adam's moment `moment` of parameter `name`, full: saved per parameter or,
  // under the distributed optimizer, regrouped from the flat buffers' shards by
  // their FlatShard ranges. Throws CheckpointError when not saved.
  at::Tensor full_moment(const std::string& moment, const std::string& name) const;
  const std::map<std::string, FlatBuffer>& flat_buffers() const { return flat_; }
  // The RNG streams global rank `rank` saved (RngTracker::snapshot), if any.
  std::optional<RngSnapshot> rng(int rank) const;

 private:
  std::string folder_;
  nlohmann::json manifest_;
  std::vector<std::string> parameters_;
  std::map<std::string, at::Tensor> full_;
  std::map<std::string, FlatBuffer> flat_;
  std::map<int, RngSnapshot> rng_;
};

// The model's parameters from a checkpoint (the ParameterSource the model is
// built with on --resume): each full tensor sliced for the rank's TP shard,
// converted to the model's dtype. Problems (a key missing, another shape, a
// parameter the model lacks) are collected; finish() throws CheckpointError
// with the first and their count.
class ParameterLoader : public ParameterSource {
 public:
  explicit ParameterLoader(const Reader& reader) : reader_(reader) {}
  at::Tensor local_value(const ParameterRequest& request) override;
  void held_elsewhere(const std::string& name) override;
  void held_elsewhere_under(const std::string& prefix) override;
  void finish() override;

 private:
  const Reader& reader_;
  std::vector<std::string> asked_, prefixes_, problems_;
};

// After the model was built from `reader` (ParameterLoader): the routers'
// expert biases, and the optimizer's state (its step count, Adam's moments
// sliced for this rank: its TP shard, its FlatShard ranges). Throws
// CheckpointError when the checkpoint lacks what the optimizer keeps.
void restore_buffers(const Reader& reader, GPTModel& model);
void restore_optimizer(const Reader& reader, Optimizer& optimizer, GPTModel& model);

}  // namespace parity::checkpoint
