// harness/sweep/matrix.h: parsing, expansion order, exclude/include, invalid
// cases with their reasons, bad matrix files naming the key, the digest.
#include "harness/sweep/matrix.h"

#include <gtest/gtest.h>

namespace parity::sweep {
namespace {

using ojson = nlohmann::ordered_json;

Matrix expand(const std::string& text) { return expand_matrix(ojson::parse(text), "m.json"); }

std::string error_of(const std::string& text) {
  try {
    expand(text);
  } catch (const MatrixError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SweepMatrix, ExpandsTheCartesianProductLastAxisFastest) {
  const Matrix m = expand(R"({"axes": {"tp": [1, 2], "dtype": ["fp32", "fp64"]}})");
  ASSERT_EQ(m.cases.size(), 4u);
  EXPECT_EQ(m.cases[0].id, "tp=1 dtype=fp32");
  EXPECT_EQ(m.cases[1].id, "tp=1 dtype=fp64");
  EXPECT_EQ(m.cases[2].id, "tp=2 dtype=fp32");
  EXPECT_EQ(m.cases[3].index, 3);
  EXPECT_EQ(m.cases[3].config.tp, 2);
  EXPECT_EQ(m.cases[3].config.dtype, ModelDType::fp64);
  EXPECT_EQ(m.axes, (std::vector<std::string>{"tp", "dtype"}));
  EXPECT_EQ(m.expansion, 4);
}

TEST(SweepMatrix, BaseAppliesToEveryCaseOverTheBuiltInDefaults) {
  const Matrix m = expand(R"({"axes": {"dp": [1, 2]}, "base": {"layers": 3}})");
  for (const SweepCase& c : m.cases) {
    EXPECT_EQ(c.config.layers, 3);
    EXPECT_EQ(c.config.hidden, RunConfig{}.hidden);
  }
}

TEST(SweepMatrix, ExcludeRemovesMatchingCasesAndIncludeAppends) {
  const Matrix m = expand(R"({"axes": {"tp": [1, 2], "dp": [1, 2]},
      "exclude": [{"tp": 2, "dp": 2}],
      "include": [{"dp": 4}, {"tp": 2, "layers": 3}]})");
  std::vector<std::string> ids;
  for (const SweepCase& c : m.cases) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"tp=1 dp=1", "tp=1 dp=2", "tp=2 dp=1", "tp=1 dp=4",
                                           "tp=2 dp=1 layers=3"}));
  EXPECT_EQ(m.excluded, 1);
  EXPECT_EQ(m.expansion, 6);
  EXPECT_EQ(m.cases.back().index, 5);  // indices count the excluded case too
  EXPECT_EQ(m.cases.back().config.layers, 3);
}

TEST(SweepMatrix, InvalidCombinationsAreCountedWithTheirReasonNotErrors) {
  const Matrix m = expand(R"({"axes": {"tp": [1, 2], "sp": [false, true]}})");
  ASSERT_EQ(m.cases.size(), 3u);
  ASSERT_EQ(m.invalid.size(), 1u);
  EXPECT_EQ(m.invalid[0].id, "tp=1 sp=true");
  EXPECT_EQ(m.invalid[0].index, 1);
  EXPECT_EQ(m.invalid[0].reason, "\"sp\" = true: sequence parallelism requires tp > 1 (tp = 1)");
}

TEST(SweepMatrix, BadMatrixFilesNameTheKey) {
  EXPECT_EQ(error_of(R"({"axes": {"tpp": [1]}})"),
            "m.json: \"axes\".\"tpp\": unknown key \"tpp\" (every key of a scenario file is "
            "allowed: docs/cli.md)");
  EXPECT_EQ(error_of(R"({"axes": {"tp": ["two"]}})"),
            "m.json: \"axes\".\"tp\"[0]: \"tp\" = \"two\": expected an integer");
  EXPECT_EQ(error_of(R"({"axes": {"tp": []}})"),
            "m.json: \"axes\".\"tp\" = []: expected a non-empty list of values");
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1, 1]}})"),
            "m.json: \"axes\".\"tp\"[1] = 1: the value appears twice");
  EXPECT_EQ(error_of(R"({"axis": {"tp": [1]}})"),
            "m.json: \"axis\": unknown key (a matrix has axes, base, exclude, include, about)");
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1]}, "base": {"dtype": "fp16"}})")
                .rfind("m.json: \"base\".\"dtype\": \"dtype\" = \"fp16\"", 0),
            0u);
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1]}, "exclude": [{"dp": 1}]})"),
            "m.json: \"exclude\"[0].\"dp\": not an axis of the matrix (exclude names axes)");
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1]}, "base": {"report": "r.json"}})"),
            "m.json: \"base\".\"report\": \"report\" cannot be set in a sweep (each case's "
            "report goes into results.jsonl)");
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1]}, "base": {"tp": 2}})"),
            "m.json: \"base\".\"tp\": also an axis (set it in one place)");
  EXPECT_EQ(error_of(R"({"axes": {"tp": [1, 2]}, "include": [{"tp": 2}]})"),
            "m.json: case \"tp=2\" appears twice (an include repeats it)");
  EXPECT_EQ(error_of("[1]"), "m.json: expected a JSON object with \"axes\", got array");
}

TEST(SweepMatrix, ReadsAFileAndNamesItInErrors) {
  const Matrix m = read_matrix_file(PARITY_SOURCE_DIR "/scenarios/sweeps/cpu-64.json");
  EXPECT_EQ(m.cases.size(), 64u);
  EXPECT_EQ(m.excluded, 32);
  EXPECT_EQ(m.invalid.size(), 32u);
  try {
    read_matrix_file(PARITY_SOURCE_DIR "/tests/sweep/bad-key.json");
    FAIL() << "no error";
  } catch (const MatrixError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-key.json: \"axes\".\"tpp\": unknown key"),
              std::string::npos)
        << e.what();
  }
}

TEST(SweepMatrix, DigestIgnoresWhitespaceButNotAxisOrder) {
  const std::string a = matrix_digest(ojson::parse(R"({"axes": {"tp": [1, 2], "dp": [1]}})"));
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a, matrix_digest(ojson::parse("{\"axes\":{\"tp\":[1,2],\n \"dp\":[1]}}")));
  EXPECT_NE(a, matrix_digest(ojson::parse(R"({"axes": {"dp": [1], "tp": [1, 2]}})")));
}

}  // namespace
}  // namespace parity::sweep
