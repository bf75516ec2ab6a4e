#pragma once
// What this parity binary is: its version, the git commit it was built from,
// the LibTorch it links and the backends compiled into it. `parity --version`
// prints it; the check report and the sweep summary carry version_json(), so a
// stored result says which build produced it.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace parity {

struct VersionInfo {
  std::string parity;    // the project version: "0.1.0"
  std::string commit;    // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown" (built outside git)
  std::string libtorch;  // "1.13.0"
  std::vector<std::string> backends;  // registered in this binary, sorted: {"reference"}
};

VersionInfo version_info();
// {"parity": "0.1.0", "commit": "...", "libtorch": "1.13.0", "backends": ["reference"]}
nlohmann::ordered_json version_json();
// "parity 0.1.0 (commit 1a2b3c4d5e6f)\nLibTorch 1.13.0\nbackends: reference" (no final newline)
std::string version_text();

}  // namespace parity
