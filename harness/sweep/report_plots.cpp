#include "harness/sweep/report_plots.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "harness/checks/tolerance.h"
#include "harness/config/run_config.h"
#include "harness/sweep/html_text.h"

namespace parity::sweep {

namespace {

using html::escape;
using html::number;

struct Point {
  std::size_t column = 0;  // the case's position on the x axis
  std::string label;
  double error = 0;  // max_rel; +inf for "inf" and null (NaN)
  bool ok = true;
  bool zero = false;  // value and reference both 0 (a NaN or Inf count of a healthy run)
};

struct MetricSeries {
  std::vector<Point> points;
};

double error_of(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  return INFINITY;  // "inf", "-inf", null (NaN): no finite error
}

const nlohmann::json* report_of(const nlohmann::json& c) {
  const auto it = c.find("report");
  return it != c.end() && it->is_object() ? &*it : nullptr;
}

// The metric tolerance parity check applied to this case (tolerance.h), if its
// scenario can be read.
std::optional<double> tolerance_of(const nlohmann::json& c) {
  const nlohmann::json* report = report_of(c);
  if (!report || !report->contains("scenario")) return std::nullopt;
  try {
    return checks::tolerances_for(run_config_from_json(report->at("scenario"))).metric;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string case_id(const nlohmann::json& c) { return html::string_at(c, "case", "?"); }

// The case's number as its failure file has it: its index in the matrix's
// expansion (0-based), else its position.
std::string case_number(const nlohmann::json& c, std::size_t position) {
  const nlohmann::json& v = html::at(c, "index");
  return v.is_number_integer() ? std::to_string(v.get<long long>()) : std::to_string(position);
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The vertical log axis: whole decades covering every finite positive value.
struct LogAxis {
  int low = -12, high = 0;
  double top = 20, bottom = 200;
  double y(double v) const {
    const double t = (std::log10(v) - low) / (high - low);
    return bottom - t * (bottom - top);
  }
};

LogAxis axis_for(const std::vector<double>& values) {
  LogAxis a;
  bool any = false;
  double lo = 0, hi = 0;
  for (const double v : values) {
    if (!(v > 0) || std::isinf(v)) continue;
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
  if (any) {
    a.low = static_cast<int>(std::floor(std::log10(lo))) - 1;
    a.high = static_cast<int>(std::ceil(std::log10(hi))) + 1;
  }
  return a;
}

std::string metric_plot(const std::string& metric, const MetricSeries& series,
                        const std::vector<const nlohmann::json*>& cases,
                        const std::vector<std::optional<double>>& tolerances) {
  // Up to 22 pixels per case, narrower where that keeps the plot within a 1280-pixel window.
  const double left = 60, widest_px = 1180;
  const double step =
      cases.empty() ? 22 : std::clamp((widest_px - left - 20) / cases.size(), 1.0, 22.0);
  const double width = std::max(360.0, left + step * cases.size() + 20);
  std::vector<double> values;
  for (const Point& p : series.points) values.push_back(p.error);
  for (const auto& t : tolerances)
    if (t) values.push_back(*t);
  const LogAxis axis = axis_for(values);
  const double x0 = left;
  auto cx = [&](std::size_t column) { return x0 + step * (column + 0.5); };

  std::string s = "<figure class=\"metric-plot\" data-metric=\"" + escape(metric) + "\">\n";
  s += "<figcaption>" + escape(metric) +
       ": max rel error per case and label (log scale); line: the case's tolerance</figcaption>\n";
  s += "<svg class=\"plot\" width=\"" + fmt(width) + "\" height=\"250\" viewBox=\"0 0 " +
       fmt(width) + " 250\" role=\"img\">\n";
  s += "<title>" + escape(metric) + "</title>\n";
  s += "<text class=\"axis-label y-label\" transform=\"translate(12 " +
       fmt((axis.top + axis.bottom) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">max rel error</text>\n";
  s += "<text class=\"axis-label x-label\" x=\"" + fmt(x0 + step * cases.size() / 2) +
       "\" y=\"244\" text-anchor=\"middle\">case (index, as in failures/)</text>\n";
  // A label every `every` decades: at most about 10 labels, so they do not overlap.
  const int every = (axis.high - axis.low + 9) / 10;
  for (int d = axis.low; d <= axis.high; ++d) {
    const double y = axis.y(std::pow(10.0, d));
    s += "<line class=\"grid-line\" x1=\"" + fmt(x0) + "\" x2=\"" + fmt(width - 10) + "\" y1=\"" +
         fmt(y) + "\" y2=\"" + fmt(y) + "\"/>";
    if ((d - axis.low) % every == 0)
      s += "<text class=\"tick\" x=\"" + fmt(x0 - 4) + "\" y=\"" + fmt(y + 4) +
           "\" text-anchor=\"end\">1e" + std::to_string(d) + "</text>";
    s += "\n";
  }
  // The tolerance, one step per case.
  std::string path;
  for (std::size_t i = 0; i < tolerances.size(); ++i) {
    if (!tolerances[i]) continue;
    const double y = axis.y(*tolerances[i]);
    path += "M" + fmt(x0 + step * i) + " " + fmt(y) + " H" + fmt(x0 + step * (i + 1)) + " ";
  }
  if (!path.empty())
    s += "<path class=\"tolerance\" d=\"" + path + "\"><title>tolerance</title></path>\n";
  for (const Point& p : series.points) {
    double y;
    std::string kind = p.ok ? "ok" : "fail";
    if (std::isinf(p.error)) {
      y = axis.top - 8;
      kind += " infinite";
    } else if (p.error <= 0) {
      y = axis.bottom + 8;
      kind += " exact";
    } else {
      y = axis.y(p.error);
    }
    const auto& tol = tolerances[p.column];
    s += "<circle class=\"point " + kind + "\" cx=\"" + fmt(cx(p.column)) + "\" cy=\"" + fmt(y) +
         "\" r=\"3.5\"><title>" + escape(case_id(*cases[p.column])) + " | " + escape(p.label) +
         ": max rel " + number(p.error) + (tol ? " (tolerance " + number(*tol) + ")" : "") +
         "</title></circle>\n";
  }
  // A number every `every` cases, so that numbers of 3 or more digits do not overlap.
  std::size_t widest = 1;
  for (std::size_t i = 0; i < cases.size(); ++i)
    widest = std::max(widest, case_number(*cases[i], i).size());
  const std::size_t numbered_every =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil((6.5 * widest + 3) / step)));
  for (std::size_t i = 0; i < cases.size(); i += numbered_every)
    s += "<text class=\"tick case-number\" x=\"" + fmt(cx(i)) +
         "\" y=\"222\" text-anchor=\"middle\">" + case_number(*cases[i], i) + "<title>" +
         escape(case_id(*cases[i])) + "</title></text>\n";
  s += "</svg>\n</figure>\n";
  return s;
}

}  // namespace

std::string render_metric_plots(const std::vector<nlohmann::json>& cases) {
  std::map<std::string, MetricSeries> by_metric;
  std::vector<std::string> order;
  std::vector<const nlohmann::json*> columns;
  std::vector<std::optional<double>> tolerances;
  for (const nlohmann::json& c : cases) {
    const std::size_t column = columns.size();
    columns.push_back(&c);
    tolerances.push_back(tolerance_of(c));
    const nlohmann::json* report = report_of(c);
    if (!report || !report->contains("metrics") || !report->at("metrics").is_array()) continue;
    for (const nlohmann::json& m : report->at("metrics")) {
      const std::string metric = html::string_at(m, "metric", "?");
      auto [it, inserted] = by_metric.try_emplace(metric);
      if (inserted) order.push_back(metric);
      Point p;
      p.column = column;
      p.label = html::string_at(m, "label");
      p.error = error_of(html::at(m, "max_rel"));
      p.ok = html::at(m, "ok") != false;  // unknown: drawn as within
      p.zero = html::at(m, "value") == 0 && html::at(m, "reference") == 0;
      it->second.points.push_back(p);
    }
  }
  if (order.empty()) return "<p class=\"empty\">No case compared a metric: nothing to plot.</p>\n";
  // Metrics without an error in any case are one line, not a plot of points on its floor.
  std::vector<std::string> plotted;
  std::string folded;
  std::size_t folded_count = 0;
  for (const std::string& metric : order) {
    const std::vector<Point>& points = by_metric[metric].points;
    if (std::any_of(points.begin(), points.end(), [](const Point& p) { return p.error != 0; })) {
      plotted.push_back(metric);
      continue;
    }
    const bool zero =
        std::all_of(points.begin(), points.end(), [](const Point& p) { return p.zero; });
    folded += std::string(folded_count++ ? ", " : "") + "<code class=\"folded-metric\">" +
              escape(metric) + "</code>" + (zero ? " (0 everywhere)" : "");
  }
  std::string s;
  if (folded_count > 0)
    s += "<p id=\"folded-metrics\" data-count=\"" + std::to_string(folded_count) + "\">" +
         std::to_string(folded_count) + (folded_count == 1 ? " metric" : " metrics") +
         " with no error in any case (max rel error 0), not plotted: " + folded + "</p>\n";
  if (plotted.empty()) return s;
  s += "<p>x: the case's index (as DIR/failures/ numbers them; hover for its id); y: max rel "
       "error, log scale; blue: within tolerance, red: beyond; an exact 0 sits on the bottom "
       "edge, an infinite or NaN error on the top.</p>\n<div class=\"plots\">\n";
  for (const std::string& metric : plotted)
    s += metric_plot(metric, by_metric[metric], columns, tolerances);
  return s + "</div>\n";
}

std::string render_time_chart(const std::vector<nlohmann::json>& cases) {
  double longest = 0;
  for (const nlohmann::json& c : cases) longest = std::max(longest, html::number_at(c, "seconds"));
  const double bar_left = 50, bar_width = 500, row = 16;
  const double head = 18;  // the axis labels' row
  const double height = head + row * cases.size() + 10;
  std::string s = "<svg id=\"time-chart\" width=\"1200\" height=\"" + fmt(height) +
                  "\" viewBox=\"0 0 1200 " + fmt(height) +
                  "\" role=\"img\">\n"
                  "<title>seconds per case</title>\n"
                  "<text class=\"axis-label\" x=\"" +
                  fmt(bar_left - 4) +
                  "\" y=\"12\" text-anchor=\"end\">case</text><text class=\"axis-label\" x=\"" +
                  fmt(bar_left) + "\" y=\"12\">seconds (the longest bar: " + number(longest) +
                  " s)</text>\n";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const nlohmann::json& c = cases[i];
    const double seconds = html::number_at(c, "seconds");
    const double w = longest > 0 ? bar_width * seconds / longest : 0;
    const double y = head + 5 + row * i;
    const std::string outcome = html::string_at(c, "outcome", "unknown");
    s += "<g class=\"time-bar\"><text class=\"tick case-number\" x=\"" + fmt(bar_left - 4) +
         "\" y=\"" + fmt(y + 11) + "\" text-anchor=\"end\">" + case_number(c, i) +
         "</text><rect class=\"bar outcome-" + escape(outcome) + "\" x=\"" + fmt(bar_left) +
         "\" y=\"" + fmt(y) + "\" width=\"" + fmt(std::max(w, 1.0)) + "\" height=\"" +
         fmt(row - 3) + "\"/><text class=\"bar-label\" x=\"" +
         fmt(bar_left + std::max(w, 1.0) + 4) + "\" y=\"" + fmt(y + 11) + "\">" + number(seconds) +
         " s  " + escape(case_id(c)) + "</text></g>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace parity::sweep
