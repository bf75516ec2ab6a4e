#include "harness/model/model_config.h"

#include <cmath>
#include <sstream>

namespace parity {

std::string_view to_string(ModelDType d) {
  switch (d) {
    case ModelDType::fp32: return "fp32";
    case ModelDType::fp64: return "fp64";
    case ModelDType::bf16: return "bf16";
  }
  return "?";
}
std::string_view to_string(NormKind n) {
  return n == NormKind::layer_norm ? "layernorm" : "rmsnorm";
}
std::string_view to_string(ActivationKind a) {
  return a == ActivationKind::gelu ? "gelu" : "swiglu";
}

ModelConfigError::ModelConfigError(const std::string& field, const std::string& value,
                                   const std::string& rule)
    : std::invalid_argument("model config: " + field + " = " + value + ": " + rule),
      field_(field) {}

namespace {
template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
void require(bool ok, const char* field, const std::string& value, const std::string& rule) {
  if (!ok) throw ModelConfigError(field, value, rule);
}
}  // namespace

void ModelConfig::validate(int tp, int cp, int dp) const {
  require(tp >= 1, "tp", str(tp), "must be >= 1");
  require(cp >= 1, "cp", str(cp), "must be >= 1");
  require(dp >= 1, "dp", str(dp), "must be >= 1");
  require(hidden >= 1, "hidden", str(hidden), "must be >= 1");
  require(heads >= 1, "heads", str(heads), "must be >= 1");
  require(hidden % heads == 0, "hidden", str(hidden),
          "must be divisible by heads (" + str(heads) + ")");
  require(heads % tp == 0, "heads", str(heads), "must be divisible by tp (" + str(tp) + ")");
  require(ffn_hidden >= 1, "ffn_hidden", str(ffn_hidden), "must be >= 1");
  require(ffn_hidden % tp == 0, "ffn_hidden", str(ffn_hidden),
          "must be divisible by tp (" + str(tp) + ")");
  require(layers >= 1, "layers", str(layers), "must be >= 1");
  require(vocab >= 1, "vocab", str(vocab), "must be >= 1");
  require(vocab % tp == 0, "vocab", str(vocab), "must be divisible by tp (" + str(tp) + ")");
  require(micro_batch >= 1, "micro_batch", str(micro_batch), "must be >= 1");
  require(seq >= 1, "seq", str(seq), "must be >= 1");
  require(seq % (2 * cp) == 0 || cp == 1, "seq", str(seq),
          "must be divisible by 2*cp (" + str(2 * cp) + ")");
  require(!sequence_parallel || tp > 1, "sequence_parallel", "true", "needs tp > 1 (tp = 1)");
  if (sequence_parallel) {
    require((seq / cp) % tp == 0, "seq", str(seq),
            "must be divisible by cp*tp (" + str(cp * tp) + ") under sequence parallel");
  }
  require(dropout >= 0.0 && dropout < 1.0, "dropout", str(dropout), "must be in [0, 1)");
  require(norm_eps > 0.0, "norm_eps", str(norm_eps), "must be > 0");
  require(init_std > 0.0 && std::isfinite(init_std), "init_std", str(init_std), "must be > 0");
}

}  // namespace parity
