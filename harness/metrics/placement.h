#pragma once
// Where the pieces of an observed tensor live, per axis (tp, cp, dp), in the
// vocabulary of Megatron's metric core (megatron-reference.md section 3.1):
//   Replica        identical on every rank of the axis; never reduced over
//   Shard(dim)     split along local `dim` (uneven and empty pieces allowed);
//                  no dim = "split, dimension unknown" (whole-tensor metrics only)
//   Owned(rank)    only group rank `rank` holds the value; the others are
//                  placeholders that contribute the reduction's identity
//   FlatShard      a contiguous row-major interval [start, end) of a logical
//                  tensor (parameter-style shards); the local tensor is flat
// One function decides the placements of a forward observation (contract.md
// section 4): placements_for_forward_observation.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "harness/parallel/topology.h"

namespace parity {

struct Replica {};
struct Shard {
  std::optional<std::int64_t> dim;  // normalized (>= 0) when known
};
struct Owned {
  int rank = 0;  // rank within the axis group
};
struct FlatShard {
  std::vector<std::int64_t> logical_shape;
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::int64_t logical_numel() const;
};
using Placement = std::variant<Replica, Shard, Owned, FlatShard>;

// Throws std::invalid_argument unless 0 <= start <= end <= numel(logical_shape)
// and every logical dim is >= 0.
FlatShard make_flat_shard(std::vector<std::int64_t> logical_shape, std::int64_t start,
                          std::int64_t end);

// "Replica", "Shard(0)", "Shard(?)", "Owned(1)", "FlatShard([4, 6], 3:9)"
std::string to_string(const Placement& p);

inline bool is_replica(const Placement& p) { return std::holds_alternative<Replica>(p); }
// True for the placements a logical reduction reduces over (Shard, FlatShard, Owned).
inline bool needs_reduction(const Placement& p) { return !is_replica(p); }

// One placement per model axis, indexed like kModelAxes (tp, cp, dp).
struct AxisPlacements {
  std::array<Placement, 3> axes{Replica{}, Replica{}, Replica{}};
  Placement& at(Axis axis);
  const Placement& at(Axis axis) const;
  // "tp=Shard(0), cp=Replica, dp=Shard(1)"
  std::string describe() const;
  // At most one FlatShard; a FlatShard's interval lies inside its logical
  // tensor. Throws std::invalid_argument naming the axis otherwise.
  void validate() const;
};

// contract.md section 4, the one place this rule lives:
//   tp = Shard(tp_shard_dim) when given and tp > 1, else Replica
//   cp = Shard(sequence_dim) when cp > 1 (Shard(unknown) without a sequence_dim)
//   dp = Shard(batch_dim)    when dp > 1 (Shard(unknown) without a batch_dim)
// Negative dims are normalized against `tensor_dim` (the observed tensor's
// rank); a dim out of range throws std::invalid_argument.
AxisPlacements placements_for_forward_observation(std::optional<std::int64_t> tp_shard_dim,
                                                  std::optional<std::int64_t> sequence_dim,
                                                  std::optional<std::int64_t> batch_dim,
                                                  std::int64_t tensor_dim, int tp, int cp, int dp);

// True when some axis is Owned by a rank other than this rank's coordinate on
// that axis: this rank holds a placeholder, not the value.
bool is_placeholder(const AxisPlacements& placements, const RankCoordinates& coordinates);

}  // namespace parity
