#pragma once
// The uneven all-to-all of the MoE token dispatcher (Communicator::all_to_all):
// what it returns, and the arithmetic that keeps it symmetric. Every rank first
// learns every rank's send counts (an all-gather of int64 [size]); then every
// rank pads each chunk it sends to the group-wide largest chunk, so the data
// moves in one equal-chunk exchange whose shape, [size, max chunk, ...], is the
// same on every rank and can be fingerprinted like any other collective.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace parity {

struct AllToAllResult {
  // [sum(recv_counts), ...]: the rows from group rank 0 first, then rank 1's, ...
  at::Tensor output;
  // Rows received from each group rank (what each rank sent to this one).
  std::vector<std::int64_t> recv_counts;
};

// Every rank's send counts, as the counts exchange returns them: row s is what
// group rank s sends to each rank.
class AllToAllCounts {
 public:
  // `gathered`: int64 [size * size], rank 0's counts first.
  AllToAllCounts(int size, const at::Tensor& gathered);

  std::int64_t sent(int source, int destination) const;
  std::vector<std::int64_t> received_by(int destination) const;
  // The largest chunk any rank sends to any rank: the padded chunk's rows.
  std::int64_t max_chunk() const;

 private:
  int size_;
  std::vector<std::int64_t> counts_;
};

// input [sum(send_counts), ...] -> [size, max_chunk, ...]: chunk d holds the
// send_counts[d] rows for rank d, then zeros.
at::Tensor pad_chunks(const at::Tensor& input, const std::vector<std::int64_t>& send_counts,
                      std::int64_t max_chunk);
// received [size, max_chunk, ...] (chunk s from rank s) -> [sum(recv_counts), ...].
at::Tensor unpad_chunks(const at::Tensor& received, const std::vector<std::int64_t>& recv_counts);

}  // namespace parity
