// `loom generate` end to end: every request line gets one answer, by its id, and a refused
// request (a repeated key, a prompt longer than the context) is answered with an error naming
// it while the others are generated; blank lines get none; an indented JSON line is a request.
// On a mixture-of-experts checkpoint `loom generate` and `loom sample` (KV cache, fp32 and bf16)
// give the texts of the uncached sampler; one whose experts may drop tokens over capacity is
// refused by the cached paths with the way out, and sampled by `--no-kv-cache`; one whose
// capacity can never drop is sampled through the KV cache.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli_test_util.hpp"
#include "test_util.hpp"

namespace loom::testing {
namespace {

TEST(GenerateCommand, EveryRequestLineIsAnsweredByItsId) {
  const std::string dir = fresh_temp_dir("generate_command").string();
  const CommandResult trained = run_loom("train " + kTiny + " --steps 1 --eval-batches 1 --out-dir " + dir + "/run");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string requests = dir + "/requests.txt";
  std::ofstream(requests) << "ROMEO:\n"
                          << " \t \n"                                                // blank: no request
                          << "  {\"prompt\": \"AB\", \"tokens\": 2}\n"               // indented JSON
                          << "{\"prompt\": \"A\", \"tokens\": 1, \"tokens\": 9}\n"  // a key twice
                          << std::string(17, 'a') << "\n"                           // the context is 16
                          << "\n"
                          << "C\n";
  const CommandResult r = run_command("env OMP_NUM_THREADS=1 " + std::string(LOOM_BINARY) + " generate --checkpoint " +
                                      dir + "/run --tokens 3 --batch 2 --threads 1 --input " + requests + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a request was refused
  std::map<int64_t, nlohmann::json> answers;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind('{', 0) != 0) continue;  // stderr's lines, if any
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_TRUE(answers.emplace(j.at("id").get<int64_t>(), j).second) << "two answers: " << line;
  }
  ASSERT_EQ(answers.size(), 5u) << r.output;
  EXPECT_EQ(answers[0]["text"].get<std::string>().rfind("ROMEO:", 0), 0u) << answers[0];
  EXPECT_EQ(answers[1]["text"].get<std::string>().rfind("AB", 0), 0u) << answers[1];
  EXPECT_EQ(answers[1]["tokens"], 2) << answers[1];
  EXPECT_EQ(answers[2]["error"], "request 2: the key \"tokens\" is given twice");
  EXPECT_EQ(answers[3]["error"],
            "request 3: the prompt is 17 tokens, longer than the model's context of 16 tokens (block_size)");
  EXPECT_EQ(answers[4]["text"].get<std::string>().rfind("C", 0), 0u) << answers[4];
}

// What `loom sample --prompt P` printed (its text and a newline), or the exit status and output.
std::string sampled(const std::string& args) {
  const CommandResult r = run_command("env OMP_NUM_THREADS=1 " + std::string(LOOM_BINARY) + " sample " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

TEST(GenerateCommand, MixtureOfExpertsCheckpointGeneratesTheUncachedSamplersText) {
  const std::string dir = fresh_temp_dir("generate_command_moe").string();
  const CommandResult trained =
      run_loom("train " + kTiny + " --moe-experts 4 --moe-top-k 2 --steps 20 --eval-batches 1 --out-dir " + dir + "/run");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::vector<std::string> prompts = {"ROMEO:", "AB", "To be"};
  const std::string requests = dir + "/requests.txt";
  {
    std::ofstream out(requests);
    for (const std::string& p : prompts) out << p << "\n";
  }
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::string common =
        " --checkpoint " + dir + "/run --tokens 24 --temperature 1 --threads 1 --precision " + precision;
    const CommandResult r = run_command("env OMP_NUM_THREADS=1 " + std::string(LOOM_BINARY) + " generate" + common +
                                        " --seed 3 --batch 2 --input " + requests + " 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<int64_t, std::string> texts;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind('{', 0) == 0) {
        const nlohmann::json j = nlohmann::json::parse(line);
        texts[j.at("id").get<int64_t>()] = j.at("text").get<std::string>();
      }
    ASSERT_EQ(texts.size(), prompts.size()) << r.output;
    for (size_t i = 0; i < prompts.size(); ++i) {  // request i samples with seed 3 + i
      const std::string args = common + " --prompt '" + prompts[i] + "' --seed " + std::to_string(3 + i);
      const std::string reference = sampled(args + " --no-kv-cache");
      EXPECT_EQ(texts[static_cast<int64_t>(i)] + "\n", reference) << precision << " request " << i;
      EXPECT_EQ(sampled(args), reference) << precision << " request " << i;
    }
  }

  const CommandResult capped = run_loom("train " + kTiny + " --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 1.25 "
                                        "--steps 2 --eval-batches 1 --out-dir " + dir + "/capped");
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  const std::string refused = "block 'blocks.0' is a mixture of experts: its experts drop tokens over capacity "
                              "(moe_capacity_factor 1.25, below moe_experts / moe_top_k = 2";
  expect_error("sample --checkpoint " + dir + "/capped --tokens 4 --threads 1", refused);
  expect_error("generate --checkpoint " + dir + "/capped --tokens 4 --threads 1 --input " + requests, refused);
  EXPECT_EQ(sampled("--checkpoint " + dir + "/capped --tokens 4 --threads 1 --prompt AB --no-kv-cache").size(), 7u);

  // A capacity of E / K can never drop: cached like a dropless checkpoint.
  const CommandResult roomy = run_loom("train " + kTiny + " --moe-experts 4 --moe-top-k 2 --moe-capacity-factor 2 "
                                       "--steps 2 --eval-batches 1 --out-dir " + dir + "/roomy");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  const std::string args = " --checkpoint " + dir + "/roomy --tokens 12 --temperature 1 --seed 5 --threads 1 --prompt AB";
  EXPECT_EQ(sampled(args), sampled(args + " --no-kv-cache"));
}

}  // namespace
}  // namespace loom::testing
