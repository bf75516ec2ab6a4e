#include "harness/backend/ep_mappings.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "harness/backend/communicator_handle.h"

namespace parity {
namespace {

using detail::comm_of;
using detail::saved_communicator;
using detail::to_handle;
using detail::trivial_group;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<std::int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

std::int64_t largest(const std::vector<std::int64_t>& counts) {
  return counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
}

// [0, ...]: what a rank gets when no rank has a row (nothing travels then; all
// ranks know it alike, so skipping the collective keeps them symmetric).
at::Tensor no_rows(const at::Tensor& x) {
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[0] = 0;
  return at::empty(shape, x.options());
}

// Every rank's row count: an all-gather of one int64, so the padded exchange
// below has the same shape on every rank.
std::vector<std::int64_t> rows_of_every_rank(const at::Tensor& x, Communicator& c) {
  return to_vector(c.all_gather(at::full({1}, x.size(0), at::kLong), 0));
}

// Uneven all-gather of rows: pad to the largest count, gather, drop the padding.
at::Tensor gather_rows(const at::Tensor& x, const std::vector<std::int64_t>& counts,
                       Communicator& c) {
  const std::int64_t most = largest(counts);
  if (most == 0) return no_rows(x);
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[0] = most;
  at::Tensor padded = at::zeros(shape, x.options());
  padded.narrow(0, 0, x.size(0)).copy_(x);
  shape.insert(shape.begin(), c.size());
  return unpad_chunks(c.all_gather(padded, 0).reshape(shape), counts);
}

// Uneven reduce-scatter of rows: rank r's counts[r] rows, padded to the largest
// count, so the reduce-scatter splits equal chunks on every rank.
at::Tensor reduce_scatter_rows(const at::Tensor& x, const std::vector<std::int64_t>& counts,
                               Communicator& c) {
  std::int64_t total = 0;
  for (std::int64_t n : counts) total += n;
  TORCH_CHECK(static_cast<int>(counts.size()) == c.size() && total == x.size(0),
              "row reduce-scatter: ", counts.size(), " row counts summing to ", total, " for ",
              x.size(0), " rows on a group of ", c.size());
  const std::int64_t most = largest(counts);
  if (most == 0) return no_rows(x);
  at::Tensor padded = pad_chunks(x.contiguous(), counts, most);  // [size, most, ...]
  std::vector<std::int64_t> flat(padded.sizes().begin() + 1, padded.sizes().end());
  flat[0] = c.size() * most;
  const at::Tensor mine = c.reduce_scatter(padded.reshape(flat), 0, ReduceOp::sum);
  return mine.narrow(0, 0, counts[c.rank()]).contiguous();
}

// Forward: the uneven all-to-all; backward: the gradient goes back with the
// send and receive counts swapped.
struct AllToAllEp : torch::autograd::Function<AllToAllEp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            const std::vector<std::int64_t>& send_counts,
                            std::vector<std::int64_t>* recv_counts) {
    AllToAllResult r = comm_of(comm).all_to_all(x, send_counts);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["recv"] = r.recv_counts;
    *recv_counts = r.recv_counts;
    return r.output;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const std::vector<std::int64_t> back = ctx->saved_data["recv"].toIntVector();
    return {saved_communicator(ctx).all_to_all(g[0].contiguous(), back).output, at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Forward: uneven all-gather of rows; backward: uneven reduce-scatter.
struct GatherRows : torch::autograd::Function<GatherRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            std::vector<std::int64_t>* counts_out) {
    Communicator& c = comm_of(comm);
    const std::vector<std::int64_t> counts = rows_of_every_rank(x, c);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["counts"] = counts;
    *counts_out = counts;
    return gather_rows(x.contiguous(), counts, c);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {
        reduce_scatter_rows(g[0], ctx->saved_data["counts"].toIntVector(), saved_communicator(ctx)),
        at::Tensor(), at::Tensor()};
  }
};

// Forward: uneven reduce-scatter of rows; backward: uneven all-gather.
struct ReduceScatterRows : torch::autograd::Function<ReduceScatterRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm,
                            const std::vector<std::int64_t>& counts) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["counts"] = counts;
    return reduce_scatter_rows(x, counts, comm_of(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {gather_rows(g[0].contiguous(), ctx->saved_data["counts"].toIntVector(),
                        saved_communicator(ctx)),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

AllToAllResult all_to_all_expert_parallel(const at::Tensor& x,
                                          const std::vector<std::int64_t>& send_counts,
                                          Communicator* ep) {
  if (trivial_group(ep)) {
    TORCH_CHECK(send_counts.size() == 1 && send_counts[0] == x.size(0),
                "expert-parallel all-to-all on a group of one: send counts must be [", x.size(0),
                "] (every row stays here)");
    return {x, send_counts};
  }
  AllToAllResult r;
  r.output = AllToAllEp::apply(x, to_handle(ep), send_counts, &r.recv_counts);
  return r;
}

AllToAllResult gather_rows_from_tensor_parallel_region(const at::Tensor& x, Communicator* tp) {
  if (trivial_group(tp)) return {x, {x.size(0)}};
  AllToAllResult r;
  r.output = GatherRows::apply(x, to_handle(tp), &r.recv_counts);
  return r;
}

at::Tensor reduce_scatter_rows_to_tensor_parallel_region(
    const at::Tensor& x, const std::vector<std::int64_t>& rows_per_rank, Communicator* tp) {
  return trivial_group(tp) ? x : ReduceScatterRows::apply(x, to_handle(tp), rows_per_rank);
}

}  // namespace parity
