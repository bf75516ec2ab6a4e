#include "harness/metrics/executor.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/process_groups.h"

namespace parity {
namespace {

// A metric's value must not depend on what shares its collective: Gloo's ring
// all-reduce sums each chunk of a buffer starting at another rank, so the same
// partial sums batched with other metrics (a step where an inside-region probe is
// silent, say a graph replay) would round differently in the last bit (found by
// the graph_replay property). Sums are therefore gathered and added in rank
// order, which fixes every element's order whatever the batch; max and min are
// exact in any order. Metric partials are a few numbers, so the gather is cheap.
at::Tensor reduce(Communicator& comm, const at::Tensor& value, ReduceOp op) {
  if (op != ReduceOp::sum) return comm.all_reduce(value, op);
  const at::Tensor all = comm.all_gather(value.unsqueeze(0), 0);
  at::Tensor sum = all[0].clone();
  for (std::int64_t r = 1; r < all.size(0); ++r) sum.add_(all[r]);
  return sum;
}

}  // namespace

namespace {

// Requests that may share one collective.
struct BatchKey {
  Axis axis;
  CollectiveKind kind;
  ReduceOp op;
  std::int64_t dim;
  at::ScalarType dtype;
  std::vector<std::int64_t> shape;
  bool operator<(const BatchKey& o) const {
    return std::tie(axis, kind, op, dim, dtype, shape) <
           std::tie(o.axis, o.kind, o.op, o.dim, o.dtype, o.shape);
  }
};

BatchKey key_of(const CollectiveRequest& r) {
  BatchKey k{r.axis,
             r.kind,
             ReduceOp::sum,
             0,
             r.value.scalar_type(),
             std::vector<std::int64_t>(r.value.sizes().begin(), r.value.sizes().end())};
  if (r.kind == CollectiveKind::all_reduce)
    k.op = r.op;
  else
    k.dim = r.dim < 0 ? r.dim + r.value.dim() : r.dim;
  return k;
}

}  // namespace

MetricExecutor::MetricExecutor(std::function<Communicator&(Axis)> group)
    : group_(std::move(group)) {}

MetricExecutor::MetricExecutor(RankGroups& groups)
    : group_([&groups](Axis axis) -> Communicator& { return groups.get(axis); }) {}

std::vector<MetricResult> MetricExecutor::run(std::vector<MetricProgram> programs) {
  std::stable_sort(programs.begin(), programs.end(), [](const auto& a, const auto& b) {
    return std::tie(a.metric, a.label) < std::tie(b.metric, b.label);
  });
  for (;;) {
    // Where each pending request's completed value goes: (program, slot).
    struct Slot {
      std::size_t program, index;
    };
    std::vector<BatchKey> order;  // batches in order of first appearance
    std::map<BatchKey, std::vector<Slot>> batches;
    std::vector<std::vector<at::Tensor>> completed(programs.size());
    bool pending = false;
    for (std::size_t p = 0; p < programs.size(); ++p) {
      MetricStep& step = programs[p].step;
      if (step.done()) continue;
      pending = true;
      completed[p].resize(step.requests.size());
      for (std::size_t i = 0; i < step.requests.size(); ++i) {
        const CollectiveRequest& r = step.requests[i];
        PARITY_CHECK(r.value.defined(), "metric " + programs[p].metric + " (" + programs[p].label +
                                            "): request with an undefined tensor");
        ++stats_.requests;
        if (group_(r.axis).size() == 1 || r.value.numel() == 0) {
          ++stats_.local;
          completed[p][i] = r.value;
          continue;
        }
        BatchKey key = key_of(r);
        auto [it, inserted] = batches.try_emplace(key);
        if (inserted) order.push_back(key);
        it->second.push_back({p, i});
      }
    }
    if (!pending) break;
    ++stats_.rounds;
    for (const BatchKey& key : order) {
      const std::vector<Slot>& slots = batches.at(key);
      std::vector<at::Tensor> values;
      values.reserve(slots.size());
      for (const Slot& s : slots)
        values.push_back(programs[s.program].step.requests[s.index].value);
      Communicator& comm = group_(key.axis);
      ++stats_.collectives;
      std::vector<at::Tensor> out;
      if (values.size() == 1) {
        out.push_back(key.kind == CollectiveKind::all_reduce ? reduce(comm, values[0], key.op)
                                                             : comm.all_gather(values[0], key.dim));
      } else {
        const at::Tensor stacked = at::stack(values);
        const at::Tensor result = key.kind == CollectiveKind::all_reduce
                                      ? reduce(comm, stacked, key.op)
                                      : comm.all_gather(stacked, key.dim + 1);
        out = result.unbind(0);
      }
      for (std::size_t j = 0; j < slots.size(); ++j)
        completed[slots[j].program][slots[j].index] = out[j];
    }
    for (std::size_t p = 0; p < programs.size(); ++p) {
      MetricStep& step = programs[p].step;
      if (step.done()) continue;
      MetricStep next = step.resume(std::move(completed[p]));
      step = std::move(next);
    }
  }
  std::vector<MetricResult> results;
  for (const auto& p : programs) {
    const at::Tensor result = p.step.result.to(at::kDouble);
    if (result.dim() == 0) {
      results.push_back({p.metric, p.label, result.item<double>()});
      continue;
    }
    if (result.dim() != 1 || result.size(0) != static_cast<std::int64_t>(p.step.labels.size()))
      PARITY_FAIL_INTERNAL("metric " + p.metric + " (" + p.label +
                           "): " + std::to_string(result.numel()) + " named values for " +
                           std::to_string(p.step.labels.size()) + " labels");
    for (std::size_t i = 0; i < p.step.labels.size(); ++i)
      results.push_back({p.metric, p.step.labels[i], result[i].item<double>()});
  }
  // Named results carry their own labels: the program order is not theirs.
  std::stable_sort(results.begin(), results.end(), [](const auto& a, const auto& b) {
    return std::tie(a.metric, a.label) < std::tie(b.metric, b.label);
  });
  return results;
}

}  // namespace parity
