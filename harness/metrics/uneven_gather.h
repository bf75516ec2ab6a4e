#pragma once
// All-gathering pieces whose lengths differ per rank (uneven or empty shards)
// under the protocol's invariant that every rank issues identical requests
// (megatron-reference.md section 3.5 and pitfall 7.14). Per axis, two rounds:
//   1. all-gather the lengths: a [1, k] int64 tensor (k pieces per rank);
//   2. all-gather the pieces concatenated and zero-padded to the group's
//      largest total, a [1, max] tensor: every rank issues the same shape;
// then each rank's pieces are cut back to their lengths (unpadded). When every
// rank of the group holds nothing, round 2 is skipped on all of them alike.
#include <cstddef>
#include <functional>
#include <vector>

#include "harness/metrics/metric.h"
#include "harness/metrics/stages.h"

namespace parity {

// Gathers `pieces` (1-D, one dtype) over each axis in `axes`, in the order
// tp, cp, dp; afterwards pieces[j] is the concatenation, in group rank order,
// of every rank's pieces[j]. Then returns then(pieces).
MetricStep gather_uneven(std::vector<at::Tensor> pieces, AxisMask axes,
                         const std::function<MetricStep(std::vector<at::Tensor>)>& then,
                         std::size_t first_axis = 0);

}  // namespace parity
