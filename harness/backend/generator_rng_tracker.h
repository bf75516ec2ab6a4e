#pragma once
// The RngTracker both backends use: Megatron's two streams over ATen generators
// that a backend makes (the reference: CPU mt19937; the CUDA backend: the
// device's Philox generators). A snapshot is each generator's own state bytes
// (CPU: the whole engine state; CUDA: seed and Philox offset), so restoring one
// before a recomputation reproduces its dropout masks exactly.
#include <functional>
#include <memory>

#include "harness/backend/backend.h"

namespace parity {

// Makes one fresh generator; called once per stream.
using GeneratorFactory = std::function<at::Generator()>;

std::unique_ptr<RngTracker> make_generator_rng_tracker(const GeneratorFactory& make);

}  // namespace parity
