#include "harness/backend/backend.h"

#include <c10/core/Device.h>

namespace parity {

at::Device Backend::device() const { return at::Device(at::kCPU); }

}  // namespace parity
