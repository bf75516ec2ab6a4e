#include "harness/backend/registry.h"
#include "harness/base/check.h"

#include <map>
#include <mutex>
#include <stdexcept>

namespace parity {
namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registrars run at static init
  return *r;
}
}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    PARITY_FAIL_INTERNAL("backend '" + name + "' registered twice");
  }
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [n, f] : r.factories) known += (known.empty() ? "" : ", ") + n;
      PARITY_FAIL("unknown backend '" + name + "' (known: " + (known.empty() ? "none" : known) +
                  ")");
    }
    factory = it->second;
  }
  return factory();
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, f] : r.factories) names.push_back(n);
  return names;
}

}  // namespace parity
