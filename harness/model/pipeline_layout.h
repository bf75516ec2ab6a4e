#pragma once
// Where Megatron Core 0.16.1 places the decoder layers, the embedding, the loss
// and the MTP depths over pipeline stages (pp ranks) and virtual stages (model
// chunks, vp stages): the same arithmetic as Megatron's
// get_transformer_layer_offset, get_num_layers_to_build,
// PipelineParallelLayerLayout and the MTP placement functions, Python's floor
// division included, and the checks of TransformerConfig.__post_init__ and of
// those functions' asserts. Pure: no backend, no tensors.
//
// Layer numbers here are 0-based and global (`decoder.layers.<n>`); Megatron's
// TransformerLayer.layer_number is the same number plus one.
#include <optional>
#include <string>
#include <vector>

namespace parity {

struct PipelineLayoutConfig {
  int num_layers = 1;  // decoder layers (key "layers")
  int pp = 1;          // pipeline stages ("pp")
  int vpp = 1;         // model chunks per stage ("vpp"); 1 = Megatron's None
  // Megatron's num_layers_in_first_pipeline_stage / _last_ ("pp-first-layers",
  // "pp-last-layers").
  std::optional<int> first_stage_layers, last_stage_layers;
  // account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split
  // ("pp-account-embedding", "pp-account-loss").
  bool account_for_embedding = false, account_for_loss = false;
  // pipeline_model_parallel_layout ("pp-layout"), e.g. "Et*3|t*3|t*2L"; empty: none.
  std::string layout;
  int mtp_layers = 0;  // MTP depths ("mtp-layers"); 0 = Megatron's None
};

// One rule a configuration breaks; `field` is the option's parity key.
struct PipelineLayoutViolation {
  std::string field, value, rule;
};

// Empty when Megatron accepts the configuration and its placement builds every
// decoder layer and every MTP depth exactly once; otherwise what breaks (the
// first broken rule of each family: the later rules read values the earlier
// ones reject). The functions below require a configuration without
// violations and throw std::invalid_argument otherwise.
std::vector<PipelineLayoutViolation> validate_pipeline_layout(const PipelineLayoutConfig& config);

// The interleaved schedule's microbatch rules with Megatron's default
// microbatch_group_size_per_vp_stage (= pp): with vpp > 1, microbatches >= pp
// and a multiple of pp; also pp > 1 for vpp > 1. `vpp` is the effective one
// (virtual_stages()). pipeline_schedule.h's validate_pipeline_schedule with
// the group unset, which also takes an explicit group.
std::vector<PipelineLayoutViolation> validate_pipeline_schedule(int pp, int vpp, int microbatches);

enum class LayoutLayer { embedding, decoder, mtp, loss };

// Megatron's PipelineParallelLayerLayout.parse_str_to_list: commas dropped,
// `(...)*n` then `x*n` unrolled (one left-to-right pass each, no nesting), then
// split at '|'; E embedding, t decoder, m MTP, L loss. Entry v * pp + p is
// stage p's chunk v. nullopt and `error` set on an unknown character or an
// expansion over 1,000,000 characters (parity's bound). Counts are ASCII
// digits (Python's \d also takes other Unicode digits).
std::optional<std::vector<std::vector<LayoutLayer>>> parse_pipeline_layout(const std::string& text,
                                                                           std::string* error);

// The model chunks per stage: config.vpp, or the layout's own count
// (stages / pp) where config.vpp is 1, as TransformerConfig adopts it.
int virtual_stages(const PipelineLayoutConfig& config);

// get_transformer_layer_offset(config, vp_stage, pp_rank): the global number
// of the chunk's first decoder layer. (Under a layout Megatron reads the rank
// from parallel_state instead of its pp_rank argument; in its own calls the
// two are the same.)
int layer_offset(const PipelineLayoutConfig& config, int vp_stage, int pp_rank);
// get_num_layers_to_build(config, vp_stage, pp_rank).
int num_layers_to_build(const PipelineLayoutConfig& config, int vp_stage, int pp_rank);
// The chunk's decoder layers: [offset, offset + count).
std::vector<int> chunk_layers(const PipelineLayoutConfig& config, int vp_stage, int pp_rank);
// The (pp_rank, vp_stage) that builds decoder layer `layer`.
struct ChunkId {
  int pp_rank = 0, vp_stage = 0;
  bool operator==(const ChunkId& o) const { return pp_rank == o.pp_rank && vp_stage == o.vp_stage; }
};
ChunkId chunk_of_layer(const PipelineLayoutConfig& config, int layer);

// The embedding is built on the first stage's first chunk and the output
// layer and loss on the last stage's last chunk (pre_process / post_process of
// Megatron's get_model), whatever the layout string's E and L positions (its
// checks only require E first and L last in layer order).
ChunkId embedding_chunk(const PipelineLayoutConfig& config);
ChunkId loss_chunk(const PipelineLayoutConfig& config);

// get_mtp_num_layers_to_build: all depths on the last stage's last chunk, or
// on the layout's chunk holding the m's.
int num_mtp_layers_to_build(const PipelineLayoutConfig& config, int vp_stage, int pp_rank);
// get_mtp_layer_offset: the m's in the chunks before this one in layer order
// under a layout with pp > 1, else 0.
int mtp_layer_offset(const PipelineLayoutConfig& config, int vp_stage, int pp_rank);
// The chunk holding the MTP depths; nullopt without MTP.
std::optional<ChunkId> mtp_chunk(const PipelineLayoutConfig& config);
// PipelineParallelLayerLayout.validate_layer_layout's mtp_standalone: the MTP
// depths sit on a stage other than the last.
bool mtp_standalone(const PipelineLayoutConfig& config);

// MTP depth `depth` (0-based; local depth on its chunk) numbered as Megatron
// numbers it: MultiTokenPredictionLayer.layer_number - 1 = depth + the MTP
// offset (the index of its MTP loss in MTPLossLoggingHelper's vector of
// mtp_layers entries).
int mtp_depth_number(const PipelineLayoutConfig& config, int vp_stage, int pp_rank, int depth);
// The layer number of the depth's transformer layer (and its MoE router),
// 0-based: num_layers + the depth's number. MultiTokenPredictionLayer builds
// it with layer_number + num_layers - offset and TransformerLayer adds the
// offset back, so MTP layers never share a backbone layer's number: the MoE
// tracker's per-layer vectors hold moe_tracker_layers() entries,
// [0, num_layers) the decoder, [num_layers, +mtp_layers) the depths.
int mtp_transformer_layer_number(const PipelineLayoutConfig& config, int vp_stage, int pp_rank,
                                 int depth);
int moe_tracker_layers(const PipelineLayoutConfig& config);

}  // namespace parity
