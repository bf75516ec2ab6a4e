#pragma once
// The weight_gradient observation sites (--observe-wgrad; a parity probe kind):
// one per parameter, owner = the parameter's name, local name "wgrad",
// notified once per microbatch backward with the gradient that backward added
// to the parameter on this rank (before any reduction; zeros when none
// reached it). tp_shard_dim is the parameter's TP split dim (none for a replica).
//
// Fed by gradient hooks (Tensor::register_hook on each leaf: a hook of its
// AccumulateGrad node). A hook fires once per autograd graph execution that
// reaches the parameter, not once per backward: a reentrant checkpoint
// (harness/recompute/checkpoint.h) runs a backward of its own, so a weight used
// in several checkpoints, or inside one and outside it, fires once for each,
// with a partial gradient every time (pytorch/pytorch #81296). So the hooks
// only add what arrives into a per-microbatch buffer, and deliver(), called
// when the outermost backward has returned, notifies each site once.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "harness/model/gpt_model.h"

namespace parity {

class WeightGradientSites {
 public:
  // Registers a hook on every parameter (the sites outlive nothing: each hook
  // shares its site).
  explicit WeightGradientSites(const std::vector<Parameter>& parameters);
  ~WeightGradientSites();
  // Before a microbatch's backward, on the rank thread: where a hook that
  // notifies (fault wgrad-hook-per-graph-task) runs, on any thread.
  void backward_starts();
  // After the microbatch's backward: one notification per parameter of
  // [first, first + count) (the parameters' order; under PP the backward
  // step's chunk), in parameter order; their buffers are emptied.
  void deliver(std::size_t first, std::size_t count);
  // Drops what arrived without a delivery (a backward outside the driver).
  void clear();

  struct Site;

 private:
  std::vector<std::shared_ptr<Site>> sites_;
};

}  // namespace parity
