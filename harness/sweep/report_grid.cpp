#include "harness/sweep/report_grid.h"

#include <algorithm>
#include <map>
#include <set>

#include "harness/sweep/html_text.h"
#include "harness/sweep/matrix.h"

namespace parity::sweep {

namespace {

using html::escape;

// The matrix file's axes object (summary.json's "matrix" is the file as read;
// folders written before it held the file kept the axes object itself).
const nlohmann::json& matrix_axes(const nlohmann::json& summary) {
  const nlohmann::json& matrix = html::at(summary, "matrix");
  const nlohmann::json& axes = html::at(matrix, "axes");
  return axes.is_object() ? axes : matrix;
}

// One cell: a case that ran, or a combination that did not.
struct GridItem {
  nlohmann::json assignment;
  std::string id, outcome, title, link;
};

// Orders an axis's values as the matrix lists them, else by first appearance.
class ValueOrder {
 public:
  ValueOrder(const nlohmann::json& axes_object, const std::vector<std::string>& axes) {
    for (const std::string& a : axes)
      for (const nlohmann::json& v : html::array_at(axes_object, a.c_str())) rank(a, v.dump());
  }
  int rank(const std::string& axis, const std::string& value) {
    auto& m = ranks_[axis];
    return m.try_emplace(value, static_cast<int>(m.size())).first->second;
  }

 private:
  std::map<std::string, std::map<std::string, int>> ranks_;
};

struct Header {
  std::vector<int> order;
  std::vector<std::string> parts;  // "tp=2", "dp=1"
  bool operator<(const Header& o) const { return order < o.order; }
};

Header header_of(const nlohmann::json& assignment, const std::vector<std::string>& axes,
                 ValueOrder& order) {
  Header h;
  for (const std::string& a : axes) {
    const nlohmann::json v =
        assignment.is_object() && assignment.contains(a) ? assignment[a] : nlohmann::json("-");
    h.order.push_back(order.rank(a, v.dump()));
    h.parts.push_back(a + "=" + html::value_text(v));
  }
  return h;
}

// The header's text, one axis per line (a column is as wide as its widest axis=value).
std::string header_html(const Header& h) {
  if (h.parts.empty()) return "(all)";
  std::string s;
  for (const std::string& p : h.parts) s += (s.empty() ? "" : "<br>") + escape(p);
  return s;
}

// Estimated pixel widths at the page's table font (.85em sans-serif, bold
// cells), generous so that a part fits; CSS lets a header break anywhere
// should an estimate still fall short.
constexpr double kCharPx = 8, kCellPx = 62, kPaddingPx = 16;
// What the parts may fill: a 1280-pixel window less the page's margins.
constexpr double kGridBudgetPx = 1120;

double header_px(const Header& h) {
  std::size_t longest = 5;  // "(all)"
  for (const std::string& p : h.parts) longest = std::max(longest, p.size());
  return kCharPx * longest + kPaddingPx;
}

bool matches(const nlohmann::json& assignment, const nlohmann::json& entry) {
  if (!entry.is_object() || entry.empty()) return false;
  for (const auto& [k, v] : entry.items())
    if (!assignment.contains(k) || assignment[k] != v) return false;
  return true;
}

// The cartesian product's combinations the records do not hold: excluded by the
// matrix, or not run (yet). Nothing when the matrix is not known or too large
// to list.
void add_unrun(const nlohmann::json& summary, const std::vector<std::string>& axes,
               std::vector<GridItem>& items) {
  const nlohmann::json& axes_object = matrix_axes(summary);
  std::size_t total = axes.empty() ? 0 : 1;
  for (const std::string& a : axes) {
    const std::size_t n = html::array_at(axes_object, a.c_str()).size();
    total = n == 0 || total > 100000 ? 0 : total * n;
  }
  if (total == 0 || total > 100000) return;
  const nlohmann::json& excludes = html::array_at(html::at(summary, "matrix"), "exclude");
  std::set<std::string> held;
  for (const GridItem& item : items) held.insert(item.assignment.dump());
  std::vector<std::size_t> at(axes.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    nlohmann::ordered_json ordered;
    for (std::size_t a = 0; a < axes.size(); ++a)
      ordered[axes[a]] = html::array_at(axes_object, axes[a].c_str())[at[a]];
    const nlohmann::json assignment = nlohmann::json::parse(ordered.dump());
    bool excluded = false;
    for (const nlohmann::json& e : excludes) excluded = excluded || matches(assignment, e);
    if (excluded || held.count(assignment.dump()) == 0) {
      GridItem item;
      item.assignment = assignment;
      item.id = case_id(ordered);
      item.outcome = excluded ? "excluded" : "not_run";
      item.title = item.id + (excluded ? ": excluded by the matrix's \"exclude\""
                                       : ": not run (another shard, or the sweep stopped first)");
      items.push_back(std::move(item));
    }
    for (std::size_t a = axes.size(); a-- > 0;) {  // last axis fastest, as the matrix expands
      if (++at[a] < html::array_at(axes_object, axes[a].c_str()).size()) break;
      at[a] = 0;
    }
  }
}

// Consecutive runs of columns, each as wide as `cap` at most (a wider column alone).
std::vector<std::vector<const Header*>> fill(const std::vector<const Header*>& columns,
                                             const std::vector<double>& widths, double cap) {
  std::vector<std::vector<const Header*>> parts(1);
  double used = 0;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (!parts.back().empty() && used + widths[i] > cap) {
      parts.emplace_back();
      used = 0;
    }
    parts.back().push_back(columns[i]);
    used += widths[i];
  }
  return parts;
}

// The columns in the fewest parts that fit the budget, made as even as that
// count allows (the narrowest cap that still needs no more parts): 6 columns
// that do not fit as one part are two of 3, not one of 5 and one of 1.
std::vector<std::vector<const Header*>> split_columns(const std::vector<const Header*>& columns,
                                                      const std::vector<double>& widths,
                                                      double row_header_px) {
  const double budget = std::max(kGridBudgetPx - row_header_px, 0.0);
  const std::size_t fewest = fill(columns, widths, budget).size();
  double low = 0, high = budget;
  for (int i = 0; i < 40; ++i) {
    const double mid = (low + high) / 2;
    (fill(columns, widths, mid).size() <= fewest ? high : low) = mid;
  }
  return fill(columns, widths, high);
}

}  // namespace

const char* grid_cell_text(const std::string& outcome) {
  if (outcome == "passed") return "pass";
  if (outcome == "property_failed") return "FAIL";
  if (outcome == "rank_failure") return "rank";
  if (outcome == "bad_report") return "report";
  if (outcome == "invalid") return "invalid";
  if (outcome == "excluded") return "excl";
  if (outcome == "not_run") return "not run";
  return "?";
}

std::vector<std::string> grid_axes(const nlohmann::json& summary,
                                   const std::vector<GridCase>& cases) {
  std::vector<std::string> axes;
  for (const nlohmann::json& a : html::array_at(summary, "axes"))
    if (a.is_string()) axes.push_back(a.get<std::string>());
  if (axes.empty() && !cases.empty() && cases.front().assignment.is_object())
    for (const auto& [k, v] : cases.front().assignment.items()) axes.push_back(k);
  return axes;
}

std::string render_grid(const nlohmann::json& summary, const std::vector<GridCase>& cases) {
  const std::vector<std::string> axes = grid_axes(summary, cases);
  std::vector<GridItem> items;
  items.reserve(cases.size());
  for (const GridCase& c : cases)
    items.push_back({c.assignment, c.id, c.outcome,
                     "case " + std::to_string(c.index) + ": " + c.id + ": " + c.outcome, c.link});
  for (const nlohmann::json& v : html::array_at(summary, "invalid"))
    items.push_back({html::at(v, "assignment"), html::string_at(v, "case", "?"), "invalid",
                     html::string_at(v, "case", "?") + ": invalid: " + html::string_at(v, "reason"),
                     ""});
  add_unrun(summary, axes, items);

  // Rows: the first half of the axes; columns: the rest.
  const std::size_t split = axes.size() / 2;
  const std::vector<std::string> row_axes(axes.begin(), axes.begin() + split);
  const std::vector<std::string> col_axes(axes.begin() + split, axes.end());
  ValueOrder order(matrix_axes(summary), axes);
  std::map<Header, std::map<Header, std::vector<const GridItem*>>> cells;
  std::map<Header, std::size_t> columns;             // -> the most cells one of its rows holds
  double row_header_px = kCharPx * 14 + kPaddingPx;  // "rows \ columns"
  for (const GridItem& item : items) {
    const Header r = header_of(item.assignment, row_axes, order);
    const Header c = header_of(item.assignment, col_axes, order);
    auto& cell = cells[r][c];
    cell.push_back(&item);
    columns[c] = std::max(columns[c], cell.size());
    std::size_t row_text = 0;
    for (const std::string& p : r.parts) row_text += p.size() + 1;
    row_header_px = std::max(row_header_px, kCharPx * row_text + kPaddingPx);
  }

  // The parts: the fewest that fit the budget, as even in their column counts as fits.
  std::vector<const Header*> order_of_columns;
  std::vector<double> widths;
  for (const auto& [c, most] : columns) {
    order_of_columns.push_back(&c);
    widths.push_back(std::max(header_px(c), kCellPx * std::min<std::size_t>(most, 2)));
  }
  const std::vector<std::vector<const Header*>> parts =
      split_columns(order_of_columns, widths, row_header_px);

  std::string s = "<div class=\"grid-parts\">\n";
  std::size_t first = 1;
  for (const std::vector<const Header*>& part : parts) {
    s += "<table class=\"grid\">\n";
    if (parts.size() > 1)
      s += "<caption>columns " + std::to_string(first) + "&ndash;" +
           std::to_string(first + part.size() - 1) + " of " + std::to_string(columns.size()) +
           "</caption>\n";
    first += part.size();
    s += "<tr><th class=\"corner\">" + escape(row_axes.empty() ? "(all)" : "rows \\ columns") +
         "</th>";
    for (const Header* c : part) s += "<th class=\"column\">" + header_html(*c) + "</th>";
    s += "</tr>\n";
    for (const auto& [r, row] : cells) {
      std::string text;
      for (const std::string& p : r.parts) text += (text.empty() ? "" : " ") + p;
      s += "<tr><th class=\"row\">" + escape(text.empty() ? "(all)" : text) + "</th>";
      for (const Header* c : part) {
        s += "<td>";
        const auto it = row.find(*c);
        if (it != row.end())
          for (const GridItem* item : it->second) {
            const std::string tag = item->link.empty() ? "span" : "a";
            s += "<" + tag + " class=\"case-cell outcome-" + item->outcome + "\" data-case=\"" +
                 escape(item->id) + "\" title=\"" + escape(item->title) + "\"" +
                 (item->link.empty() ? "" : " href=\"#" + item->link + "\"") + ">" +
                 grid_cell_text(item->outcome) + "</" + tag + ">";
          }
        s += "</td>";
      }
      s += "</tr>\n";
    }
    s += "</table>\n";
  }
  s += "</div>\n<p class=\"legend\">";
  const std::vector<std::pair<const char*, const char*>> legend = {
      {"passed", "passed"},
      {"property_failed", "a property failed"},
      {"rank_failure", "a rank failed (threw, hung or crashed)"},
      {"bad_report", "its report could not be read"},
      {"invalid", "invalid combination, not run"},
      {"excluded", "excluded by the matrix's \"exclude\""},
      {"not_run", "not run: another shard, or the sweep stopped first"}};
  for (const auto& [o, meaning] : legend) {
    if (std::string(o) == "not_run" &&
        std::none_of(items.begin(), items.end(),
                     [](const GridItem& i) { return i.outcome == "not_run"; }))
      continue;
    s += "<span class=\"legend-entry\" data-outcome=\"" + std::string(o) +
         "\"><span class=\"legend-cell case-cell outcome-" + o + "\">" + grid_cell_text(o) +
         "</span> " + escape(meaning) + "</span> ";
  }
  return s + "</p>\n";
}

}  // namespace parity::sweep
