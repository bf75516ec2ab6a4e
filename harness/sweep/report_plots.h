#pragma once
// The SVG plots of the sweep report page (report_html.h): inline SVG, drawn
// from results.jsonl's case objects, so the page needs no script to show them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::sweep {

// One <figure class="metric-plot" data-metric="M"> per metric with a nonzero
// error in some case, in a <div class="plots">: x = the cases in results order,
// numbered by their index (0-based, as DIR/failures/ names them), y = each
// (metric, label)'s max_rel (log scale; an exact 0 sits on the bottom edge, an
// infinite or NaN error on the top), both axes labelled, with each case's metric
// tolerance (checks::tolerances_for of its scenario) as a line. The metrics
// whose error is 0 in every case (e.g. NaN and Inf counts) are one line,
// <p id="folded-metrics">. A paragraph saying so when no case compared a metric.
std::string render_metric_plots(const std::vector<nlohmann::json>& cases);

// <svg id="time-chart">: one bar per case (numbered by its index), its check's
// seconds, with the axes labelled.
std::string render_time_chart(const std::vector<nlohmann::json>& cases);

}  // namespace parity::sweep
