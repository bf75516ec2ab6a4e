#pragma once
// Runs the collective programs of many metric results together
// (megatron-reference.md section 3.5). Each round it takes the pending
// requests of every program, in a deterministic order (programs sorted by
// metric name, then label; requests in the order a program issues them), and
// batches identical ones: requests with the same axis, collective (op or
// gather dim), dtype and shape are stacked on a new leading dim, issued as one
// collective and unbound. A request on an axis of size 1, or on an empty
// tensor, completes locally with no call. Every rank must hold the same
// programs and issue the same requests (the protocol's invariant); with
// check_collectives on, a rank that differs gets CollectiveMismatch from its
// communicator instead of a hang.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/metrics/metric.h"

namespace parity {

class Communicator;
struct RankGroups;

struct MetricProgram {
  std::string metric;
  std::string label;
  MetricStep step;  // the program's current step (from Metric::start)
};

struct ExecutorStats {
  std::int64_t rounds = 0;
  std::int64_t requests = 0;     // requests issued by programs (all axes)
  std::int64_t local = 0;        // completed without a call (size-1 axis, empty tensor)
  std::int64_t collectives = 0;  // collective calls issued
};

class MetricExecutor {
 public:
  // `group(axis)` returns the communicator of this rank's group on `axis`.
  explicit MetricExecutor(std::function<Communicator&(Axis)> group);
  explicit MetricExecutor(RankGroups& groups);

  // Runs every program to completion; results sorted by (metric, label).
  std::vector<MetricResult> run(std::vector<MetricProgram> programs);
  const ExecutorStats& stats() const { return stats_; }
  // The communicator of this rank's group on `axis`.
  Communicator& group(Axis axis) const { return group_(axis); }

 private:
  std::function<Communicator&(Axis)> group_;
  ExecutorStats stats_;
};

}  // namespace parity
