#pragma once
// Megatron's MoEAuxLossAutoScaler: an auxiliary loss joins the objective
// through an activation instead of being added to the returned loss. Forward
// returns `output` unchanged; backward passes the output's gradient through and
// gives `aux_loss` the gradient `scale` (the main loss's backward scale). So
// the aux loss is differentiated exactly once per logical forward, also when a
// checkpoint recomputes the layer (the recomputation builds the node again and
// only its backward runs).
namespace at {
class Tensor;
}

namespace parity {

// `aux_loss` is a scalar; an undefined one returns `output` untouched.
at::Tensor attach_aux_loss(const at::Tensor& output, const at::Tensor& aux_loss, double scale);

}  // namespace parity
