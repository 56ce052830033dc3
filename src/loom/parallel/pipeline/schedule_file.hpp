// A custom pipeline schedule from a text file (format_schedule's form, one line per rank):
// the one reader behind `loom schedule --file` and `loom train --schedule-file`, the way
// torchtitan trains a schedule CSV. A file that is trained is checked whole, against the
// run's pp, micro-batches and chunks too, before the first step, so a bad one is named on
// every rank instead of hanging the job.
#pragma once

#include <string>

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

// Reads and parses the file; throws loom::Error naming the path (and the line) when it cannot.
Schedule read_schedule_file(const std::string& path);

// read_schedule_file, then the file's sizes against the run's ("schedule file F has pp=2,
// but the run has pp=4") and check_schedule; every error names the path.
Schedule schedule_from_file(const std::string& path, int pp, int micro_batches, int chunks);

// The schedule a run trains: schedule_from_file(file, ...) when file is not empty, else the
// builder called name (gpipe, 1f1b, interleaved), checked as well.
Schedule checked_schedule(const std::string& name, const std::string& file, int pp, int micro_batches, int chunks);

}  // namespace loom::parallel::pipeline
