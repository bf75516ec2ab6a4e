#pragma once
// Megatron-LM's legacy checkpoints (--ckpt-format torch) as --load-weights reads
// them (docs/weights.md, Checkpoints): a checkpoint folder
// (latest_checkpointed_iteration.txt -> iter_NNNNNNN/ or release/), an
// iteration folder, an mp_rank folder or one model_optim_rng.pt; per-rank files
// mp_rank_XX/ (TP) and mp_rank_XX_YYY/ (TP x PP); the tensors under "model"
// ("model0", "model1", ... for virtual stages); every other entry (args,
// iteration, optimizer, rng_state, `_extra_state`) skipped. Legacy files name
// the decoder layers (and MTP depths) module-locally per stage and chunk;
// they are renumbered globally with parity's layer_offset (pipeline_layout.h)
// from the checkpoint's args, or from the files' own layer counts where the
// args are absent. The result is one set of tensors per TP rank of the file
// layout, which LoadedWeights reassembles and reshards for the run.
#include <string>
#include <vector>

#include "harness/base/tensor_file.h"

namespace parity {

class TorchSaveFile;
namespace pickle {
struct Value;
}

struct MegatronCheckpoint {
  // "DIR/iter_0000010 (Megatron-LM legacy checkpoint, iteration 10, TP 2 x PP 2,
  // 2 model chunks, layers numbered by the args' pipeline layout)"
  std::string description;
  std::vector<std::string> tp_sources;  // per TP rank: "DIR/iter_0000010/mp_rank_01_*"
  std::vector<NamedTensors> tp_ranks;   // global names
  // The word embeddings and the output layer sit on different pipeline stages,
  // so a tied model's last stage holds a copy of the embeddings as
  // output_layer.weight.
  bool output_layer_on_another_stage = false;
};

// A torch.save root that is a Megatron-LM checkpoint: a dict with a "model" or
// "model0" dict.
bool is_megatron_checkpoint(const pickle::Value& root);

// A folder: a checkpoint, iteration or mp_rank folder. Throws TensorFileError,
// one line naming the folder or file, the value and the rule (a torch_dist
// checkpoint: what to run to convert it).
MegatronCheckpoint read_megatron_folder(const std::string& path);
// One model_optim_rng.pt (is_megatron_checkpoint(file.root())): TP 1 x PP 1.
MegatronCheckpoint read_megatron_file(const TorchSaveFile& file);

}  // namespace parity
