// `loom schedule`: a pipeline schedule as data (DESIGN decision 4). Builds GPipe, 1F1B or
// interleaved 1F1B (or loads a custom one from a file), runs the pre-flight check, prints each
// rank's actions and the bubble of a unit-cost simulation next to the theory, and draws the
// timeline as an SVG. A bad custom schedule exits non-zero with its first conflict named.
#include <cstdio>
#include <fstream>
#include <memory>
#include <tuple>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/parallel/pipeline/schedule_check.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/pipeline/timeline.hpp"
#include "loom/parallel/pipeline/timeline_svg.hpp"

namespace loom::apps {

namespace {

namespace pipe = parallel::pipeline;

struct ScheduleArgs {
  int pp = 4;
  int micro_batches = 8;
  std::string schedule = "1f1b";
  int chunks = 1;
  std::string file;
  std::string svg;
  bool transfers = false;
};

pipe::Schedule load_schedule_file(const ScheduleArgs& a, const CLI::App& sub) {
  const pipe::Schedule s = pipe::read_schedule_file(a.file);
  // Sizes given on the command line must agree with the file's.
  for (const auto& [flag, given, found] :
       {std::tuple{"--pp", a.pp, s.pp}, std::tuple{"--micro-batches", a.micro_batches, s.micro_batches},
        std::tuple{"--chunks", a.chunks, s.chunks}})
    check(sub.count(flag) == 0 || given == found, flag, " ", given, " disagrees with ", a.file, ", which has ", found);
  return s;
}

// A built schedule is checked, simulated and printed in memory, a forward and a backward per
// (rank, micro-batch, chunk): bounded above real pipelines (a few hundred ranks by a few
// thousand micro-batches). At the bound, 256 x 4096 takes 45 s and 0.9 GB; 100000 x 100000
// was killed at 24 GB.
constexpr int64_t kMaxScheduleSlots = int64_t{1} << 20;

// The sizes of a schedule to build: --chunks as `loom train` takes it, and a bounded size
// (sizes below 1 are the builders' to refuse).
void check_sizes(const ScheduleArgs& a) {
  check(a.schedule != "interleaved" || a.chunks >= 2, "--schedule interleaved needs --chunks >= 2 model chunks per rank, got ",
        a.chunks);
  if (a.pp < 1 || a.micro_batches < 1 || a.chunks < 1) return;
  const int64_t per_chunk = int64_t{a.pp} * a.micro_batches;  // below 2^62: no overflow
  check(per_chunk <= kMaxScheduleSlots && per_chunk * a.chunks <= kMaxScheduleSlots, "--pp (", a.pp,
        ") x --micro-batches (", a.micro_batches, ") x --chunks (", a.chunks, ") is above ", kMaxScheduleSlots,
        " forward-backward pairs, the most loom schedule builds");
}

int run_schedule(const ScheduleArgs& a, const CLI::App& sub) {
  const bool custom = !a.file.empty();
  if (!custom) check_sizes(a);
  const pipe::Schedule s =
      custom ? load_schedule_file(a, sub)
             : pipe::build_schedule(pipe::parse_schedule_kind(a.schedule), a.pp, a.micro_batches, a.chunks);
  const std::string name = custom ? "custom schedule " + a.file : a.schedule + " schedule";
  try {
    pipe::check_schedule(s);
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
  const pipe::Timeline t = pipe::simulate(s);
  std::printf("# %s; each rank's actions in order (F3 forward / B3 backward of micro-batch 3, F3.1 its chunk 1%s)\n",
              name.c_str(), a.transfers ? "; SA/RA send/receive an activation to>/from< a rank, SG/RG a gradient" : "");
  std::printf("%s", pipe::format_schedule(a.transfers ? s : pipe::without_transfers(s)).c_str());
  const double theory = pipe::theoretical_bubble(s.pp, s.micro_batches, s.chunks);
  const double theory_share = theory / (1.0 + theory);  // (p-1)/(m v + p-1)
  std::printf("\nsimulated with forward = 1, backward = 2 time units, transfers free: makespan %g\n", t.makespan());
  const char* mv = s.chunks > 1 ? "m v" : "m";
  std::printf("bubble / compute time: %.4f   theory (p-1)/%s = %d/%d = %.4f\n", t.bubble_over_compute(),
              s.chunks > 1 ? "(m v)" : "m", s.pp - 1, s.micro_batches * s.chunks, theory);
  std::printf("bubble share of the timeline: %.4f   theory (p-1)/(%s + p-1) = %.4f\n", t.bubble_fraction(), mv,
              theory_share);
  std::printf("peak %s held per rank:",
              s.chunks > 1 ? "(micro-batch, chunk) activations" : "micro-batches of activations");
  for (int peak : t.peak_activations) std::printf(" %d", peak);
  std::printf("\n");
  if (!a.svg.empty()) {
    std::ofstream out(a.svg);
    check(out.good(), "cannot write '", a.svg, "'");
    char title[160];
    std::snprintf(title, sizeof title, "%s: pp=%d, micro-batches=%d, chunks=%d; bubble %.3f of compute (theory %.3f)",
                  name.c_str(), s.pp, s.micro_batches, s.chunks, t.bubble_over_compute(), theory);
    out << pipe::timeline_svg(t, title);
    std::printf("wrote %s\n", a.svg.c_str());
  }
  return 0;
}

}  // namespace

Runner add_schedule_command(CLI::App& sub) {
  auto args = std::make_shared<ScheduleArgs>();
  sub.add_option("--pp", args->pp, "pipeline ranks p");
  sub.add_option("--micro-batches", args->micro_batches, "micro-batches m per step");
  sub.add_option("--schedule", args->schedule, "gpipe, 1f1b or interleaved");
  sub.add_option("--chunks", args->chunks, "model chunks v per rank (interleaved)");
  sub.add_option("--file", args->file, "check a custom schedule: one line per rank, like 'F0 F1 B0 B1'");
  sub.add_option("--svg", args->svg, "write the simulated timeline as an SVG");
  sub.add_flag("--transfers", args->transfers, "also print the sends and receives");
  return [args, &sub]() { return run_schedule(*args, sub); };
}

}  // namespace loom::apps
