// The balanced pipeline partition (parallel/pipeline/partition.hpp) against the dynamic program
// it replaced, which tried every (stages, blocks) pair: the same cuts for every block count up
// to 40 over up to 8 stages and head costs from none to more than the model, and an absurd
// block count cut in an instant (the program took O(S L^2) time and O(S L) memory). Single
// process, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "loom/parallel/pipeline/partition.hpp"

namespace loom::parallel::pipeline {
namespace {

// The old dynamic program: best[s][l] the smallest possible largest cost of the first s stages
// holding the first l blocks, cut[s][l] the fewest blocks of stage s that reach it.
std::vector<int64_t> reference(int64_t L, int64_t S, double head_cost) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int64_t>> cut(S + 1, std::vector<int64_t>(L + 1, 0));
  best[0][0] = 0.0;
  for (int64_t s = 1; s <= S; ++s)
    for (int64_t l = 0; l <= L; ++l)
      for (int64_t k = 1; k <= l; ++k) {
        const double worst = std::max(best[s - 1][l - k], static_cast<double>(k) + (s == S ? head_cost : 0.0));
        if (worst < best[s][l]) {
          best[s][l] = worst;
          cut[s][l] = k;
        }
      }
  std::vector<int64_t> blocks(S);
  for (int64_t s = S, l = L; s >= 1; l -= blocks[s - 1], --s) blocks[s - 1] = cut[s][l];
  return blocks;
}

std::vector<int64_t> blocks_of(const std::vector<nn::GPTStage>& stages) {
  std::vector<int64_t> blocks;
  for (const nn::GPTStage& s : stages) blocks.push_back(s.end_block - s.first_block);
  return blocks;
}

TEST(Partition, BalancedCutsEqualTheDynamicProgramsOverEveryShape) {
  nn::GPTConfig m;
  for (const int64_t Vp : {64, 128, 256, 4096, 50304})  // head cost Vp / (12 C): 0.03 to 109 blocks
    for (int64_t L = 1; L <= 40; ++L)
      for (int64_t S = 1; S <= std::min<int64_t>(L, 8); ++S) {
        m.n_layer = L;
        m.n_embd = 38;
        m.padded_vocab_size = Vp;
        m.vocab_size = 64;
        const double head_cost = static_cast<double>(Vp) / (12.0 * 38.0);
        ASSERT_EQ(blocks_of(partition_stages(m, S, 1)), reference(L, S, head_cost))
            << L << " blocks over " << S << " stages, head cost " << head_cost;
      }
}

TEST(Partition, AnAbsurdBlockCountIsCutInAnInstant) {
  nn::GPTConfig m;
  m.n_layer = 20'000'000;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> blocks = blocks_of(partition_stages(m, 2, 1));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(blocks, (std::vector<int64_t>{10'000'000, 10'000'000}));
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace loom::parallel::pipeline
