#pragma once
// The model's own configuration (a RunConfig in harness/config/ maps onto it).
// Torch-free.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace parity {

enum class ModelDType : std::int8_t { fp32, fp64, bf16 };
enum class NormKind : std::int8_t { layer_norm, rms_norm };
enum class ActivationKind : std::int8_t { gelu, swiglu };

std::string_view to_string(ModelDType d);
std::string_view to_string(NormKind n);
std::string_view to_string(ActivationKind a);

// One-line, user-facing: "model config: heads = 6: must be divisible by tp (4)".
class ModelConfigError : public std::invalid_argument {
 public:
  ModelConfigError(const std::string& field, const std::string& value, const std::string& rule);
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct ModelConfig {
  std::int64_t hidden = 64;
  std::int64_t heads = 4;
  std::int64_t ffn_hidden = 256;  // per activation half for swiglu (fc1 is 2*ffn wide)
  std::int64_t layers = 2;
  std::int64_t seq = 16;          // global sequence length
  std::int64_t micro_batch = 2;
  std::int64_t vocab = 128;
  ModelDType dtype = ModelDType::fp32;
  bool fp32_residual = false;
  double dropout = 0.0;           // hidden dropout (embedding and both bias-dropout-adds)
  NormKind norm = NormKind::layer_norm;
  ActivationKind activation = ActivationKind::gelu;
  std::uint64_t seed = 1234;
  bool sequence_parallel = false;
  bool gather_output = false;     // the output layer's constructor flag
  double norm_eps = 1e-5;
  double init_std = 0.02;

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t fc1_width() const {
    return activation == ActivationKind::swiglu ? 2 * ffn_hidden : ffn_hidden;
  }

  // Throws ModelConfigError for the first violated rule, for a run with the
  // given parallel sizes.
  void validate(int tp, int cp, int dp) const;
};

}  // namespace parity
