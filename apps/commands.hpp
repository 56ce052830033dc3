// The `loom` subcommands. Each registers its options on a CLI11 subcommand and returns a
// runner; main() runs the chosen one and turns an exception into a message and exit code (failure_of).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/config.hpp"
#include "loom/train/sampler.hpp"

namespace loom::apps {

using Runner = std::function<int()>;

Runner add_train_command(CLI::App& app);
Runner add_sample_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_config_reference_command(CLI::App& app);
Runner add_schedule_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_plan_command(CLI::App& app);
Runner add_report_command(CLI::App& app);
Runner add_convert_command(CLI::App& app);
Runner add_eval_command(CLI::App& app);      // eval_command.cpp
Runner add_tokenize_command(CLI::App& app);  // tokenize_command.cpp
// `loom bench comm` (in bench_comm_command.cpp); sets runner for when it is chosen.
void add_comm_bench(CLI::App& bench, Runner& runner);
// `loom bench generate` (in bench_generate_command.cpp); sets runner for when it is chosen.
void add_generate_bench(CLI::App& bench, Runner& runner);

// `loom sample` and `loom generate` share: the sampling flags (--temperature, --top-k,
// --top-p) and a finished request as one JSON line {"id", "text", "tokens", "finish"}.
void add_sampling_flags(CLI::App& sub, train::SampleOptions& options);
// `loom sample`, `generate` and `eval`: --precision fp32|bf16 (bf16: the weights read in bf16,
// half the bytes of a decode step); use_precision sets it for the process.
void add_precision_flag(CLI::App& sub, std::string& precision);
// --seed of sample and generate: an integer 0 .. 2^64 - 1 (CLI11 alone wraps "-1" around and
// clamps what overflows, both silently).
void add_seed_flag(CLI::App& sub, uint64_t& seed, const std::string& help);
void use_precision(const std::string& precision);
std::string generated_json(const train::Generated& g);
// `loom bench spmm`: sets runner and returns the subcommand.
CLI::App* add_spmm_bench(CLI::App& bench, Runner& runner);
// `loom bench graph-balance` (the 3D GCN's non-zeros per rank on every grid): the same.
CLI::App* add_graph_balance_bench(CLI::App& bench, Runner& runner);

// Every configuration key as a flag (`n_layer` -> --n-layer) plus --config FILE.
struct ConfigFlags {
  std::string config_path;
  std::map<std::string, std::string> values;  // key -> text, only the flags given
  std::map<std::string, CLI::Option*> options;
  // defaults, then the TOML file, then the flags given; validated.
  train::TrainConfig resolve(train::TrainConfig defaults) const;
  bool given(const std::string& key) const;
};
std::shared_ptr<ConfigFlags> add_config_flags(CLI::App& sub, const train::TrainConfig& defaults);

// Started by mpirun/srun (their environment variables are set).
bool launched_by_mpi();
// Runs body on the MPI world, whose waits are watched with startup_timeout_s (the run's
// comm_timeout) from its first collective; a loom::Error on any rank aborts the whole job
// with its message, except one every rank raised together (loom::AgreedError): then each rank
// returns its exit status, the job ending without an abort. 0 when body returned.
int run_on_world(const std::function<void(comm::ProcessGroup&)>& body, double startup_timeout_s);
// run_on_world's answer to an exception on this rank, for a body that catches it itself:
// prints it and returns the exit status when every rank raised it together, else ends the
// job (MPI_Abort) without returning. A body catches what its run raises while the objects
// the run's collectives write into are alive: unwinding first would free buffers an
// unfinished collective or a dead peer's transfer still writes into, and the memory
// corruption that follows hides the error.
int end_rank_on_error(const std::exception& e, comm::ProcessGroup& world);

// What main (and run_on_world, per rank) prints for an exception and the exit status: 1 for
// a loom::Error and for what the machine refused (a filesystem error naming its path, out of
// memory), 2 for an internal error (a bug).
struct Failure {
  int status;
  std::string kind;  // "error" or "internal error"
  std::string message;
};
Failure failure_of(const std::exception& e);

// Throws loom::Error for arguments left over after parsing, suggesting the closest flag.
void reject_unknown_flags(const CLI::App& sub);
// Throws loom::Error for a number option given an empty value, which CLI11 reads as 0
// (`loom sample --temperature ""` sampled greedily); sub and the subcommands parsed under it.
void reject_empty_numbers(const CLI::App& sub);
// A command that is not one of app's subcommands (argv[i] onwards), named with the nearest one.
void reject_unknown_commands(const CLI::App& app, int argc, char** argv, int i);

}  // namespace loom::apps
