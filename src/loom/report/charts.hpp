// Inline SVG charts for the run report: line charts (loss, throughput over steps) and
// stacked bars (memory by category, time by kind). Self-contained markup, no scripts, so
// the report opens from a file anywhere; every number is laid out on "nice" 1-2-5 ticks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/report/downsample.hpp"

namespace loom::report {

// "<" ">" "&" '"' as entities.
std::string escape_xml(const std::string& text);

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
};
// Each series drawn through at most kMaxLinePoints of its points (see downsample), so the
// page of a million-step run stays small.
constexpr size_t kMaxLinePoints = 2000;
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series);

struct Segment {
  std::string name;  // the legend's key: same name, same colour
  double value;
};
struct Bar {
  std::string label;
  std::vector<Segment> segments;  // stacked from the axis outwards
};
// Horizontal stacked bars, one per row, drawn in value / scale `unit` (bytes / 2^20 "MiB").
// colors[i] paints the i-th distinct segment name (in order of first appearance).
std::string stacked_bars(const std::string& title, const std::vector<Bar>& bars, const std::vector<std::string>& colors,
                         const std::string& unit, double scale);

}  // namespace loom::report
