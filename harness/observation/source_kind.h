#pragma once
// The source kinds an observation site can announce, and sets of them.
//
// Kinds are an enum with a bitmask set (not strings, as in Megatron) so that the
// gate's "kind in the active set" test is one AND: the inactive observation path
// must stay a thread-local load and a branch.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace parity {

enum class SourceKind : std::uint8_t {
  residual_accumulator,
  residual_contribution,
  output_logits,
  attention_context,  // parity probe: output of core attention, inside the layer
  mlp_output,         // parity probe: output of fc2 before bias-dropout-add
  router_logits,
  router_scores,
  router_diagnostics,
  mtp_logits,
  layernorm_output,  // parity probe: output of a layer's input/pre-MLP norm (the
                     // selective "layernorm" recompute region)
  weight_gradient,   // parity probe: a parameter's gradient from one microbatch's
                     // backward, fed by gradient hooks (--observe-wgrad)
};
inline constexpr int kSourceKindCount = 11;

// Megatron's spelling of the kind ("residual_accumulator", ...).
std::string_view to_string(SourceKind kind);
std::optional<SourceKind> source_kind_from_string(std::string_view name);

// True for parity's own probe kinds (no Megatron counterpart).
constexpr bool is_parity_probe(SourceKind kind) {
  return kind == SourceKind::attention_context || kind == SourceKind::mlp_output ||
         kind == SourceKind::layernorm_output || kind == SourceKind::weight_gradient;
}

class KindSet {
 public:
  constexpr KindSet() = default;
  constexpr KindSet(std::initializer_list<SourceKind> kinds) {
    for (SourceKind k : kinds) bits_ |= bit(k);
  }
  static constexpr KindSet all() { return KindSet::from_bits((1u << kSourceKindCount) - 1); }
  static constexpr KindSet from_bits(std::uint32_t bits) {
    KindSet s;
    s.bits_ = bits;
    return s;
  }
  static constexpr std::uint32_t bit(SourceKind k) { return 1u << static_cast<unsigned>(k); }

  constexpr bool contains(SourceKind k) const { return (bits_ & bit(k)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr std::uint32_t bits() const { return bits_; }
  constexpr KindSet& insert(SourceKind k) {
    bits_ |= bit(k);
    return *this;
  }
  friend constexpr bool operator==(KindSet a, KindSet b) { return a.bits_ == b.bits_; }
  friend constexpr bool operator!=(KindSet a, KindSet b) { return a.bits_ != b.bits_; }

 private:
  std::uint32_t bits_ = 0;
};

}  // namespace parity
