// Internal to src/obs: a line chart as an inline <svg> element, for the self-contained HTML
// report (no script, no external resource: it opens from disk in any browser).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainrun::report {

struct Series {
  std::string name;
  std::string color;                              // any SVG colour, "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (step, value); non-finite values: gaps
  bool markers = false;                           // a dot on every point (sparse series)
};

// What a chart says beyond its series.
struct ChartAxes {
  std::string x_title = "step";
  std::string y_title;     // with its unit: "loss (nats)"
  bool x_integers = true;  // steps: ticks on whole numbers only, never 1.5
  // Vertical marks at an x, labelled ("restart", "rollback"): where the curve was interrupted.
  std::vector<std::pair<double, std::string>> marks;
};

// Axes with round ticks over the finite points and their titles, one line per series (broken
// where a value is missing), the marks, a legend when there are several series. "no data" when
// no series has a finite point.
std::string svg_line_chart(const std::string& title, const std::vector<Series>& series,
                           const ChartAxes& axes = {}, int width = 560, int height = 300);

// The CSS the charts' classes need, for the <style> of a page that holds them.
inline constexpr const char* kSvgChartStyle = R"CSS(
svg { background: #fafafa; border: 1px solid #ddd; }
svg text { font: 11px sans-serif; fill: #333; }
svg .title { font: bold 13px sans-serif; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .frame { fill: none; stroke: #999; stroke-width: 1; }
svg .axis { font: 12px sans-serif; fill: #444; }
svg line.mark { stroke: #888; stroke-width: 1; stroke-dasharray: 4 3; }
svg text.mark { font: 11px sans-serif; fill: #666; }
)CSS";

// Text safe inside HTML and SVG elements and attribute values.
std::string html_escape(std::string_view s);

}  // namespace trainrun::report
