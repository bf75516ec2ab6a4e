#pragma once
// How the model's collective mappings (tp_mappings.cpp, ep_mappings.cpp) carry
// a Communicator through a custom autograd function: as an int64 in the
// context's saved data (an IValue cannot hold a raw pointer). Internal to those
// two files; it includes the autograd function header they need anyway.
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "harness/parallel/communicator.h"

namespace parity::detail {

// A null communicator or a group of one: the mapping is the identity.
inline bool trivial_group(const Communicator* c) { return c == nullptr || c->size() == 1; }
inline std::int64_t to_handle(Communicator* c) { return reinterpret_cast<std::int64_t>(c); }
inline Communicator& comm_of(std::int64_t handle) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the handle is a pointer (to_handle), by design
  return *reinterpret_cast<Communicator*>(handle);
}
// The communicator a forward saved as saved_data["comm"].
inline Communicator& saved_communicator(torch::autograd::AutogradContext* ctx) {
  return comm_of(ctx->saved_data["comm"].toInt());
}

}  // namespace parity::detail
