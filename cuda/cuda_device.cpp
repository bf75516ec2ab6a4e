#include "cuda/cuda_device.h"

#include <c10/cuda/CUDAFunctions.h>

#include <cstdlib>
#include <string>

namespace parity::gpu {

std::string cuda_unavailable_reason() {
  int count = 0;
  try {
    count = static_cast<int>(c10::cuda::device_count());
  } catch (const std::exception&) {
    count = 0;  // no driver: the same answer as no device
  }
  if (count > 0) return {};
  return "no CUDA device is visible (torch sees 0 devices; check nvidia-smi and "
         "CUDA_VISIBLE_DEVICES): the cuda backend needs a GPU, use --backend reference";
}

int rank_device_index() {
  const int count = static_cast<int>(c10::cuda::device_count());
  if (count <= 0) return 0;
  const char* local = std::getenv("LOCAL_RANK");
  if (local == nullptr || *local == '\0') return 0;
  char* end = nullptr;
  const long r = std::strtol(local, &end, 10);
  if (end == local || r < 0) return 0;
  return static_cast<int>(r % count);
}

}  // namespace parity::gpu
