// harness/sweep/results.h: appended lines read back; a torn last line is
// skipped and reported, and cut off before the next append; a corrupt line in
// the middle is an error.
#include "harness/sweep/results.h"

#include <gtest/gtest.h>

#include "harness/base/files.h"

namespace parity::sweep {
namespace {

TEST(SweepResults, AppendedLinesReadBackInOrder) {
  files::TempDir dir("sweep-results");
  const std::string path = dir.path() + "/results.jsonl";
  EXPECT_TRUE(read_results(path).records.empty());  // missing: no records
  {
    ResultsFile f(path);
    f.append({{"case", "a"}, {"index", 0}});
    f.append({{"case", "b"}, {"index", 1}});
  }
  const ResultsRead r = read_results(path);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1].at("case"), "b");
  EXPECT_EQ(r.warning, "");
}

TEST(SweepResults, ATornLastLineIsSkippedAndCutBeforeTheNextAppend) {
  files::TempDir dir("sweep-results");
  const std::string path = dir.path() + "/results.jsonl";
  files::write_atomically(path, "{\"case\": \"a\"}\n{\"case\": \"b\", \"ind");
  ResultsRead r = read_results(path);
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.warning, path + ": skipped a torn last line (18 bytes)");
  {
    ResultsFile f(path);
    f.append({{"case", "c"}});
  }
  r = read_results(path);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1].at("case"), "c");
  EXPECT_EQ(r.warning, "");
  EXPECT_EQ(*files::read(path), "{\"case\": \"a\"}\n{\"case\":\"c\"}\n");
}

TEST(SweepResults, AnUnparsableLastLineWithItsNewlineIsSkippedToo) {
  files::TempDir dir("sweep-results");
  const std::string path = dir.path() + "/results.jsonl";
  files::write_atomically(path, "{\"case\": \"a\"}\n{\"ca\n");
  const ResultsRead r = read_results(path);
  EXPECT_EQ(r.records.size(), 1u);
  EXPECT_NE(r.warning.find("skipped a torn last line (4 bytes)"), std::string::npos) << r.warning;
}

TEST(SweepResults, ACorruptLineInTheMiddleIsAnError) {
  files::TempDir dir("sweep-results");
  const std::string path = dir.path() + "/results.jsonl";
  files::write_atomically(path, "{\"case\": \"a\"}\nnot json\n{\"case\": \"b\"}\n");
  try {
    read_results(path);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": line 2 is not a JSON object (the file was edited or corrupted)");
  }
}

}  // namespace
}  // namespace parity::sweep
