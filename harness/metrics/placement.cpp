#include "harness/metrics/placement.h"
#include "harness/base/check.h"

#include <stdexcept>

namespace parity {

namespace {

std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, const char* what) {
  const std::int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    PARITY_FAIL(std::string(what) + " " + std::to_string(dim) +
                " is out of range for a tensor of " + std::to_string(rank) + " dimensions");
  return d;
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::int64_t FlatShard::logical_numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : logical_shape) n *= d;
  return n;
}

FlatShard make_flat_shard(std::vector<std::int64_t> logical_shape, std::int64_t start,
                          std::int64_t end) {
  FlatShard f{std::move(logical_shape), start, end};
  for (std::int64_t d : f.logical_shape)
    PARITY_CHECK(d >= 0, "FlatShard: logical shape " + shape_to_string(f.logical_shape) +
                             " has a negative dimension");
  const std::int64_t numel = f.logical_numel();
  if (!(0 <= start && start <= end && end <= numel))
    PARITY_FAIL("FlatShard: interval " + std::to_string(start) + ":" + std::to_string(end) +
                " is not inside 0:" + std::to_string(numel) + " (logical shape " +
                shape_to_string(f.logical_shape) + ")");
  return f;
}

std::string to_string(const Placement& p) {
  if (std::holds_alternative<Replica>(p)) return "Replica";
  if (const auto* s = std::get_if<Shard>(&p))
    return "Shard(" + (s->dim ? std::to_string(*s->dim) : std::string("?")) + ")";
  if (const auto* o = std::get_if<Owned>(&p)) return "Owned(" + std::to_string(o->rank) + ")";
  const auto& f = std::get<FlatShard>(p);
  return "FlatShard(" + shape_to_string(f.logical_shape) + ", " + std::to_string(f.start) + ":" +
         std::to_string(f.end) + ")";
}

Placement& AxisPlacements::at(Axis axis) {
  // tp, cp and dp only (kModelAxes): world and ep are groups, not placements.
  if (axis != Axis::tp && axis != Axis::cp && axis != Axis::dp)
    PARITY_FAIL("placements are per model axis (tp, cp, dp), not " + std::string(to_string(axis)));
  return axes[static_cast<std::size_t>(axis)];
}

const Placement& AxisPlacements::at(Axis axis) const {
  return const_cast<AxisPlacements*>(this)->at(axis);
}

std::string AxisPlacements::describe() const {
  std::string s;
  for (Axis a : kModelAxes) {
    if (!s.empty()) s += ", ";
    s += std::string(to_string(a)) + "=" + to_string(at(a));
  }
  return s;
}

void AxisPlacements::validate() const {
  int flats = 0;
  for (Axis a : kModelAxes) {
    if (const auto* f = std::get_if<FlatShard>(&at(a))) {
      ++flats;
      make_flat_shard(f->logical_shape, f->start, f->end);  // throws when invalid
    }
    if (const auto* o = std::get_if<Owned>(&at(a)); o && o->rank < 0)
      PARITY_FAIL("placement on " + std::string(to_string(a)) + ": Owned rank must be >= 0");
  }
  PARITY_CHECK(flats <= 1, "placements " + describe() + ": at most one FlatShard");
}

AxisPlacements placements_for_forward_observation(std::optional<std::int64_t> tp_shard_dim,
                                                  std::optional<std::int64_t> sequence_dim,
                                                  std::optional<std::int64_t> batch_dim,
                                                  std::int64_t tensor_dim, int tp, int cp, int dp) {
  auto normalized = [&](std::optional<std::int64_t> d, const char* what) -> Shard {
    if (!d) return Shard{std::nullopt};
    return Shard{normalize_dim(*d, tensor_dim, what)};
  };
  AxisPlacements p;
  if (tp_shard_dim && tp > 1) p.at(Axis::tp) = normalized(tp_shard_dim, "tp_shard_dim");
  if (cp > 1) p.at(Axis::cp) = normalized(sequence_dim, "sequence_dim");
  if (dp > 1) p.at(Axis::dp) = normalized(batch_dim, "batch_dim");
  return p;
}

bool is_placeholder(const AxisPlacements& placements, const RankCoordinates& c) {
  const int coordinate[3] = {c.tp, c.cp, c.dp};
  for (std::size_t i = 0; i < 3; ++i)
    if (const auto* o = std::get_if<Owned>(&placements.axes[i]); o && o->rank != coordinate[i])
      return true;
  return false;
}

}  // namespace parity
