#include "harness/backend/aux_loss_scaler.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace parity {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct AuxLossScaler : torch::autograd::Function<AuxLossScaler> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output,
                            const at::Tensor& aux_loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({aux_loss});
    return output.clone();  // a fresh tensor: a returned input would be a view to autograd
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const at::Tensor aux = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    return {g[0], at::full_like(aux, scale), at::Tensor()};
  }
};

}  // namespace

at::Tensor attach_aux_loss(const at::Tensor& output, const at::Tensor& aux_loss, double scale) {
  if (!aux_loss.defined()) return output;
  return AuxLossScaler::apply(output, aux_loss, scale);
}

}  // namespace parity
