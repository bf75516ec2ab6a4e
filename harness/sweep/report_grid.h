#pragma once
// The pass/fail grid of the sweep report page (report_html.h): rows are the
// combinations of the first half of the matrix's axes, columns the rest. A cell
// per case that ran, per invalid combination, per combination the matrix's
// "exclude" left out and per one that has not run (another shard, or a stopped
// sweep), with a legend for each kind. Columns are split into parts that fit a
// 1280-pixel-wide window, each part a table of its own, so a 16-column grid
// wraps instead of scrolling sideways.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::sweep {

// A case that ran, as the grid shows it.
struct GridCase {
  nlohmann::json assignment;
  std::string id;
  std::string outcome;  // passed, property_failed, rank_failure, bad_report, unknown
  long long index = 0;  // as the failure files number cases (0-based)
  std::string link;     // the failure's anchor ("case-7"), "" when none
};

// The cell text of an outcome ("pass", "FAIL", "rank", ...).
const char* grid_cell_text(const std::string& outcome);

// The axes in the matrix's order: summary.json's "axes", else the first
// case's assignment keys.
std::vector<std::string> grid_axes(const nlohmann::json& summary,
                                   const std::vector<GridCase>& cases);

// <div class="grid-parts"> with one <table class="grid"> per part of the
// columns, then <p class="legend">. `summary` is summary.json's object.
std::string render_grid(const nlohmann::json& summary, const std::vector<GridCase>& cases);

}  // namespace parity::sweep
