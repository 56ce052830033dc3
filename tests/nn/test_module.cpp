// Module plumbing: dotted names, hooks, grad-ready once per backward (tied weights
// included), contexts holding activations, and recompute's memory saving.
#include <gtest/gtest.h>

#include <map>

#include "loom/error.hpp"
#include "loom/nn/gpt.hpp"
#include "nn/gradcheck.hpp"

namespace loom::nn {
namespace {

GPTConfig tiny_config() { return {.vocab_size = 17, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}; }

Tensor tokens(int64_t B, int64_t T, int64_t V) {
  Tensor idx = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) idx.i32()[i] = static_cast<int32_t>((i * 3 + 1) % V);
  return idx;
}

TEST(Module, ParameterNamesAreStableDottedPaths) {
  GPT m(tiny_config(), 1);
  std::vector<std::string> names;
  for (Parameter* p : m.parameters()) names.push_back(p->name());
  EXPECT_EQ(names.front(), "embedding.wte");
  EXPECT_EQ(names[1], "embedding.wpe");
  EXPECT_EQ(names[2], "blocks.0.ln1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.attn.qkv.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.mlp.proj.bias"), names.end());
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(m.num_parameters(), tiny_config().num_parameters());
}

TEST(Module, WeightDecayOnlyOnMatricesAndEmbeddings) {
  GPT m(tiny_config(), 1);
  for (Parameter* p : m.parameters()) {
    const bool matrix = p->value().ndim() == 2;
    EXPECT_EQ(p->weight_decay(), matrix) << p->name();
  }
}

TEST(Module, InitIsSeededAndGpt2Style) {
  GPT a(tiny_config(), 5), b(tiny_config(), 5), c(tiny_config(), 6);
  EXPECT_EQ(a.blocks()[1]->mlp().fc().weight().value().f32()[3], b.blocks()[1]->mlp().fc().weight().value().f32()[3]);
  EXPECT_NE(a.blocks()[1]->mlp().fc().weight().value().f32()[3], c.blocks()[1]->mlp().fc().weight().value().f32()[3]);
  EXPECT_EQ(a.ln_f().weight().value().f32()[0], 1.0f);
  EXPECT_EQ(a.blocks()[0]->attn().qkv().bias()->value().f32()[0], 0.0f);
}

TEST(Module, HooksFireInOrderAndGradReadyOncePerBackward) {
  GPT m(tiny_config(), 1);
  std::vector<std::string> events;
  for (Block* b : m.blocks()) {
    b->add_pre_forward_hook([&](Module& mod, Context&) { events.push_back("fwd " + mod.name()); });
    b->add_post_backward_hook([&](Module& mod, Context&) { events.push_back("bwd " + mod.name()); });
  }
  std::map<std::string, int> ready;
  for (Parameter* p : m.parameters()) p->add_grad_ready_hook([&](Parameter& q) { ready[q.name()]++; });
  Context ctx;
  Tensor logits = m.forward(tokens(2, 8, 17), ctx);
  m.backward(logits, ctx);  // any dlogits will do
  EXPECT_EQ(events, (std::vector<std::string>{"fwd blocks.0", "fwd blocks.1", "bwd blocks.1", "bwd blocks.0"}));
  ASSERT_EQ(ready.size(), m.parameters().size());
  for (auto& [name, count] : ready) EXPECT_EQ(count, 1) << name;  // the tied wte too, after both uses
}

TEST(Module, ContextIsEmptyAfterBackward) {
  GPT m(tiny_config(), 1);
  Context ctx;
  Tensor logits = m.forward(tokens(2, 8, 17), ctx);
  EXPECT_GT(ctx.bytes(), 0);
  m.backward(logits, ctx);
  EXPECT_EQ(ctx.bytes(), 0);
}

TEST(Module, BackwardWithoutForwardIsAnError) {
  Linear m(3, 2);
  Context ctx;
  Tensor dy = Tensor::zeros({1, 2});
  EXPECT_THROW(m.backward(dy, ctx), Error);
}

TEST(Module, RecomputeKeepsFewerActivationsAndSameGradients) {
  GPTConfig c = tiny_config();
  c.n_layer = 4;
  GPT plain(c, 7);
  c.recompute = true;
  GPT recomputed(c, 7);
  Tensor idx = tokens(4, 8, 17);
  Context ctx_plain, ctx_recompute;
  Tensor a = plain.forward(idx, ctx_plain);
  Tensor b = recomputed.forward(idx, ctx_recompute);
  EXPECT_LT(ctx_recompute.bytes() * 2, ctx_plain.bytes());
  plain.backward(a, ctx_plain);
  recomputed.backward(b, ctx_recompute);
  auto pa = plain.parameters(), pb = recomputed.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(testing::all_close(pb[i]->grad().f32(), pa[i]->grad().f32(), pa[i]->numel(), 0, 0, pa[i]->name()));
}

TEST(Module, GradientsAccumulateAcrossMicroBatches) {
  GPT m(tiny_config(), 1);
  Tensor idx = tokens(2, 8, 17);
  auto run = [&]() {
    Context ctx;
    Tensor logits = m.forward(idx, ctx);
    m.backward(logits, ctx);
  };
  m.zero_grad();
  run();
  Tensor once = m.blocks()[0]->mlp().fc().weight().grad().clone();
  run();
  const Tensor& twice = m.blocks()[0]->mlp().fc().weight().grad();
  for (int64_t i = 0; i < once.numel(); ++i) EXPECT_FLOAT_EQ(twice.f32()[i], 2.0f * once.f32()[i]);
}

TEST(GPTConfig, ImpossibleDimensionsAreClearErrors) {
  GPTConfig c = tiny_config();
  c.n_head = 3;  // 16 % 3 != 0
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "n_embd (16) must be divisible by n_head (3)");
  }
  c = tiny_config();
  c.block_size = 0;
  EXPECT_THROW(c.validate(), Error);
  c = tiny_config();
  c.n_layer = -1;
  EXPECT_THROW(GPT(c, 1), Error);
}

TEST(GPT, LongerSequenceThanBlockSizeIsAnError) {
  GPT m(tiny_config(), 1);
  Context ctx;
  EXPECT_THROW(m.forward(tokens(1, 9, 17), ctx), Error);
}

}  // namespace
}  // namespace loom::nn
