// loom: one binary, one subcommand per task (train, sample, bench, schedule, convert, config-reference).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/tensor/malloc_reuse.hpp"
#include "loom/train/config.hpp"

namespace loom::apps {

void reject_unknown_flags(const CLI::App& sub) {
  const std::vector<std::string> extra = sub.remaining();
  if (extra.empty()) return;
  std::vector<std::string> known;
  for (const CLI::Option* o : sub.get_options())
    for (const std::string& name : o->get_lnames()) known.push_back("--" + name);
  const std::string hint = train::did_you_mean(extra.front(), known);
  fail("unknown argument '", extra.front(), "' for 'loom ", sub.get_name(), "'",
       hint.empty() ? "" : " (did you mean '" + hint + "'?)", "; see 'loom ", sub.get_name(), " --help'");
}

void reject_empty_numbers(const CLI::App& sub) {
  for (const CLI::Option* o : sub.get_options()) {
    const std::string type = o->get_type_name();
    if (type != "INT" && type != "UINT" && type != "FLOAT") continue;
    for (const std::string& value : o->results())
      check(!value.empty(), o->get_name(), ": expected a number, got ''");
  }
  for (const CLI::App* parsed : sub.get_subcommands()) reject_empty_numbers(*parsed);
}

// CLI11 says only "A subcommand is required" for a misspelt command (`loom trian`, `loom bench
// gem`): name it, and the nearest one.
void reject_unknown_commands(const CLI::App& app, int argc, char** argv, int i) {
  const std::vector<const CLI::App*> subs = app.get_subcommands({});
  if (subs.empty() || i >= argc || argv[i][0] == '-') return;
  std::vector<std::string> names;
  for (const CLI::App* sub : subs) {
    if (sub->get_name() == argv[i]) return reject_unknown_commands(*sub, argc, argv, i + 1);
    names.push_back(sub->get_name());
  }
  std::string command = "loom";
  for (int k = 1; k <= i; ++k) command += std::string(" ") + argv[k];
  const std::string hint = train::did_you_mean(argv[i], names);
  fail("unknown command '", command, "'", hint.empty() ? "" : " (did you mean '" + hint + "'?)", "; see '",
       command.substr(0, command.rfind(' ')), " --help'");
}

Failure failure_of(const std::exception& e) {
  // The machine's answer to an input (a path it cannot use, memory it does not have) is the
  // user's to act on, like a loom::Error; filesystem errors name their paths.
  if (dynamic_cast<const Error*>(&e) != nullptr || dynamic_cast<const std::filesystem::filesystem_error*>(&e) != nullptr)
    return {1, "error", e.what()};
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return {1, "error", "out of memory (" + std::string(e.what()) + "); make the model, batch or data smaller"};
  return {2, "internal error", e.what()};
}

}  // namespace loom::apps

int main(int argc, char** argv) {
  loom::reuse_freed_memory();  // before any buffer: what a step frees, the next one reuses
  CLI::App app{"Loom: train GPT-style models with data, tensor and pipeline parallelism on MPI.\n"
               "Example: loom train --config configs/shakespeare.toml --steps 200"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, loom::apps::Runner>> runners;
  auto add = [&](const char* name, const char* help, loom::apps::Runner (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->allow_extras();
    runners.emplace_back(sub, make(*sub));
  };
  add("train", "train a model (example: loom train --config configs/shakespeare.toml)", loom::apps::add_train_command);
  add("sample", "generate text from a checkpoint (example: loom sample --checkpoint runs/shakespeare --prompt ROMEO:)",
      loom::apps::add_sample_command);
  add("generate",
      "generate for requests read line by line, new ones joining the batch as others finish "
      "(example: loom generate --checkpoint runs/shakespeare < prompts.txt)",
      loom::apps::add_generate_command);
  add("bench", "measure kernels and training speed (example: loom bench gemm)", loom::apps::add_bench_command);
  add("schedule",
      "check and draw a pipeline schedule (example: loom schedule --pp 4 --micro-batches 8 --svg 1f1b.svg)",
      loom::apps::add_schedule_command);
  add("verify",
      "train a tiny model serially and under a layout and compare them step by step "
      "(example: mpirun -np 8 loom verify --dp 2 --pp 2 --tp 2 --zero 1)",
      loom::apps::add_verify_command);
  add("plan", "rank layouts of a model on a cluster by predicted memory and step time "
      "(example: loom plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --global-batch 1536)",
      loom::apps::add_plan_command);
  add("report", "write a run's report.html: loss, throughput, memory per rank, pipeline, communication "
      "(example: loom report runs/shakespeare)",
      loom::apps::add_report_command);
  add("convert",
      "re-shard a checkpoint: to one file, or to a sharded checkpoint for another layout "
      "(example: mpirun -np 4 loom convert --from runs/a --to runs/b --dp 2 --tp 2)",
      loom::apps::add_convert_command);
  add("eval", "perplexity of a checkpoint on a text file (example: loom eval --checkpoint runs/gpt2 --data test.txt)",
      loom::apps::add_eval_command);
  add("tokenize", "write a text's token ids to a token file that loom train --data reads memory-mapped "
      "(example: loom tokenize --tokenizer gpt2 --tokenizer-dir gpt2 corpus.txt corpus.tok)",
      loom::apps::add_tokenize_command);
  add("config-reference", "print the configuration reference as Markdown (example: loom config-reference > docs/configuration.md)", loom::apps::add_config_reference_command);
  try {
    loom::apps::reject_unknown_commands(app, argc, argv, 1);
    app.parse(argc, argv);
    for (auto& [sub, run] : runners)
      if (sub->parsed()) {
        loom::apps::reject_unknown_flags(*sub);
        loom::apps::reject_empty_numbers(*sub);
        const int status = run();
        // What a command printed is its result (generated text, a perplexity, a table): stdout
        // that could not take it (a full disk, /dev/full, a closed pipe) fails the command.
        errno = 0;
        if (std::fflush(stdout) != 0 || std::ferror(stdout))
          loom::fail("cannot write the output: ", errno != 0 ? std::strerror(errno) : "write error");
        return status;
      }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help is a "parse error" that succeeds
    // Worded as Loom's own errors (CLI11's codes and "Run with --help" are not Loom's).
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string command = parsed.empty() ? "loom" : "loom " + parsed.front()->get_name();
    std::string message = e.what();
    if (!message.empty()) message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
    std::fprintf(stderr, "loom: error: %s; see '%s --help'\n", message.c_str(), command.c_str());
    return 1;
  } catch (const std::exception& e) {
    const loom::apps::Failure f = loom::apps::failure_of(e);
    std::fprintf(stderr, "loom: %s: %s\n", f.kind.c_str(), f.message.c_str());
    return f.status;
  }
  return 0;
}
