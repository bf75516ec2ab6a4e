#pragma once
// Reads a JSONL trace (docs/trace-format.md) back into records, keeping each
// record's line number so that a reader (parity diff) can point at it.
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/trace/trace_recorder.h"

namespace parity {

struct TraceLine {
  TraceRecord record;
  int line = 0;  // 1-based line in the file
};

// A trace that cannot be read: what() is one line, "FILE:LINE: rule" (or
// "FILE: why" when the file itself cannot be read).
class TraceReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every non-empty line must be one trace record; throws TraceReadError.
std::vector<TraceLine> read_trace_text(const std::string& text, const std::string& name);
std::vector<TraceLine> read_trace_file(const std::string& path);

}  // namespace parity
