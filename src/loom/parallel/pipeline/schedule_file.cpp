#include "loom/parallel/pipeline/schedule_file.hpp"

#include <fstream>
#include <sstream>
#include <tuple>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_check.hpp"

namespace loom::parallel::pipeline {

Schedule read_schedule_file(const std::string& path) {
  data::check_input_file(path, "schedule file", data::kMaxConfigBytes);  // a FIFO would block, a directory read as empty
  std::ifstream in(path);
  check(in.good(), "cannot open schedule file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_schedule(text.str());
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

Schedule schedule_from_file(const std::string& path, int pp, int micro_batches, int chunks) {
  const Schedule s = read_schedule_file(path);
  for (const auto& [key, run, file] : {std::tuple{"pp", pp, s.pp}, std::tuple{"micro_batches", micro_batches, s.micro_batches},
                                       std::tuple{"chunks", chunks, s.chunks}})
    check(run == file, "schedule file ", path, " has ", key, "=", file, ", but the run has ", key, "=", run);
  try {
    check_schedule(s);
  } catch (const Error& e) {
    fail("schedule file ", path, ": ", e.what());
  }
  return s;
}

Schedule checked_schedule(const std::string& name, const std::string& file, int pp, int micro_batches, int chunks) {
  if (!file.empty()) return schedule_from_file(file, pp, micro_batches, chunks);
  Schedule s = build_schedule(parse_schedule_kind(name), pp, micro_batches, chunks);
  check_schedule(s);
  return s;
}

}  // namespace loom::parallel::pipeline
