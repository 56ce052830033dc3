#include "loom/report/charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace loom::report {

namespace {

constexpr double kWidth = 560, kHeight = 300, kLeft = 64, kRight = 16, kTop = 34, kBottom = 46;

// Ticks drawn at most on an axis: a range far below its values' precision (1e17 to 1e17 + 16)
// never advances `v += step`, an infinite one never ends.
constexpr int kMaxTicks = 50;

// Tick spacing of 1, 2 or 5 times a power of ten giving about `ticks` ticks over range.
double nice_step(double range, int ticks) {
  const double raw = std::max(range, 1e-12) / ticks;
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * base >= raw) return f * base;
  return 10 * base;
}

std::string number(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1, y0 -= 1;
  const double ys = nice_step(y1 - y0, 5), xs = nice_step(x1 - x0, 6);
  y0 = std::floor(y0 / ys) * ys, y1 = std::ceil(y1 / ys) * ys;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << kWidth << "\" height=\"" << kHeight
     << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" role=\"img\">\n"
     << "<text x=\"" << kLeft << "\" y=\"20\" class=\"title\">" << escape_xml(title) << "</text>\n";
  for (int i = 0; i <= kMaxTicks; ++i) {
    const double y = y0 + i * ys;
    if (!(y <= y1 + ys * 1e-6)) break;
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
       << "\" class=\"grid\"/><text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4 << "\" class=\"tick\" text-anchor=\"end\">"
       << number(y) << "</text>\n";
  }
  for (int i = 0; i <= kMaxTicks; ++i) {
    const double x = std::ceil(x0 / xs) * xs + i * xs;
    if (!(x <= x1 + xs * 1e-6)) break;
    os << "<text x=\"" << px(x) << "\" y=\"" << kTop + ph + 16 << "\" class=\"tick\" text-anchor=\"middle\">" << number(x)
       << "</text>\n";
  }
  os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << kTop + ph << "\" y2=\"" << kTop + ph
     << "\" class=\"axis\"/>\n"
     << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 8 << "\" class=\"label\" text-anchor=\"middle\">"
     << escape_xml(x_label) << "</text>\n"
     << "<text transform=\"translate(14," << kTop + ph / 2 << ") rotate(-90)\" class=\"label\" text-anchor=\"middle\">"
     << escape_xml(y_label) << "</text>\n";
  double legend_x = kLeft + pw;
  for (auto it = series.rbegin(); it != series.rend(); ++it) {
    const Series& s = *it;
    legend_x -= 18 + 7.0 * static_cast<double>(s.name.size()) + 14;
    os << "<rect x=\"" << legend_x << "\" y=\"11\" width=\"12\" height=\"4\" fill=\"" << s.color << "\"/><text x=\""
       << legend_x + 16 << "\" y=\"17\" class=\"tick\">" << escape_xml(s.name) << "</text>\n";
    if (s.points.empty()) continue;
    os << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
    for (auto [x, y] : downsample(s.points, kMaxLinePoints)) os << px(x) << "," << py(y) << " ";
    os << "\"/>\n";
    if (s.points.size() <= 40)
      for (auto [x, y] : s.points)
        os << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\" fill=\"" << s.color << "\"/>\n";
  }
  os << "</svg>\n";
  return os.str();
}

std::string stacked_bars(const std::string& title, const std::vector<Bar>& bars, const std::vector<std::string>& colors,
                         const std::string& unit, double scale) {
  std::vector<std::string> names;  // legend order
  double most = 0;
  for (const Bar& b : bars) {
    double total = 0;
    for (const Segment& s : b.segments) {
      total += s.value;
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
    }
    most = std::max(most, total);
  }
  auto color = [&](const std::string& name) {
    const size_t i = static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    return colors.empty() ? std::string("#888") : colors[i % colors.size()];
  };
  const double left = 250, right = 70, row = 26, width = 900;
  const double pw = width - left - right, top = 54;
  const double height = top + row * static_cast<double>(bars.size()) + 34;
  const double step = nice_step(most / scale, 5), axis_max = std::max(step, std::ceil(most / scale / step) * step);
  auto px = [&](double v) { return left + v / scale / axis_max * pw; };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << width << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << width << " " << height << "\" role=\"img\">\n"
     << "<text x=\"" << left << "\" y=\"20\" class=\"title\">" << escape_xml(title) << "</text>\n";
  double lx = left;
  for (const std::string& n : names) {
    os << "<rect x=\"" << lx << "\" y=\"30\" width=\"12\" height=\"12\" fill=\"" << color(n) << "\"/><text x=\"" << lx + 16
       << "\" y=\"40\" class=\"tick\">" << escape_xml(n) << "</text>\n";
    lx += 30 + 7.0 * static_cast<double>(n.size());
  }
  for (int i = 0; i <= kMaxTicks; ++i) {
    const double v = i * step;
    if (!(v <= axis_max + step * 1e-6)) break;
    os << "<line x1=\"" << px(v * scale) << "\" x2=\"" << px(v * scale) << "\" y1=\"" << top - 4 << "\" y2=\""
       << height - 30 << "\" class=\"grid\"/><text x=\"" << px(v * scale) << "\" y=\"" << height - 16
       << "\" class=\"tick\" text-anchor=\"middle\">" << number(v) << "</text>\n";
  }
  os << "<text x=\"" << left + pw << "\" y=\"" << height - 2 << "\" class=\"label\" text-anchor=\"end\">"
     << escape_xml(unit) << "</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + row * static_cast<double>(i);
    os << "<text x=\"" << left - 8 << "\" y=\"" << y + row * 0.62 << "\" class=\"tick\" text-anchor=\"end\">"
       << escape_xml(bars[i].label) << "</text>\n";
    double at = 0;
    for (const Segment& s : bars[i].segments) {
      if (s.value <= 0) continue;
      os << "<rect x=\"" << px(at) << "\" y=\"" << y + 3 << "\" width=\"" << px(at + s.value) - px(at) << "\" height=\""
         << row - 6 << "\" fill=\"" << color(s.name) << "\"><title>" << escape_xml(s.name) << ": "
         << number(s.value / scale) << " " << escape_xml(unit) << "</title></rect>\n";
      at += s.value;
    }
    os << "<text x=\"" << px(at) + 6 << "\" y=\"" << y + row * 0.62 << "\" class=\"tick\">" << number(at / scale)
       << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace loom::report
