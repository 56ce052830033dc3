// What the run report draws from metrics.jsonl, read in memory that does not grow with the
// file: each line (train and val loss, tokens/s, MFU, a mixture of experts' shares and
// imbalance) downsampled to at most kMaxLinePoints as it is read, and the sums the report
// quotes. Records of a resumed run's abandoned attempt are left out (see read_metrics).
#pragma once

#include <string>
#include <vector>

#include "loom/report/downsample.hpp"
#include "loom/report/metrics_record.hpp"

namespace loom::report {

struct Metrics {
  using Line = std::vector<Point>;  // (step, value) in step order, file order among equal steps
  Line train_loss, val_loss, tokens_per_s, mfu_percent;
  std::vector<Line> expert_share;  // the first kMaxExpertLines experts' shares of the routed assignments, in %
  Line moe_imbalance;              // max / mean expert load, at each step that logged moe_load
  Line moe_rank_imbalance;         // the busiest expert rank's rows over the mean's, where logged
  size_t moe_experts = 0;          // experts in the widest record; 0: a dense model
  double comm_s = 0, comm_exposed_s = 0;  // data-parallel gradient reduction, summed over the train records
  // Train and val records a later start record abandoned (left out), and their least and
  // greatest step.
  size_t abandoned = 0;
  double abandoned_first = 0, abandoned_last = 0;
  bool last_line_cut = false;  // the file ended inside a record (being written, or cut by a kill): left out
};

// The lines of the metrics.jsonl at path; loom::Error naming the file (and line) when it is
// missing or a line is not a record as the trainer writes it. A record {"kind": "start",
// "step": S} (a run starting, S = 0 or the checkpoint it resumed from) drops the train and val
// records before it whose step is above S: the attempt that logged them was killed or
// abandoned, and the run logs those steps again. A last line without its '\n' that is not
// JSON is no record (a live run writing it, or a kill cutting it short): left out.
// The file is read twice, never held: last line first, which finds each record's fate (the
// start records after it) and each line's count of points and first and last step; then first
// line first, each line downsampled as its points come. A line whose steps run backwards (a
// file without start records, or edited by hand) is held whole and sorted by step instead.
Metrics read_metrics(const std::string& path);

}  // namespace loom::report
