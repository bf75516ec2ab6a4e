#pragma once
// Backends by name. harness/ never includes reference/ or cuda/: a backend
// registers itself from a static registrar in its own (OBJECT) library, and
// harness code asks for it by name at the edge ("reference", later "cuda").
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/backend/backend.h"

namespace parity {

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Registering a name twice throws std::logic_error.
void register_backend(const std::string& name, BackendFactory factory);
// Throws std::invalid_argument naming the known backends when `name` is unknown.
std::unique_ptr<Backend> make_backend(const std::string& name);
std::vector<std::string> registered_backends();  // sorted

// `static BackendRegistrar r("reference", [] { return ...; });`
struct BackendRegistrar {
  BackendRegistrar(const std::string& name, BackendFactory factory) {
    register_backend(name, std::move(factory));
  }
};

}  // namespace parity
