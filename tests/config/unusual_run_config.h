#pragma once
// A RunConfig with every field off its default, for the tests that must see every
// field carried (JSON round trip, the mapping onto ModelConfig).
#include "harness/config/run_config.h"

namespace parity::testing {

inline RunConfig unusual_run_config() {
  RunConfig c;
  c.tp = 2;
  c.cp = 2;
  c.dp = 3;
  c.ep = 3;
  c.sp = true;
  c.launch = LaunchMode::processes;
  c.seed = 18446744073709551557ull;
  c.timeout = 2.75;
  c.report = "r.json";
  c.inject = {"crash-rank=1", "hang-rank=2"};
  c.check_collectives = true;
  c.hidden = 96;
  c.heads = 6;
  c.num_query_groups = 2;
  c.kv_channels = 12;
  c.qk_layernorm = true;
  c.ffn_hidden = 128;
  c.layers = 5;
  c.seq = 32;
  c.micro_batch = 3;
  c.microbatches = 4;
  c.steps = 7;
  c.vocab = 200;
  c.dtype = ModelDType::bf16;
  c.fp32_residual = true;
  c.dropout = 0.1;
  c.norm = NormKind::rms_norm;
  c.activation = ActivationKind::swiglu;
  c.position_embedding = PositionEmbeddingKind::rope;
  c.rotary_base = 500000.0;
  c.rotary_percent = 0.25;
  c.rotary_interleaved = true;
  c.norm_epsilon = 1e-6;
  c.recompute = "selective:core_attn,mlp";
  c.recompute_layers = 2;
  c.graphs = GraphMode::full_iteration;
  c.graph_warmup = 0;
  c.trace = "t.jsonl";
  c.gather_output = true;
  c.runtime_gather_output = RuntimeGatherOption::off;
  c.lr = 0.25;
  c.backend = "cuda";  // a name only: JSON does not consult the registry
  c.metrics = {"global-output-logits-l2"};
  return c;
}

}  // namespace parity::testing
