#pragma once
// What a collective call is, as the runtime records it: for failure reports (the
// last collective a rank entered) and for fingerprints (--check-collectives).
#include <cstdint>
#include <string>
#include <vector>

#include "harness/parallel/topology.h"

namespace parity {

// An uneven all-to-all (Communicator::all_to_all) is two calls: all_to_all_counts
// (every rank's send counts, int64 [size], gathered) then all_to_all (the data,
// every chunk padded to the group's largest: shape [size, max chunk, ...], the
// same on every rank). send and recv are point-to-point messages within a
// group (harness/parallel/point_to_point.h). New ops go last: fingerprints
// carry the op's number.
enum class CollectiveOp : std::int8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  barrier,
  all_to_all_counts,
  all_to_all,
  send,
  recv
};
enum class ReduceOp : std::int8_t { sum, max, min };

std::string_view to_string(CollectiveOp op);
std::string_view to_string(ReduceOp op);

struct CollectiveCall {
  CollectiveOp op = CollectiveOp::barrier;
  ReduceOp reduce = ReduceOp::sum;  // meaningful for all_reduce / reduce_scatter
  Axis axis = Axis::world;
  std::int8_t dtype = -1;  // c10::ScalarType as int; -1 for barrier
  std::vector<std::int64_t> shape;
  std::int64_t dim = 0;       // gather/scatter dim, broadcast root, send/recv peer
  std::int64_t sequence = 0;  // per-communicator call number, from 0
  // send/recv: what the message is, agreed by both sides (PointToPointOp), and
  // how a report names it.
  std::int64_t message = -1;
  std::string label;

  // "all_reduce(sum) on tp, float32 [2, 3], #4";
  // "send(to 1: activation of microbatch 2) on pp, float32 [2, 8, 16], #7"
  std::string describe() const;
  bool same_call(const CollectiveCall& other) const;  // everything but nothing ignored
};

}  // namespace parity
