// svg_line_chart: scaled polylines with round-numbered axes.
#include "svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace trainrun::report {
namespace {

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
  // A flat range gets some height, so a constant series draws as a line mid-chart.
  void widen() {
    if (hi > lo) return;
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
};

// About five ticks at 1, 2 or 5 times a power of ten.
double tick_step(const Range& r) {
  const double raw = (r.hi - r.lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-9) v = 0;  // no "-0" or "1e-17" where zero is meant
  if (std::abs(v) >= 1e6) return fmt::format("{:.3g}", v);
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, decimals);
}

struct Frame {
  double left, top, width, height;
  Range x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * width; }
  double py(double v) const { return top + (y.hi - v) / (y.hi - y.lo) * height; }
};

std::string axes(const Frame& f, const ChartAxes& a) {
  std::string s;
  const double ys = tick_step(f.y),
               xs = a.x_integers ? std::max(1.0, tick_step(f.x)) : tick_step(f.x);
  if (!(ys > 0 && xs > 0 && std::isfinite(ys) && std::isfinite(xs))) return s;  // inf ranges
  for (double v = std::ceil(f.y.lo / ys) * ys; v <= f.y.hi + ys * 1e-9; v += ys)
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" class=\"grid\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        f.left, f.py(v), f.left + f.width, f.left - 6, f.py(v) + 4, tick_label(v, ys));
  for (double v = std::ceil(f.x.lo / xs) * xs; v <= f.x.hi + xs * 1e-9; v += xs)
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        f.px(v), f.top, f.top + f.height, f.top + f.height + 16, tick_label(v, xs));
  s += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"frame\"/>\n",
      f.left, f.top, f.width, f.height);
  if (!a.x_title.empty())
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n",
        f.left + f.width / 2, f.top + f.height + 32, html_escape(a.x_title));
  if (!a.y_title.empty())
    s += fmt::format(
        "<text x=\"14\" y=\"{0:.1f}\" text-anchor=\"middle\" class=\"axis\" "
        "transform=\"rotate(-90 14 {0:.1f})\">{1}</text>\n",
        f.top + f.height / 2, html_escape(a.y_title));
  for (const auto& [x, label] : a.marks) {
    if (!(x >= f.x.lo && x <= f.x.hi)) continue;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"mark\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" class=\"mark\">{5}</text>\n",
        f.px(x), f.top, f.top + f.height, f.px(x) + 3, f.top + 12, html_escape(label));
  }
  return s;
}

std::string line(const Frame& f, const Series& s) {
  std::string out, pts;
  size_t n = 0;  // points in the current piece
  double lx = 0, ly = 0;
  auto dot = [&](double x, double y) {
    out +=
        fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x, y, s.color);
  };
  auto close = [&] {
    if (n > 1)
      out +=
          fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                      pts, s.color);
    else if (n == 1 && !s.markers)
      dot(lx, ly);  // a point between two gaps: no line to draw, so a dot
    pts.clear();
    n = 0;
  };
  for (const auto& [x, y] : s.points) {
    if (!std::isfinite(x) || !std::isfinite(y)) {
      close();
      continue;
    }
    lx = f.px(x);
    ly = f.py(y);
    pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", lx, ly);
    ++n;
    if (s.markers) dot(lx, ly);
  }
  close();
  return out;
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A legend's width at about 8 px a character, as drawn below.
double legend_width(const std::vector<Series>& series) {
  double w = 0;
  for (const Series& s : series) w += 12.0 + 8.0 * static_cast<double>(s.name.size() + 2);
  return w;
}

std::string svg_line_chart(const std::string& title, const std::vector<Series>& series,
                           const ChartAxes& a, int width, int height) {
  Frame f{72, 30, width - 72.0 - 16, height - 30.0 - 48, {}, {}};
  // A legend too wide for the title row (many series, as `compare` draws) is a column of rows
  // below the chart, which grows to hold it.
  const bool rows = series.size() > 1 && legend_width(series) > f.width - 120;
  if (rows) height += 16 * static_cast<int>(series.size()) + 4;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) {
        f.x.add(x);
        f.y.add(y);
      }
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<text x=\"{3}\" y=\"18\" class=\"title\">{2}</text>\n",
      width, height, html_escape(title), f.left);
  if (f.x.empty())
    return svg +
           fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</svg>\n",
                       width / 2, height / 2);
  f.x.widen();
  f.y.widen();
  const double pad = (f.y.hi - f.y.lo) * 0.05;
  f.y.lo -= pad;
  f.y.hi += pad;
  svg += axes(f, a);
  for (const Series& s : series) svg += line(f, s);
  if (rows) {
    double y = f.top + f.height + 48 + 12;
    for (const Series& s : series) {
      svg += fmt::format(
          "<text x=\"{0:.1f}\" y=\"{1:.1f}\"><tspan style=\"fill:{2}\">&#9632;</tspan> "
          "{3}</text>\n",
          f.left, y, s.color, html_escape(s.name));
      y += 16;
    }
  } else if (series.size() > 1) {
    double x = f.left + f.width;
    for (auto it = series.rbegin(); it != series.rend(); ++it) {
      svg += fmt::format(
          "<text x=\"{0:.1f}\" y=\"18\" text-anchor=\"end\"><tspan "
          "style=\"fill:{1}\">&#9632;</tspan> "
          "{2}</text>\n",
          x, it->color, html_escape(it->name));
      x -= 12.0 + 8.0 * static_cast<double>(it->name.size() + 2);
    }
  }
  return svg + "</svg>\n";
}

}  // namespace trainrun::report
