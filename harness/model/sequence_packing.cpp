#include "harness/model/sequence_packing.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cerrno>
#include <cstdlib>
#include <numeric>
#include <stdexcept>

#include "harness/backend/stable_hash.h"
#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"

PARITY_USES_FAULT(packed_positions_global);

namespace parity {

std::optional<std::vector<std::int64_t>> parse_packed_seq_lengths(std::string_view text,
                                                                  std::string* why) {
  std::vector<std::int64_t> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item(text.substr(begin, comma - begin));
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE) {
      if (why) *why = "\"" + item + "\" is not an integer (a comma list of document lengths)";
      return std::nullopt;
    }
    out.push_back(v);
    begin = comma + 1;
  }
  return out;
}

namespace {
std::int64_t pad_multiple(int cp) { return cp > 1 ? 2 * std::int64_t{cp} : 1; }
std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }
}  // namespace

std::int64_t packed_span(const std::vector<std::int64_t>& lengths, int cp) {
  std::int64_t span = 0;
  for (std::int64_t l : lengths) span += round_up(l, pad_multiple(cp));
  return span;
}

std::int64_t SequencePacking::valid_tokens() const {
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

SequencePacking pack_sequences(const std::vector<std::int64_t>& lengths, std::int64_t seq, int cp) {
  if (lengths.empty()) PARITY_FAIL("pack_sequences: no documents");
  for (std::int64_t l : lengths) PARITY_CHECK(l >= 1, "pack_sequences: a document of length < 1");
  if (packed_span(lengths, cp) > seq || seq % pad_multiple(cp) != 0)
    PARITY_FAIL("pack_sequences: the documents do not fit in the sequence");
  SequencePacking p;
  p.lengths = lengths;
  p.seq = seq;
  p.cp = cp;
  std::int64_t start = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const std::int64_t padded =
        d + 1 == lengths.size() ? seq - start : round_up(lengths[d], pad_multiple(cp));
    p.padded_starts.push_back(start);
    p.padded_lengths.push_back(padded);
    start += padded;
  }
  return p;
}

PackedPositionTables packed_position_tables(const SequencePacking& p, at::Device device) {
  at::Tensor document = at::empty({p.seq}, at::kLong);
  at::Tensor within = at::empty({p.seq}, at::kLong);
  at::Tensor valid = at::zeros({p.seq}, at::kBool);
  at::Tensor order = at::arange(p.seq, p.seq + p.seq, at::kLong);
  std::int64_t before = 0;  // the earlier documents' tokens
  for (std::size_t d = 0; d < p.lengths.size(); ++d) {
    const std::int64_t start = p.padded_starts[d], n = p.padded_lengths[d];
    document.narrow(0, start, n).fill_(static_cast<std::int64_t>(d));
    within.narrow(0, start, n).copy_(at::arange(n, at::kLong));
    valid.narrow(0, start, p.lengths[d]).fill_(true);
    order.narrow(0, start, p.lengths[d])
        .copy_(at::arange(before, before + p.lengths[d], at::kLong));
    before += p.lengths[d];
  }
  return {document.to(device), within.to(device), valid.to(device), order.to(device)};
}

at::Tensor PackedPositionTables::documents_of(const at::Tensor& positions) const {
  return document.index_select(0, positions);
}

at::Tensor PackedPositionTables::valid_of(const at::Tensor& positions) const {
  return valid.index_select(0, positions);
}

at::Tensor PackedPositionTables::embedding_positions(const at::Tensor& positions) const {
  if (fault_active(fault_packed_positions_global)) return positions;
  return position_in_document.index_select(0, positions);
}

at::Tensor packed_context_parallel_positions(const SequencePacking& p, int cp_rank) {
  const std::int64_t parts = 2 * std::int64_t{p.cp};
  std::vector<at::Tensor> pieces;
  for (std::size_t d = 0; d < p.lengths.size(); ++d) {
    const std::int64_t chunk = p.padded_lengths[d] / parts, start = p.padded_starts[d];
    if (p.cp == 1) {
      pieces.push_back(at::arange(start, start + p.padded_lengths[d], at::kLong));
      continue;
    }
    const std::int64_t first = start + cp_rank * chunk;
    const std::int64_t second = start + (parts - 1 - cp_rank) * chunk;
    pieces.push_back(at::arange(first, first + chunk, at::kLong));
    pieces.push_back(at::arange(second, second + chunk, at::kLong));
  }
  return at::cat(pieces);
}

at::Tensor relayout_packed(const at::Tensor& t, const SequencePacking& from,
                           const SequencePacking& to) {
  at::Tensor out = at::zeros_like(t);
  for (std::size_t d = 0; d < from.lengths.size(); ++d)
    out.narrow(0, to.padded_starts[d], to.lengths[d])
        .copy_(t.narrow(0, from.padded_starts[d], from.lengths[d]));
  return out;
}

MicrobatchData packed_microbatch_data(std::uint64_t seed, std::int64_t global_microbatch,
                                      const SequencePacking& p, std::int64_t micro_batch,
                                      std::int64_t vocab) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(
      seed_for(seed, "data.tokens", static_cast<std::uint64_t>(global_microbatch)));
  const std::int64_t n = p.valid_tokens();
  const at::Tensor stream = at::randint(vocab, {n + 1, micro_batch}, gen, at::kLong);
  MicrobatchData data{at::zeros({p.seq, micro_batch}, at::kLong),
                      at::zeros({p.seq, micro_batch}, at::kLong)};
  std::int64_t used = 0;
  for (std::size_t d = 0; d < p.lengths.size(); ++d) {
    const std::int64_t len = p.lengths[d], start = p.padded_starts[d];
    data.tokens.narrow(0, start, len).copy_(stream.narrow(0, used, len));
    data.labels.narrow(0, start, len).copy_(stream.narrow(0, used + 1, len));
    used += len;
  }
  return data;
}

}  // namespace parity
