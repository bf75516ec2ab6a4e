#include "harness/metrics/uneven_gather.h"

#include <algorithm>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"

PARITY_USES_FAULT(median_unpadded_gather);

namespace parity {

namespace {

// The k piece lengths of this rank, as a [1, k] int64 tensor on the pieces'
// device (the transport of a device backend may take device tensors only).
at::Tensor lengths_of(const std::vector<at::Tensor>& pieces) {
  std::vector<std::int64_t> n;
  n.reserve(pieces.size());
  for (const at::Tensor& p : pieces) n.push_back(p.numel());
  return at::tensor(n, at::TensorOptions().dtype(at::kLong))
      .reshape({1, -1})
      .to(pieces.front().device());
}

// The pieces concatenated and zero-padded to `width`, as a [1, width] tensor.
at::Tensor padded(const std::vector<at::Tensor>& pieces, std::int64_t width) {
  const at::Tensor all = at::cat(pieces);
  at::Tensor out = at::zeros({1, width}, all.options());
  out.narrow(1, 0, all.numel()).copy_(all.reshape({1, -1}));
  return out;
}

// Row r of `gathered` holds rank r's pieces, back to back, with the lengths
// in row r of `lengths`: piece j becomes the rank-order concatenation.
std::vector<at::Tensor> unpadded(const at::Tensor& gathered, const at::Tensor& lengths,
                                 std::size_t k) {
  std::vector<std::vector<at::Tensor>> parts(k);
  const at::Tensor host = lengths.to(at::kCPU).contiguous();
  const auto n_of = host.accessor<std::int64_t, 2>();
  for (std::int64_t r = 0; r < gathered.size(0); ++r) {
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const std::int64_t n = n_of[r][static_cast<std::int64_t>(j)];
      parts[j].push_back(gathered[r].narrow(0, offset, n));
      offset += n;
    }
  }
  std::vector<at::Tensor> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(at::cat(p));
  return out;
}

}  // namespace

MetricStep gather_uneven(std::vector<at::Tensor> pieces, AxisMask axes,
                         const std::function<MetricStep(std::vector<at::Tensor>)>& then,
                         std::size_t first_axis) {
  if (pieces.empty()) PARITY_FAIL("gather_uneven: no pieces");
  std::size_t a = first_axis;
  while (a < kModelAxes.size() && !(axes & axis_bit(a))) ++a;
  if (a == kModelAxes.size()) return then(std::move(pieces));
  const Axis axis = kModelAxes[a];
  const at::Tensor mine = lengths_of(pieces);
  const auto next = [axes, then, a](std::vector<at::Tensor> gathered) {
    return gather_uneven(std::move(gathered), axes, then, a + 1);
  };
  // Fault median-unpadded-gather: no length exchange; each rank gathers its own
  // unpadded pieces, so ranks holding different totals issue different shapes.
  if (fault_active(fault_median_unpadded_gather)) {
    const at::Tensor own = padded(pieces, mine.sum().item<std::int64_t>());
    return MetricStep::collect(
        {{own, axis, CollectiveKind::all_gather, ReduceOp::sum, 0}},
        [mine, k = pieces.size(), next](std::vector<at::Tensor> done) {
          return next(unpadded(done[0], mine.expand({done[0].size(0), -1}), k));
        });
  }
  return MetricStep::collect(
      {{mine, axis, CollectiveKind::all_gather, ReduceOp::sum, 0}},
      [pieces = std::move(pieces), axis, next](std::vector<at::Tensor> done) {
        const at::Tensor lengths = done[0];  // [group, k]
        const std::int64_t width = lengths.sum(1).max().item<std::int64_t>();
        // Every rank of the group holds nothing: all of them skip round 2 alike.
        if (width == 0) return next(pieces);
        return MetricStep::collect(
            {{padded(pieces, width), axis, CollectiveKind::all_gather, ReduceOp::sum, 0}},
            [lengths, k = pieces.size(), next](std::vector<at::Tensor> data) {
              return next(unpadded(data[0], lengths, k));
            });
      });
}

}  // namespace parity
