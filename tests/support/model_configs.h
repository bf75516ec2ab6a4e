#pragma once
// The small model most tests build: two layers, a sequence of 8 that splits over
// CP 2 and SP 4, heads and FFN that split over TP 4. Each test adjusts the
// fields it varies (dtype, seed, init_std, ...) on top.
#include <ostream>

#include "harness/config/run_config.h"
#include "harness/model/model_config.h"

namespace parity {

// The model's enums as gtest parameters: their names, not their bytes (found by
// ADL, so in parity).
inline void PrintTo(ModelDType d, std::ostream* os) { *os << to_string(d); }
inline void PrintTo(NormKind n, std::ostream* os) { *os << to_string(n); }
inline void PrintTo(ActivationKind a, std::ostream* os) { *os << to_string(a); }
inline void PrintTo(RecomputeKind r, std::ostream* os) { *os << to_string(r); }

}  // namespace parity

namespace parity::testing {

// Config: ModelConfig, or RunConfig for tests that launch (both name the fields alike).
template <typename Config>
Config small_config() {
  Config c;
  c.hidden = 16;
  c.heads = 4;
  c.ffn_hidden = 24;
  c.layers = 2;
  c.seq = 8;
  c.micro_batch = 2;
  c.vocab = 20;
  return c;
}

}  // namespace parity::testing
