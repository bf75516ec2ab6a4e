#include "harness/model/optimizer.h"

#include <ATen/ATen.h>

#include <cmath>

namespace parity {

namespace {

// Adam's moments in fp32 for a bf16 model (Megatron keeps its optimizer state
// in fp32), else in the parameter's dtype.
at::ScalarType state_dtype(at::ScalarType param) {
  return param == at::kBFloat16 ? at::kFloat : param;
}

}  // namespace

Optimizer::Optimizer(const OptimizerSettings& settings, const std::vector<Parameter>& params,
                     int dp_rank, int dp_size)
    : settings_(settings) {
  if (settings.distributed) layout_.emplace(params, dp_rank, dp_size);
  for (std::size_t m = 0; m < moment_names().size(); ++m) {
    std::vector<at::Tensor> mine;
    at::Tensor flat;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const at::TensorOptions options = params[i]
                                            .value.options()
                                            .dtype(state_dtype(params[i].value.scalar_type()))
                                            .requires_grad(false);
      if (!layout_ || layout_->flat_offset(i) < 0) {
        mine.push_back(at::zeros(params[i].value.sizes(), options));
        continue;
      }
      if (!flat.defined()) flat = at::zeros({layout_->shard_elements()}, options);
      mine.emplace_back();  // a view into the flat shard (moment())
    }
    per_parameter_.push_back(std::move(mine));
    flat_.push_back(flat);
  }
}

const std::vector<std::string>& Optimizer::moment_names() const {
  static const std::vector<std::string> adam = {"exp_avg", "exp_avg_sq"};
  static const std::vector<std::string> none;
  return settings_.kind == OptimizerKind::adam ? adam : none;
}

at::Tensor Optimizer::moment(std::size_t m, std::size_t index) const {
  const at::Tensor& own = per_parameter_.at(m).at(index);
  if (own.defined()) return own;
  const FlatShardLayout::Range r = layout_->owned(index);
  if (r.size() == 0) return flat_.at(m).narrow(0, 0, 0);
  return flat_.at(m).narrow(0, layout_->shard_offset(index), r.size());
}

void Optimizer::adam(at::Tensor& value, const at::Tensor& grad, const at::Tensor& m,
                     const at::Tensor& v) const {
  // torch.optim.Adam (weight decay 0): the moments, then
  // p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
  const double t = double(steps_ + 1);
  const OptimizerSettings& s = settings_;
  const at::Tensor g = grad.to(m.scalar_type()).reshape(m.sizes());
  m.mul_(s.beta1).add_(g, 1 - s.beta1);
  v.mul_(s.beta2).addcmul_(g, g, 1 - s.beta2);
  const double correction1 = 1 - std::pow(s.beta1, t);
  const double correction2 = 1 - std::pow(s.beta2, t);
  const at::Tensor denom = (v.sqrt() / std::sqrt(correction2)).add_(s.eps);
  const at::Tensor update = (m / denom) * (s.lr / correction1);
  value.sub_(update.to(value.scalar_type()).reshape(value.sizes()));
}

void Optimizer::step(std::vector<Parameter>& params, Communicator* dp) {
  if (settings_.lr == 0) return;
  at::NoGradGuard no_grad;
  const bool is_adam = settings_.kind == OptimizerKind::adam;
  auto piece = [&](std::size_t i, at::Tensor& value, const at::Tensor& grad, std::int64_t) {
    if (is_adam)
      adam(value, grad, moment(0, i), moment(1, i));
    else
      value.sub_(grad.reshape(value.sizes()), settings_.lr);
  };
  if (layout_) {
    layout_->update(params, piece, dp);
  } else {
    for (std::size_t i = 0; i < params.size(); ++i) {
      at::Tensor value = params[i].value;
      piece(i, value, params[i].value.grad(), -1);
    }
  }
  ++steps_;
}

}  // namespace parity
