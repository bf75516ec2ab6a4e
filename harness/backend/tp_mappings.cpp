#include "harness/backend/tp_mappings.h"

#include <ATen/ATen.h>

#include "harness/backend/communicator_handle.h"

namespace parity {
namespace {

using detail::comm_of;
using detail::saved_communicator;
using detail::to_handle;
using detail::trivial_group;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::int64_t last_dim(const at::Tensor& t) { return t.dim() - 1; }

at::Tensor keep_chunk(const at::Tensor& x, Communicator& c, std::int64_t dim) {
  TORCH_CHECK(x.size(dim) % c.size() == 0, "tensor-parallel split: size ", x.size(dim), " of dim ",
              dim, " is not divisible by the group size ", c.size());
  return x.chunk(c.size(), dim)[c.rank()].contiguous();
}
at::Tensor gather(const at::Tensor& x, Communicator& c, std::int64_t dim) {
  return c.all_gather(x.contiguous(), dim);
}
at::Tensor reduce_scatter(const at::Tensor& x, Communicator& c, std::int64_t dim) {
  TORCH_CHECK(x.size(dim) % c.size() == 0, "reduce-scatter: size ", x.size(dim), " of dim ", dim,
              " is not divisible by the group size ", c.size());
  return c.reduce_scatter(x.contiguous(), dim, ReduceOp::sum);
}
at::Tensor all_reduce(const at::Tensor& x, Communicator& c) {
  return c.all_reduce(x.contiguous(), ReduceOp::sum);
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor()};
    return {all_reduce(g[0], saved_communicator(ctx)), at::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_reduce(x, comm_of(comm));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

// Keep this rank's chunk of `dim` forward; all-gather `dim` backward.
struct ScatterDim : torch::autograd::Function<ScatterDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return keep_chunk(x, comm_of(comm), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {gather(g[0], saved_communicator(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

// All-gather `dim` forward; keep this rank's chunk backward.
struct GatherDim : torch::autograd::Function<GatherDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return gather(x, comm_of(comm), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {keep_chunk(g[0], saved_communicator(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

// All-gather `dim` forward; reduce-scatter `dim` backward.
struct GatherReduceScatterDim : torch::autograd::Function<GatherReduceScatterDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return gather(x, comm_of(comm), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {reduce_scatter(g[0], saved_communicator(ctx), ctx->saved_data["dim"].toInt()),
            at::Tensor(), at::Tensor()};
  }
};

// Reduce-scatter dim 0 forward; all-gather dim 0 backward.
struct ReduceScatterToSp : torch::autograd::Function<ReduceScatterToSp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return reduce_scatter(x, comm_of(comm), 0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor()};
    return {gather(g[0], saved_communicator(ctx), 0), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : CopyToTp::apply(x, to_handle(tp));
}
at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : ReduceFromTp::apply(x, to_handle(tp));
}
at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : ScatterDim::apply(x, to_handle(tp), last_dim(x));
}
at::Tensor gather_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : GatherDim::apply(x, to_handle(tp), last_dim(x));
}
at::Tensor all_gather_last_dim_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : GatherReduceScatterDim::apply(x, to_handle(tp), last_dim(x));
}
at::Tensor scatter_to_sequence_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : ScatterDim::apply(x, to_handle(tp), std::int64_t{0});
}
at::Tensor gather_from_sequence_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : GatherReduceScatterDim::apply(x, to_handle(tp), std::int64_t{0});
}
at::Tensor reduce_scatter_to_sequence_parallel_region(const at::Tensor& x, Communicator* tp) {
  return trivial_group(tp) ? x : ReduceScatterToSp::apply(x, to_handle(tp));
}

}  // namespace parity
