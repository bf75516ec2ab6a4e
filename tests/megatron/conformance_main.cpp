// The conformance executables' main (conformance.h).
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/megatron/conformance.h"

namespace parity::conformance {
namespace {

std::vector<std::string>& failures() {
  static std::vector<std::string> all;
  return all;
}

}  // namespace

void fail(const std::string& what) { failures().push_back(what); }

}  // namespace parity::conformance

int main(int argc, char** argv) {
  using nlohmann::json;
  namespace conformance = parity::conformance;
  if (argc != 2) {
    const std::string self = argv[0];
    std::cerr << "usage: " << self.substr(self.rfind('/') + 1) << " MEGATRON.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  json megatron;
  try {
    megatron = json::parse(in);
  } catch (const json::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
  const conformance::Summary summary = conformance::compare(megatron);
  const std::vector<std::string>& failures = conformance::failures();
  for (std::size_t i = 0; i < failures.size() && i < 30; ++i)
    std::cout << "FAIL " << failures[i] << "\n";
  std::cout << summary.subject << " vs Megatron Core " << megatron.value("megatron_core", "?")
            << ": " << summary.counts << "; " << failures.size() << " differences\n";
  return failures.empty() ? 0 : 1;
}
