#pragma once
// Packed sequences (Megatron's THD batches, PackedSeqParams qkv_format "thd"):
// several documents of different lengths in one sequence of `seq` positions.
// Under context parallelism each document is padded to a multiple of 2 * cp
// (Megatron's cu_seqlens_padded) and split into 2 * cp chunks, CP rank r
// holding chunks r and 2 * cp - 1 - r of every document (Transformer Engine's
// thd_get_partitioned_indices). The last document's padding runs to the end of
// the sequence. Padding is no token: it is left out of the loss, the router
// statistics and every metric's population. See docs/model.md "Packed sequences".
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/model/init.h"

namespace parity {

// "5,11,8" -> {5, 11, 8}; nullopt (and `why`) for text that is not a comma
// list of integers. The lengths' rules are ModelConfig's.
std::optional<std::vector<std::int64_t>> parse_packed_seq_lengths(std::string_view text,
                                                                  std::string* why);

// The positions the documents take when each is padded to a multiple of
// 2 * cp (of 1 without CP): what must fit in the sequence.
std::int64_t packed_span(const std::vector<std::int64_t>& lengths, int cp);

struct SequencePacking {
  std::vector<std::int64_t> lengths;         // each document's tokens (cu_seqlens' steps)
  std::vector<std::int64_t> padded_starts;   // cu_seqlens_padded without its last entry
  std::vector<std::int64_t> padded_lengths;  // multiples of 2 * cp; the last ends at seq
  std::int64_t seq = 0;
  int cp = 1;
  std::int64_t valid_tokens() const;  // the documents' tokens, padding not counted
};

// The layout of `lengths` in a sequence of `seq` positions at context
// parallel size `cp`. Throws std::invalid_argument when they do not fit
// (ModelConfig's rules say so first).
SequencePacking pack_sequences(const std::vector<std::int64_t>& lengths, std::int64_t seq, int cp);

// Per packed position [seq]: its document (int64; padding belongs to the
// document it follows), its position within the document (int64; padding
// continues the count) and whether it holds a token (bool).
struct PackedPositionTables {
  at::Tensor document;
  at::Tensor position_in_document;
  at::Tensor valid;
  // A layout-free order of the positions (int64): a token's place among the
  // documents' tokens back to back, padding after every token (seq + its
  // position). What orders tokens that must be ordered alike on every layout.
  at::Tensor token_order;
  bool defined() const { return document.defined(); }
  at::Tensor documents_of(const at::Tensor& positions) const;
  at::Tensor valid_of(const at::Tensor& positions) const;
  // The positions rotary and learned position embeddings use: within the
  // document (Megatron's --reset-position-ids). Fault packed-positions-global:
  // the packed positions themselves.
  at::Tensor embedding_positions(const at::Tensor& positions) const;
};
PackedPositionTables packed_position_tables(const SequencePacking& packing, at::Device device);

// CP rank `cp_rank`'s packed positions, int64 [seq / cp]: per document, in
// document order, chunks cp_rank and 2 * cp - 1 - cp_rank of its padded span.
at::Tensor packed_context_parallel_positions(const SequencePacking& packing, int cp_rank);

// `t` ([seq, ...]) with each document's token rows moved from their place in
// `from` to their place in `to` (two layouts of the same documents, e.g. a CP
// run's and the single rank's); the padding rows of the result are zero.
at::Tensor relayout_packed(const at::Tensor& t, const SequencePacking& from,
                           const SequencePacking& to);

// One microbatch of packed documents, [seq, micro_batch]: the documents' tokens
// are drawn from (seed, global microbatch) as one stream of valid_tokens() + 1
// ids, document d taking the stream's next lengths[d] ids as its tokens and the
// ids after each as its labels, so a document holds the same tokens whatever
// padding the layout adds. Padding positions hold token and label 0.
MicrobatchData packed_microbatch_data(std::uint64_t seed, std::int64_t global_microbatch,
                                      const SequencePacking& packing, std::int64_t micro_batch,
                                      std::int64_t vocab);

}  // namespace parity
