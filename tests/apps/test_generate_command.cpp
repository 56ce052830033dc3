// `loom generate` end to end: every request line gets one answer, by its id, and a refused
// request (a repeated key, a prompt longer than the context) is answered with an error naming
// it while the others are generated; blank lines get none; an indented JSON line is a request.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

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

}  // namespace
}  // namespace loom::testing
