// `loom generate`: continuous batching. Requests arrive one per line on stdin (or from a
// file), as `loom sample --prompts-file` reads them; up to --batch sequences are decoded
// together, a new request joins as soon as a sequence finishes, and each result is printed
// as one JSON line when it finishes ({"id", "text", "tokens", "finish"}; a refused request
// prints {"id", "error"} and the others go on). The id is the request's number (0-based;
// blank lines, empty or only spaces and tabs, are no request and get no answer).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.hpp"
#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/generation_requests.hpp"
#include "loom/train/inference_model.hpp"
#include "loom/train/sampler.hpp"

namespace loom::apps {

namespace {

struct GenerateArgs {
  std::string checkpoint;
  std::string input = "-";
  train::SampleOptions options;
  std::string stop;
  int64_t batch = 16;
  int threads = 0;
  std::string precision = "fp32";
};

// Lines read on a thread of their own, so the decode loop never waits on input while it
// has sequences to decode. The thread is detached (it may be blocked reading stdin when the
// loop ends on an error) and shares the queue's state, which outlives the queue.
class LineQueue {
 public:
  // path: a prompts file, or "-" for stdin.
  explicit LineQueue(const std::string& path) : state_(std::make_shared<State>()) {
    struct stat in {};
    check(path != "-" || ::fstat(STDIN_FILENO, &in) != 0 || !S_ISDIR(in.st_mode),
          "stdin is a directory: give the requests on stdin or with --input FILE");
    if (path != "-") {
      data::check_input_file(path, "prompts file");
      state_->file.open(path);
      check(state_->file.good(), "cannot open prompts file '", path, "'");
    }
    std::thread([state = state_, from_stdin = path == "-", path] {
      std::istream& in = from_stdin ? std::cin : state->file;
      std::string line;
      bool too_long = false;
      while (read_line(in, line, too_long)) {
        std::lock_guard lock(state->mutex);
        state->lines.push_back(too_long ? std::nullopt : std::optional<std::string>(std::move(line)));
        state->ready.notify_all();
      }
      std::lock_guard lock(state->mutex);
      if (in.bad()) state->error = "cannot read the requests from " + (from_stdin ? std::string("stdin") : "'" + path + "'") +
                                   ": " + std::strerror(errno);
      state->ended = true;
      state->ready.notify_all();
    }).detach();
  }
  // A line longer than this is no request (a prompt fits a model's context), and is not kept:
  // an endless line (stdin from /dev/zero) would otherwise grow without bound.
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;
  // The next line of `in` into `line`, its end of line dropped; too_long: it had more than
  // kMaxLineBytes (they were read and dropped). False at the end of the input.
  static bool read_line(std::istream& in, std::string& line, bool& too_long) {
    line.clear();
    too_long = false;
    bool any = false;
    for (int c; (c = in.get()) != std::char_traits<char>::eof();) {
      any = true;
      if (c == '\n') return true;
      if (line.size() < kMaxLineBytes)
        line.push_back(static_cast<char>(c));
      else
        too_long = true;
    }
    return any;
  }
  // The next line: waits for one when `wait`, else returns false at once when none is ready.
  // Also false once the input has ended and every line was taken.
  // line: empty when the line was longer than kMaxLineBytes.
  bool pop(std::optional<std::string>& line, bool wait) {
    std::unique_lock lock(state_->mutex);
    if (wait) state_->ready.wait(lock, [this] { return !state_->lines.empty() || state_->ended; });
    if (state_->lines.empty()) return false;
    line = std::move(state_->lines.front());
    state_->lines.pop_front();
    return true;
  }
  // Why the input ended early ("" when it simply ended).
  std::string error() {
    std::lock_guard lock(state_->mutex);
    return state_->error;
  }
  bool finished() {
    std::lock_guard lock(state_->mutex);
    return state_->ended && state_->lines.empty();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::optional<std::string>> lines;
    bool ended = false;
    std::string error;
    std::ifstream file;
  };
  std::shared_ptr<State> state_;
};

void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int run_generate(const GenerateArgs& a) {
  train::InferenceModel m = train::load_inference_model(a.checkpoint, nullptr, a.batch, {"loom generate", "--batch"});
  train::GenerationRequest defaults = a.options.request();
  defaults.stop = a.stop;
  MemoryScope scope(MemoryCategory::Activations);
  train::Generator generator(*m.model, *m.tokenizer, a.options.sampling(), a.batch);
  LineQueue queue(a.input);
  int64_t next_id = 0;
  bool refused = false;
  std::optional<std::string> read;
  while (!queue.finished() || !generator.empty()) {
    while (!generator.full() && queue.pop(read, /*wait=*/generator.empty())) {
      std::string line = read.value_or("");
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (read && train::is_blank_request_line(line)) continue;
      const int64_t id = next_id++;
      const std::string where = "request " + std::to_string(id);
      try {
        check(read.has_value(), where, ": a line longer than ", LineQueue::kMaxLineBytes >> 20,
              " MiB, more than any prompt a model's context holds");
        const train::GenerationRequest request = train::parse_request_line(line, defaults, id, where);
        try {  // the model's refusals (a prompt too long, a character it has no token for) name the request too
          generator.add(request, id);
        } catch (const Error& e) {
          fail(where, ": ", e.what());
        }
      } catch (const Error& e) {
        print_line(nlohmann::json{{"id", id}, {"error", e.what()}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        refused = true;
      }
    }
    for (const train::Generated& g : generator.step())
      print_line(generated_json(g));
  }
  check(queue.error().empty(), queue.error());
  return refused ? 1 : 0;
}

}  // namespace

Runner add_generate_command(CLI::App& sub) {
  auto args = std::make_shared<GenerateArgs>();
  sub.add_option("--checkpoint", args->checkpoint, "checkpoint file or run directory (uses its latest)")->required();
  sub.add_option("--input", args->input, "requests, one per line (text or JSON); - = stdin");
  sub.add_option("--tokens", args->options.tokens, "default tokens per request");
  sub.add_option("--stop", args->stop, "default stop text");
  add_sampling_flags(sub, args->options);
  add_seed_flag(sub, args->options.seed, "seed of request 0 (request i: seed + i unless it names one)");
  sub.add_option("--batch", args->batch, "sequences decoded together");
  sub.add_option("--threads", args->threads, "compute threads; 0 = all cores");
  add_precision_flag(sub, args->precision);
  return [args]() {
    args->options.validate();
    check(args->batch >= 1, "--batch must be >= 1, got ", args->batch);
    check(!launched_by_mpi(), "loom generate runs on one process; for tensor parallelism use "
                              "mpirun -np T loom sample --tp T --prompts-file FILE");
    kernels::set_num_threads(args->threads);
    use_precision(args->precision);
    return run_generate(*args);
  };
}

}  // namespace loom::apps
