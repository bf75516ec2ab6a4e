#pragma once
// What the conformance executables share (pipeline_layout_conformance,
// pipeline_schedule_conformance, rank_layout_conformance): `NAME MEGATRON.json` reads the
// answers a tools/megatron script wrote; the executable's compare() records each
// difference with fail(); main (conformance_main.cpp) prints the first 30 differences
// and one summary line. Exit 0 when all are equal, 1 when some differ, 2 on a bad
// command line or JSON.
#include <string>

#include <nlohmann/json.hpp>

namespace parity::conformance {

// Records one difference (one line).
void fail(const std::string& what);

// The summary line's parts: "<subject> vs Megatron Core <version>: <counts>; N differences".
struct Summary {
  std::string subject;  // "pipeline layout"
  std::string counts;   // what was compared, and how much of it
};

// Defined by each executable: compares parity with Megatron's answers, calling fail()
// for each difference (and when too little was compared to mean anything).
Summary compare(const nlohmann::json& megatron);

}  // namespace parity::conformance
