#include "loom/parallel/pipeline/partition.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

namespace {

// Blocks per stage minimising the largest stage cost (contiguous partition, small DP).
std::vector<int64_t> balanced(int64_t L, int64_t S, double head_cost) {
  // best[s][l]: the smallest possible max cost of the first s stages holding the first l blocks.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int64_t>> cut(S + 1, std::vector<int64_t>(L + 1, 0));
  best[0][0] = 0.0;
  for (int64_t s = 1; s <= S; ++s)
    for (int64_t l = 0; l <= L; ++l)
      for (int64_t k = 1; k <= l; ++k) {  // every stage holds at least one block
        const double cost = static_cast<double>(k) + (s == S ? head_cost : 0.0);
        const double worst = std::max(best[s - 1][l - k], cost);
        if (worst < best[s][l]) {
          best[s][l] = worst;
          cut[s][l] = k;
        }
      }
  std::vector<int64_t> blocks(S);
  for (int64_t s = S, l = L; s >= 1; l -= blocks[s - 1], --s) blocks[s - 1] = cut[s][l];
  return blocks;
}

}  // namespace

std::vector<nn::GPTStage> partition_stages(const nn::GPTConfig& config, int64_t p, int64_t v,
                                           const std::vector<int64_t>& blocks_per_stage) {
  const int64_t L = config.n_layer, S = p * v;
  check(p >= 1 && v >= 1, "pipeline: pp (", p, ") and chunks (", v, ") must be >= 1");
  check(S <= L, "pipeline: ", p, " stages", v > 1 ? " x " + std::to_string(v) + " chunks" : std::string(), " = ", S,
        " virtual stages need at least as many transformer blocks, the model has ", L);
  std::vector<int64_t> blocks = blocks_per_stage;
  if (blocks.empty()) {
    blocks = balanced(L, S, static_cast<double>(config.resolved_padded_vocab()) / (12.0 * config.n_embd));
  } else {
    check(static_cast<int64_t>(blocks.size()) == S, "pp_layers lists ", blocks.size(), " stages, the layout has ", S);
    for (int64_t b : blocks) check(b >= 1, "pp_layers: every stage needs at least one block, got ", b);
    const int64_t total = std::accumulate(blocks.begin(), blocks.end(), int64_t{0});
    check(total == L, "pp_layers adds up to ", total, " blocks, the model has ", L);
  }
  std::vector<nn::GPTStage> stages;
  int64_t first = 0;
  for (int64_t s = 0; s < S; ++s) {
    stages.push_back(nn::GPTStage{first, first + blocks[s], s == 0, s == S - 1});
    first += blocks[s];
  }
  return stages;
}

}  // namespace loom::parallel::pipeline
