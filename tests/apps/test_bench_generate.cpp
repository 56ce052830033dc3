// `loom bench generate --models gpt-mini-moe` (gpt-mini with every MLP 8 experts, top-2) runs
// KV-cached decode and counts, in its bandwidth bound, the experts a step's tokens reach: at
// batch 1 the router and 2 of 8 experts where gpt-mini reads one dense MLP, at batch 4 the
// 8 (1 - (6/8)^4) = 5.47 that 4 uniformly routed tokens reach on average. The two shapes
// share everything else, the KV cache included.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "apps/cli_test_util.hpp"

namespace loom::testing {
namespace {

TEST(BenchGenerate, MixtureOfExpertsShapeDecodesAndReadsTheExpertsItsTokensReach) {
  const CommandResult r = run_command("env OMP_NUM_THREADS=1 " + std::string(LOOM_BINARY) +
                                      " bench generate --models gpt-mini,gpt-mini-moe --batches 1,4 --prompt-tokens 4 "
                                      "--new-tokens 2 --threads 1 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::pair<std::string, int64_t>, nlohmann::json> rows;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    rows[{j.at("model").get<std::string>(), j.at("batch").get<int64_t>()}] = j;
  }
  ASSERT_EQ(rows.size(), 4u) << r.output;
  for (const auto& [key, j] : rows) {
    EXPECT_GT(j.at("decode_tokens_per_s").get<double>(), 0.0) << j;
    EXPECT_GT(j.at("prefill_tokens_per_s").get<double>(), 0.0) << j;
  }
  // An expert and a dense MLP: Linear(C, 4C) and Linear(4C, C) with biases; the router C x 8.
  const double C = 384, mlp = 4.0 * (8 * C * C + 5 * C), router = 4.0 * C * 8, layers = 6;
  const auto extra = [&](int64_t batch) {
    return rows.at({"gpt-mini-moe", batch}).at("decode_bytes_per_step").get<double>() -
           rows.at({"gpt-mini", batch}).at("decode_bytes_per_step").get<double>();
  };
  EXPECT_DOUBLE_EQ(extra(1), layers * (2 * mlp + router - mlp));
  EXPECT_DOUBLE_EQ(extra(4), layers * (5.46875 * mlp + router - mlp));
  EXPECT_DOUBLE_EQ(rows.at({"gpt-mini-moe", 1}).at("moe_experts_read_per_block").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(rows.at({"gpt-mini-moe", 4}).at("moe_experts_read_per_block").get<double>(), 5.46875);
  EXPECT_FALSE(rows.at({"gpt-mini", 1}).contains("moe_experts_read_per_block"));
}

}  // namespace
}  // namespace loom::testing
