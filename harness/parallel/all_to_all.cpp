#include "harness/parallel/all_to_all.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "harness/base/check.h"
#include "harness/parallel/communicator.h"

namespace parity {

AllToAllCounts::AllToAllCounts(int size, const at::Tensor& gathered) : size_(size) {
  const at::Tensor flat = gathered.to(at::kLong).contiguous();
  if (flat.numel() != static_cast<std::int64_t>(size) * size)
    PARITY_FAIL_INTERNAL("all_to_all: the counts exchange returned " +
                         std::to_string(flat.numel()) + " values for a group of " +
                         std::to_string(size));
  counts_.assign(flat.data_ptr<std::int64_t>(), flat.data_ptr<std::int64_t>() + flat.numel());
}

std::int64_t AllToAllCounts::sent(int source, int destination) const {
  return counts_[static_cast<std::size_t>(source) * size_ + destination];
}

std::vector<std::int64_t> AllToAllCounts::received_by(int destination) const {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(size_));
  for (int s = 0; s < size_; ++s) out.push_back(sent(s, destination));
  return out;
}

std::int64_t AllToAllCounts::max_chunk() const {
  return counts_.empty() ? 0 : *std::max_element(counts_.begin(), counts_.end());
}

at::Tensor pad_chunks(const at::Tensor& input, const std::vector<std::int64_t>& send_counts,
                      std::int64_t max_chunk) {
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(send_counts.size()), max_chunk};
  shape.insert(shape.end(), input.sizes().begin() + 1, input.sizes().end());
  at::Tensor padded = at::zeros(shape, input.options());
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < send_counts.size(); ++d) {
    padded[static_cast<std::int64_t>(d)]
        .narrow(0, 0, send_counts[d])
        .copy_(input.narrow(0, offset, send_counts[d]));
    offset += send_counts[d];
  }
  return padded;
}

at::Tensor unpad_chunks(const at::Tensor& received, const std::vector<std::int64_t>& recv_counts) {
  std::vector<at::Tensor> parts;
  for (std::size_t s = 0; s < recv_counts.size(); ++s)
    parts.push_back(received[static_cast<std::int64_t>(s)].narrow(0, 0, recv_counts[s]));
  return at::cat(parts, 0).contiguous();
}

// The portable exchange: every rank gathers every rank's padded chunks
// ([size * size, max chunk, ...], size times the traffic of a real all-to-all)
// and keeps the chunks addressed to it. A transport with a native equal-split
// all-to-all overrides this (the Gloo transport: alltoall_base).
at::Tensor CollectiveTransport::all_to_all(const at::Tensor& input) {
  const std::int64_t n = size();
  const at::Tensor everything = all_gather(input, 0);  // [n (source) * n (destination), ...]
  std::vector<std::int64_t> shape{n, n};
  shape.insert(shape.end(), input.sizes().begin() + 1, input.sizes().end());
  return everything.reshape(shape).select(1, rank()).contiguous();
}

}  // namespace parity
