#include "loom/train/generation_requests.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::train {

namespace {
// A prompts file is text typed or generated for a run: 64 MiB is far more than a batch needs.
constexpr int64_t kMaxPromptsBytes = int64_t{64} << 20;
// JSON's whitespace but the newline, which ends the line.
constexpr const char* kBlank = " \t\r";

// The line as JSON; loom::Error for invalid JSON or a key the top-level object repeats
// (nlohmann keeps the last value unsaid: {"tokens": 5, "tokens": 50000} would run 50000).
nlohmann::json parse_json(const std::string& line, const std::string& where) {
  std::set<std::string> keys;
  std::string repeated;
  const auto note_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second &&
        repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line, note_keys);
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": invalid JSON (", e.what(), ")");
  }
  check(repeated.empty(), where, ": the key \"", repeated, "\" is given twice");
  return j;
}
}  // namespace

bool is_blank_request_line(const std::string& line) { return line.find_first_not_of(kBlank) == std::string::npos; }

GenerationRequest parse_request_line(const std::string& line, const GenerationRequest& defaults, int64_t index,
                                     const std::string& where) {
  GenerationRequest r = defaults;
  r.seed = defaults.seed + static_cast<uint64_t>(index);
  // A JSON object may be indented; plain text keeps its spaces, which are part of the prompt.
  const size_t first = line.find_first_not_of(kBlank);
  if (first == std::string::npos || line[first] != '{') {
    r.prompt = line;
    return r;
  }
  const nlohmann::json j = parse_json(line, where);
  check(j.is_object(), where, ": expected a JSON object");
  check(j.contains("prompt"), where, ": the request has no \"prompt\"");
  for (const auto& [key, value] : j.items()) {
    if (key == "prompt" || key == "stop") {
      check(value.is_string(), where, ": \"", key, "\" must be a string");
      (key == "prompt" ? r.prompt : r.stop) = value.get<std::string>();
    } else if (key == "tokens") {
      check(value.is_number_integer(), where, ": \"tokens\" must be an integer");
      r.max_tokens = value.get<int64_t>();
    } else if (key == "seed") {
      check(value.is_number_unsigned(), where, ": \"seed\" must be a non-negative integer");
      r.seed = value.get<uint64_t>();
    } else {
      fail(where, ": unknown key \"", key, "\" (expected prompt, tokens, stop, seed)");
    }
  }
  check(!r.prompt.empty(), where, ": the prompt must not be empty");
  try {
    r.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return r;
}

std::vector<GenerationRequest> read_prompts_file(const std::string& path, const GenerationRequest& defaults,
                                                 const data::Tokenizer* tokenizer, int64_t block_size) {
  data::check_input_file(path, "prompts file", kMaxPromptsBytes);
  std::ifstream in(path);
  check(in.good(), "cannot open prompts file '", path, "'");
  std::vector<GenerationRequest> requests;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank_request_line(line)) continue;
    const std::string where = "prompts file '" + path + "' line " + std::to_string(number);
    requests.push_back(parse_request_line(line, defaults, static_cast<int64_t>(requests.size()), where));
    if (tokenizer != nullptr) {
      try {
        const std::vector<int32_t> ids = tokenizer->encode(requests.back().prompt);
        if (block_size > 0) check_prompt_fits(ids, block_size);
      } catch (const Error& e) {
        fail(where, ": ", e.what());
      }
    }
  }
  check(!requests.empty(), "prompts file '", path, "' holds no prompt");
  return requests;
}

}  // namespace loom::train
