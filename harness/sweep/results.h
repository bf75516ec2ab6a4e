#pragma once
// DIR/results.jsonl: one JSON object per finished case (docs/sweep.md). Each
// line is appended with one write() on an O_APPEND descriptor and fsync'd, so a
// killed sweep loses at most the cases still running; a line torn by a crash
// mid-write (or a full disk) can only be the last one, and the reader skips it
// and says so.
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::sweep {

inline constexpr const char* kCaseSchema = "parity-sweep-case";
inline constexpr int kCaseSchemaVersion = 1;

// Appends lines to DIR/results.jsonl; thread-safe (one line at a time).
class ResultsFile {
 public:
  // Opens (creates) the file for appending and cuts a torn last line off;
  // throws std::runtime_error naming the file.
  explicit ResultsFile(const std::string& path);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  // record.dump() + "\n" in one write, then fsync; throws std::runtime_error.
  void append(const nlohmann::ordered_json& record);

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
};

struct ResultsRead {
  std::vector<nlohmann::ordered_json> records;  // in file order
  // "DIR/results.jsonl: skipped a torn last line (N bytes)" when one was skipped.
  std::string warning;
};
// A missing file reads as no records. A line that is not a JSON object
// anywhere but at the end throws std::runtime_error naming the line (the file
// was edited or corrupted: not something a crash produces).
ResultsRead read_results(const std::string& path);

}  // namespace parity::sweep
