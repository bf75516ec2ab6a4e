#pragma once
// A sweep's matrix file (docs/sweep.md): value lists per scenario key ("axes"),
// keys fixed for every case ("base"), partial assignments to leave out
// ("exclude") and extra cases ("include"). Expanded in a deterministic order:
// the cartesian product in the axes' order (the last axis varies fastest),
// then the include entries in file order. Every case is validated as parity
// check validates a scenario: an invalid combination is counted with its
// reason, never an error; a malformed matrix file is (MatrixError).
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"

namespace parity::sweep {

class MatrixError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One case of the expansion. `index` is its position in the full expansion
// (excluded and invalid cases included), so it is the same in every shard.
struct SweepCase {
  int index = 0;
  std::string id;                     // "tp=2 cp=1 ... dtype=fp32"
  nlohmann::ordered_json assignment;  // the axes' values (and an include's extra keys)
  RunConfig config;                   // base + assignment over RunConfig's defaults
};

struct InvalidCase {
  int index = 0;
  std::string id;
  nlohmann::ordered_json assignment;
  std::string reason;  // the violated rules, one line
};

struct Matrix {
  nlohmann::ordered_json source;  // the matrix file as read
  std::string digest;             // matrix_digest(source)
  std::vector<std::string> axes;  // in the file's order
  std::vector<SweepCase> cases;   // valid cases, in index order
  std::vector<InvalidCase> invalid;
  int excluded = 0;   // cartesian cases an exclude entry matched
  int expansion = 0;  // every case of the expansion: cases + invalid + excluded
};

// Parses, validates and expands a matrix; `source` names the file in errors
// ("m.json: \"axes\".\"tpp\": unknown key ..."). Throws MatrixError.
Matrix expand_matrix(const nlohmann::ordered_json& file, const std::string& source);
// Reads a matrix file (MatrixError: cannot read, invalid JSON, and expand_matrix's errors).
Matrix read_matrix_file(const std::string& path);

// 16 hex digits: FNV-1a 64 of the matrix's compact JSON in the file's key order
// (whitespace does not matter; axis order does, since it orders the cases).
std::string matrix_digest(const nlohmann::ordered_json& file);

// The text of a case id: "tp=2 sp=true recompute=selective:mlp".
std::string case_id(const nlohmann::ordered_json& assignment);

}  // namespace parity::sweep
