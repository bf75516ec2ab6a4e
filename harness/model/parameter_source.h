#pragma once
// Where a parameter's value comes from: the seeded init (init.h) unless the
// model is given a ParameterSource (e.g. weights loaded from a file,
// loaded_weights.h). The model asks for each parameter by name as it builds
// it, so a source never needs to know the model's parameter list.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/init.h"

namespace parity {

struct ParameterRequest {
  std::string name;                      // "decoder.layers.0.mlp.linear_fc1.weight"
  std::vector<std::int64_t> full_shape;  // unsharded
  ShardSpec shard;                       // how the full tensor is split over TP
  int tp_rank = 0;
  int tp_size = 1;
  at::ScalarType dtype = at::kFloat;  // the model's
};

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // This TP rank's shard of the parameter (shard_of(full, shard, tp_rank,
  // tp_size)), of `dtype`, on the CPU.
  virtual at::Tensor local_value(const ParameterRequest& request) = 0;
  // A parameter of the model that another rank holds, not this one (a routed
  // expert of another EP rank): an unsharded source has it and must not count
  // it as unknown.
  virtual void held_elsewhere(const std::string& name) { (void)name; }
  // Every parameter whose name starts with `prefix` ("decoder.layers.5.",
  // "embedding.") belongs to another pipeline stage.
  virtual void held_elsewhere_under(const std::string& prefix) { (void)prefix; }
  // Called once after the model asked for every parameter (e.g. to reject
  // entries the model has no parameter for).
  virtual void finish() {}
};

}  // namespace parity
