#include "loom/parallel/pipeline/timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace loom::parallel::pipeline {

namespace {

constexpr double kBoxPx = 28.0;  // width of the shortest forward or backward
constexpr double kRowPx = 30.0, kLeftPx = 70.0, kTopPx = 44.0;
// Tableau colours: chunk c takes shade c % 2 (dark, light).
constexpr const char* kForward[] = {"#4e79a7", "#a0cbe8"};
constexpr const char* kBackward[] = {"#f28e2b", "#ffbe7d"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten, at least min_step.
double nice_step(double min_step) {
  const double base = std::pow(10.0, std::floor(std::log10(min_step)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * base >= min_step) return f * base;
  return 10 * base;
}

}  // namespace

std::string timeline_svg(const Timeline& t, const std::string& title, double max_plot_px) {
  const double span = std::max(t.makespan(), 1e-12);
  double shortest = span;
  for (const auto& actions : t.ranks)
    for (const TimedAction& a : actions)
      if (!is_transfer(a.action.kind) && a.end > a.start) shortest = std::min(shortest, a.end - a.start);
  const double px = std::min(kBoxPx / shortest, max_plot_px / span);  // pixels per unit of time
  const double width = kLeftPx + span * px + 20, height = kTopPx + t.pp * kRowPx + 50;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << kLeftPx << "\" y=\"18\" font-size=\"13\">" << escape(title) << "</text>\n";
  for (int r = 0; r < t.pp; ++r) {
    const double y = kTopPx + r * kRowPx;
    os << "<text x=\"8\" y=\"" << y + kRowPx * 0.6 << "\">rank " << r << "</text>\n"
       << "<rect x=\"" << kLeftPx << "\" y=\"" << y + 2 << "\" width=\"" << span * px << "\" height=\"" << kRowPx - 4
       << "\" fill=\"none\" stroke=\"#ccc\"/>\n";
    for (const TimedAction& a : t.ranks[r]) {
      if (is_transfer(a.action.kind)) continue;
      const bool fwd = a.action.kind == ActionKind::Forward;
      const double x = kLeftPx + a.start * px, w = (a.end - a.start) * px;
      os << "<rect x=\"" << x << "\" y=\"" << y + 2 << "\" width=\"" << w << "\" height=\"" << kRowPx - 4
         << "\" fill=\"" << (fwd ? kForward : kBackward)[a.action.chunk % 2] << "\" stroke=\"white\"/>\n";
      std::string label = std::to_string(a.action.micro_batch);
      if (a.action.chunk > 0) {
        label += '.';
        label += std::to_string(a.action.chunk);
      }
      if (w >= 6.5 * static_cast<double>(label.size()))
        os << "<text x=\"" << x + w / 2 << "\" y=\"" << y + kRowPx * 0.6 << "\" text-anchor=\"middle\">" << label
           << "</text>\n";
    }
  }
  // Time axis, then the legend.
  const double axis_y = kTopPx + t.pp * kRowPx + 14, step = nice_step(50.0 / px);
  for (double tick = 0; tick <= span + 1e-9 * span; tick += step)
    os << "<text x=\"" << kLeftPx + tick * px << "\" y=\"" << axis_y << "\" text-anchor=\"middle\" fill=\"#666\">"
       << tick << "</text>\n";
  const double legend_y = axis_y + 14;
  os << "<rect x=\"" << kLeftPx << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\"" << kForward[0]
     << "\"/><text x=\"" << kLeftPx + 16 << "\" y=\"" << legend_y + 10 << "\">forward</text>\n"
     << "<rect x=\"" << kLeftPx + 80 << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\"" << kBackward[0]
     << "\"/><text x=\"" << kLeftPx + 96 << "\" y=\"" << legend_y + 10
     << "\">backward (label: micro-batch.chunk; empty space: bubble)</text>\n"
     << "</svg>\n";
  return os.str();
}

}  // namespace loom::parallel::pipeline
