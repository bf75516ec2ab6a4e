#include "harness/backend/version.h"

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/compat/torch_compat.h"

namespace parity {

// Generated at build time by cmake/git_commit.cmake (git_commit.cpp in the build folder).
const char* build_git_commit();

VersionInfo version_info() {
  return {PARITY_VERSION, build_git_commit(), TORCH_VERSION, registered_backends()};
}

nlohmann::ordered_json version_json() {
  const VersionInfo v = version_info();
  nlohmann::ordered_json j;
  j["parity"] = v.parity;
  j["commit"] = v.commit;
  j["libtorch"] = v.libtorch;
  j["backends"] = v.backends;
  return j;
}

std::string version_text() {
  const VersionInfo v = version_info();
  std::string backends;
  for (const std::string& b : v.backends) backends += (backends.empty() ? "" : ", ") + b;
  return "parity " + v.parity + " (commit " + v.commit + ")\nLibTorch " + v.libtorch +
         "\nbackends: " + (backends.empty() ? "none registered" : backends);
}

}  // namespace parity
