#include "loom/parallel/pipeline/schedule_builders.hpp"

#include "loom/error.hpp"
#include "loom/parallel/pipeline/gpipe.hpp"
#include "loom/parallel/pipeline/interleaved_1f1b.hpp"
#include "loom/parallel/pipeline/one_f_one_b.hpp"

namespace loom::parallel::pipeline {

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    if (schedule_kind_name(kind) == name) return kind;
  fail("unknown pipeline schedule '", name, "' (expected gpipe, 1f1b or interleaved)");
}

std::string schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved:
      return "interleaved";
  }
  return "?";
}

Schedule build_schedule(ScheduleKind kind, int pp, int micro_batches, int chunks) {
  check(kind == ScheduleKind::Interleaved || chunks == 1, "the ", schedule_kind_name(kind),
        " schedule has one model chunk per rank, got chunks(", chunks, "); use the interleaved schedule");
  switch (kind) {
    case ScheduleKind::GPipe:
      return gpipe(pp, micro_batches);
    case ScheduleKind::OneFOneB:
      return one_f_one_b(pp, micro_batches);
    case ScheduleKind::Interleaved:
      return interleaved_1f1b(pp, micro_batches, chunks);
  }
  return {};
}

double theoretical_bubble(int pp, int micro_batches, int chunks) {
  return static_cast<double>(pp - 1) / (static_cast<double>(micro_batches) * chunks);
}

}  // namespace loom::parallel::pipeline
