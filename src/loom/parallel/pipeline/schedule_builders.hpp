// The pipeline schedules by name, as the CLI and the config choose them: gpipe, 1f1b and
// interleaved (one builder per file: gpipe.hpp, one_f_one_b.hpp, interleaved_1f1b.hpp).
#pragma once

#include <string>

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

// "gpipe", "1f1b" or "interleaved"; throws loom::Error listing them otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_kind_name(ScheduleKind kind);

// Throws loom::Error when chunks != 1 for a schedule without interleaving.
Schedule build_schedule(ScheduleKind kind, int pp, int micro_batches, int chunks = 1);

// The papers' bubble time over ideal compute time: (p - 1)/(m v) (v = 1 without interleaving).
double theoretical_bubble(int pp, int micro_batches, int chunks = 1);

}  // namespace loom::parallel::pipeline
