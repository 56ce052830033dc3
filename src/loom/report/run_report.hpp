// `loom report RUN_DIR`: one self-contained HTML page (inline CSS and SVG, no scripts, no
// fonts or anything else from the network) about a run, from the files the run wrote:
// metrics.jsonl (loss, tokens/s, MFU), memory.json (per-rank memory and the formulas) and
// trace.json (pipeline timeline, communication vs computation). Every section has an id
// (loss, throughput, memory, pipeline, comm) and says in one line when its data is missing.
#pragma once

#include <string>

namespace loom::report {

// The page for the run in run_dir; loom::Error when run_dir has no metrics.jsonl.
std::string run_report_html(const std::string& run_dir);

// Writes run_dir/report.html and returns its path.
std::string write_run_report(const std::string& run_dir);

}  // namespace loom::report
