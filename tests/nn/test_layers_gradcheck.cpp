// Every layer's backward against central finite differences (tolerances in GradCheckOptions).
#include <gtest/gtest.h>

#include "loom/nn/block.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/nn/gpt.hpp"
#include "nn/gradcheck.hpp"

namespace loom::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::randomize_parameters;

TEST(GradCheck, Linear) {
  Linear m(7, 5);
  randomize_parameters(m, 1);
  expect_gradients_match(m, random_tensor({2, 3, 7}, 2));
}

TEST(GradCheck, LinearWithoutBias) {
  Linear m(4, 6, /*bias=*/false);
  randomize_parameters(m, 3);
  EXPECT_EQ(m.parameters().size(), 1u);
  expect_gradients_match(m, random_tensor({5, 4}, 4));
}

TEST(GradCheck, LayerNorm) {
  LayerNorm m(9);
  randomize_parameters(m, 5);
  expect_gradients_match(m, random_tensor({4, 9}, 6));
}

TEST(GradCheck, MLP) {
  MLP m(6);
  randomize_parameters(m, 7);
  expect_gradients_match(m, random_tensor({2, 3, 6}, 8));
}

TEST(GradCheck, CausalSelfAttention) {
  CausalSelfAttention m(8, 2);
  randomize_parameters(m, 9);
  expect_gradients_match(m, random_tensor({2, 5, 8}, 10));
}

TEST(GradCheck, Block) {
  Block m(8, 2);
  randomize_parameters(m, 11, 0.3f);
  expect_gradients_match(m, random_tensor({2, 4, 8}, 12));
}

TEST(GradCheck, BlockWithRecompute) {
  Block m(8, 2);
  m.set_recompute(true);
  randomize_parameters(m, 11, 0.3f);
  expect_gradients_match(m, random_tensor({2, 4, 8}, 12));
}

TEST(GradCheck, Embedding) {
  Embedding m(11, 16, 6, 5);
  randomize_parameters(m, 13);
  Tensor idx = Tensor::empty({2, 6}, DType::I32);
  for (int i = 0; i < 12; ++i) idx.i32()[i] = (i * 7) % 11;  // repeated ids accumulate
  expect_gradients_match(m, idx);
}

TEST(GradCheck, WholeGPTLogits) {
  GPT m({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8}, 3);
  randomize_parameters(m, 14, 0.3f);
  Tensor idx = Tensor::empty({2, 5}, DType::I32);  // T < block_size
  for (int i = 0; i < 10; ++i) idx.i32()[i] = (i * 5 + 1) % 13;
  expect_gradients_match(m, idx, {.h = 1e-2, .rtol = 3e-2, .atol = 2e-3, .samples_per_param = 8});
}

}  // namespace
}  // namespace loom::nn
