// The `loom` subcommands. Each registers its options on a CLI11 subcommand and returns a
// runner; main() runs the chosen one and turns loom::Error into a message and exit code 1.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace loom::apps {

using Runner = std::function<int()>;

Runner add_train_command(CLI::App& app);
Runner add_sample_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_config_reference_command(CLI::App& app);
Runner add_schedule_command(CLI::App& app);
// `loom bench comm` (in bench_comm_command.cpp); sets runner for when it is chosen.
void add_comm_bench(CLI::App& bench, Runner& runner);

// Throws loom::Error for arguments left over after parsing, suggesting the closest flag.
void reject_unknown_flags(const CLI::App& sub);

}  // namespace loom::apps
