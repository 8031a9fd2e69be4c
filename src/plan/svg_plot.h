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

// Axes with round ticks over the finite points, one line per series (broken where a value is
// missing), a legend when there are several. "no data" when no series has a finite point.
std::string svg_line_chart(const std::string& title, const std::vector<Series>& series,
                           int width = 560, int height = 300);

// Text safe inside HTML and SVG elements and attribute values.
std::string html_escape(std::string_view s);

}  // namespace trainrun::report
