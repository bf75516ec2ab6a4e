#include "harness/parallel/byte_gather.h"

#include <ATen/ATen.h>

#include "harness/parallel/communicator.h"

namespace parity {

std::vector<at::Tensor> all_gather_bytes(Communicator& group, const at::Tensor& bytes) {
  const at::Tensor lengths =
      group.all_gather(at::full({1}, bytes.numel(), at::kLong), 0).to(at::kCPU);
  const std::int64_t longest = lengths.max().item<std::int64_t>();
  at::Tensor padded = at::zeros({longest}, at::kByte);
  padded.narrow(0, 0, bytes.numel()).copy_(bytes);
  const at::Tensor all = group.all_gather(padded, 0).to(at::kCPU);
  std::vector<at::Tensor> out;
  out.reserve(static_cast<std::size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r)
    out.push_back(all.narrow(0, r * longest, lengths[r].item<std::int64_t>()));
  return out;
}

}  // namespace parity
