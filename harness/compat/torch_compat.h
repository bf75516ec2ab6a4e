#pragma once
// Every LibTorch version difference parity cares about, in one place.
// Debian's LibTorch 1.13 (CPU machines) and pip torch's LibTorch 2.x (GPU machines).
#include <torch/csrc/api/include/torch/version.h>

#define PARITY_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace parity::compat {
// Gloo in 1.13 has no reduce_scatter / _allgather_base and no bf16 or AVG;
// 2.x Gloo has reduce_scatter on CPU for some dtypes. The reference transport
// keeps one portable path and uses the native call only where this says so.
inline constexpr bool kGlooHasReduceScatter = PARITY_TORCH_AT_LEAST(2, 0);
inline constexpr bool kGlooHasBFloat16 = PARITY_TORCH_AT_LEAST(2, 0);
}  // namespace parity::compat
