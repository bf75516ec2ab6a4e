#include "harness/trace/trace_reader.h"

#include <nlohmann/json.hpp>

#include "harness/base/files.h"

namespace parity {

std::vector<TraceLine> read_trace_text(const std::string& text, const std::string& name) {
  std::vector<TraceLine> out;
  std::size_t begin = 0;
  int line = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string body = text.substr(begin, end - begin);
    begin = end + 1;
    if (body.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(line) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(body);
    } catch (const nlohmann::json::exception&) {
      throw TraceReadError(where +
                           "not a JSON object (each line of a trace is one JSON record, "
                           "docs/trace-format.md)");
    }
    if (!j.is_object())
      throw TraceReadError(where +
                           "not a JSON object (each line of a trace is one JSON record, "
                           "docs/trace-format.md)");
    try {
      out.push_back({trace_record_from_json(j), line});
    } catch (const nlohmann::json::exception& e) {
      // e.g. "[json.exception.out_of_range.403] key 'sum' not found": keep the part after "] ".
      std::string what = e.what();
      const std::size_t cut = what.find("] ");
      if (cut != std::string::npos) what = what.substr(cut + 2);
      throw TraceReadError(where + "not a trace record: " + what +
                           " (the fields of docs/trace-format.md)");
    } catch (const std::exception& e) {
      throw TraceReadError(where + "not a trace record: " + e.what());
    }
  }
  return out;
}

std::vector<TraceLine> read_trace_file(const std::string& path) {
  const std::optional<std::string> text = files::read(path);
  if (!text) throw TraceReadError(path + ": cannot read the trace file (missing or unreadable)");
  return read_trace_text(*text, path);
}

}  // namespace parity
