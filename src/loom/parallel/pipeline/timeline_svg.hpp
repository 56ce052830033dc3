// The pipeline picture of the papers as an SVG: one row per rank, time to the right, a box per
// forward (blue) and backward (orange) labelled with its micro-batch (".c" for chunk c > 0,
// later chunks in lighter shades); the bubbles are the empty space. Drawn from any Timeline:
// a schedule simulated with unit costs, or the executor's measured times.
#pragma once

#include <string>

#include "loom/parallel/pipeline/timeline.hpp"

namespace loom::parallel::pipeline {

// title: the first line of text above the rows (escaped here). max_plot_px: the widest the
// time axis may be drawn (boxes too narrow for their label go unlabelled).
std::string timeline_svg(const Timeline& t, const std::string& title, double max_plot_px = 2400.0);

}  // namespace loom::parallel::pipeline
