// parity_render_sweep_report RESULTS.jsonl SUMMARY.json OUT.html [TITLE]: the
// sweep report page (harness/sweep/report_html.h) from a result folder's files,
// without running a sweep (the browser test renders the fixture with it). The
// failure files are read from RESULTS.jsonl's folder.
// Exit 0 written, 2 bad input (one line naming the file and the reason).
#include <iostream>
#include <sstream>

#include "harness/base/files.h"
#include "harness/sweep/report_html.h"

namespace {

int bad(const std::string& line) {
  std::cerr << "parity_render_sweep_report: " << line << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5)
    return bad("usage: parity_render_sweep_report RESULTS.jsonl SUMMARY.json OUT.html [TITLE]");
  const std::string results_path = argv[1], summary_path = argv[2], out_path = argv[3];
  parity::sweep::SweepReportInput input;
  input.title = argc == 5 ? argv[4] : "parity sweep " + results_path;
  const std::optional<std::string> results = parity::files::read(results_path);
  if (!results) return bad(results_path + ": cannot read");
  const std::optional<std::string> summary = parity::files::read(summary_path);
  if (!summary) return bad(summary_path + ": cannot read");
  try {
    input.summary = nlohmann::json::parse(*summary);
  } catch (const nlohmann::json::parse_error& e) {
    return bad(summary_path + ": invalid JSON at byte " + std::to_string(e.byte));
  }
  std::istringstream lines(*results);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    try {
      input.cases.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      // A killed sweep may leave a torn last line (no newline): skip it, say so.
      if (lines.eof()) {
        std::cerr << "parity_render_sweep_report: " << results_path << ":" << number
                  << ": torn last line skipped\n";
        break;
      }
      return bad(results_path + ":" + std::to_string(number) + ": invalid JSON at byte " +
                 std::to_string(e.byte));
    }
  }
  const std::size_t slash = results_path.rfind('/');
  parity::sweep::read_failure_files(
      slash == std::string::npos ? "." : results_path.substr(0, slash), input);
  std::string error;
  if (!parity::files::try_write_atomically(out_path, parity::sweep::render_sweep_report(input),
                                           &error))
    return bad(out_path + ": " + error);
  std::cout << out_path << ": " << input.cases.size() << " case(s)\n";
  return 0;
}
