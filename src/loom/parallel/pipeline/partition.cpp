#include "loom/parallel/pipeline/partition.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

namespace {

// The smallest largest stage of l blocks over s stages of one unit a block, each holding at
// least one: ceil(l / s); infinite when some stage would be empty.
double spread(int64_t l, int64_t s) {
  if (s == 0) return l == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  if (l < s) return std::numeric_limits<double>::infinity();
  return static_cast<double>((l + s - 1) / s);
}

// Blocks per stage minimising the largest stage cost (contiguous partition), the last stage
// costing head_cost more. Stage by stage from the last: the fewest blocks k that minimise the
// larger of its cost and the best spread of the rest over the stages before it (a small DP
// over every (stages, blocks) gave the same cuts, in O(S L^2) time and O(S L) memory: hours and
// gigabytes for an absurd block count, which the memory check must refuse in an instant).
std::vector<int64_t> balanced(int64_t L, int64_t S, double head_cost) {
  std::vector<int64_t> blocks(S);
  for (int64_t s = S, l = L; s >= 1; l -= blocks[s - 1], --s) {
    double best = std::numeric_limits<double>::infinity();
    for (int64_t k = 1; k <= l; ++k) {  // every stage holds at least one block
      const double worst = std::max(spread(l - k, s - 1), static_cast<double>(k) + (s == S ? head_cost : 0.0));
      if (worst < best) {
        best = worst;
        blocks[s - 1] = k;
      }
    }
  }
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
