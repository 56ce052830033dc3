// A GPT cut into pipeline stages and run stage after stage computes what the whole model
// computes: the same logits, the same input gradients passed between stages, and the same
// parameter gradients (the token table's two copies summing to the tied gradient).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/nn/gpt.hpp"
#include "test_util.hpp"

namespace loom::nn {
namespace {

using loom::testing::all_close;

TEST(GptStages, ChainedStagesMatchTheWholeModel) {
  const GPTConfig config{.vocab_size = 65, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};
  GPT whole(config, 42);
  std::vector<std::unique_ptr<GPT>> stages;
  stages.push_back(std::make_unique<GPT>(config, 42, serial_layers(), GPTStage{0, 1, true, false}));
  stages.push_back(std::make_unique<GPT>(config, 42, serial_layers(), GPTStage{1, 1, false, false}));  // no blocks
  stages.push_back(std::make_unique<GPT>(config, 42, serial_layers(), GPTStage{1, 3, false, true}));

  // The stages hold the whole model's parameters, each once (the head's table twice).
  int64_t held = 0;
  for (auto& s : stages) held += s->num_parameters();
  EXPECT_EQ(held, whole.num_parameters() + stages[2]->head_weight().numel());
  EXPECT_TRUE(all_close(stages[2]->head_weight().value().f32(), whole.embedding().wte().value().f32(),
                        whole.embedding().wte().numel(), 0, 0, "the head's copy starts equal"));

  const int64_t B = 2, T = 8;
  Tensor idx = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) {
    idx.i32()[i] = static_cast<int32_t>((7 * i + 1) % 65);
    targets.i32()[i] = static_cast<int32_t>((5 * i + 3) % 65);
  }
  Context whole_ctx;
  Tensor want = whole.forward(idx, whole_ctx);
  std::vector<Context> ctx(stages.size());
  Tensor x = idx;
  for (size_t s = 0; s < stages.size(); ++s) x = stages[s]->forward(x, ctx[s]);
  EXPECT_TRUE(all_close(x.f32(), want.f32(), want.numel(), 0, 0, "logits"));

  cross_entropy_loss_backward(want, targets, 65, 1.0f);
  cross_entropy_loss_backward(x, targets, 65, 1.0f);
  whole.backward(want, whole_ctx);
  for (size_t s = stages.size(); s-- > 0;) x = stages[s]->backward(x, ctx[s]);
  EXPECT_FALSE(x.defined());  // the embedding's stage returns no input gradient

  std::vector<Parameter*> got;
  for (auto& s : stages)
    for (Parameter* p : s->parameters()) got.push_back(p);
  for (Parameter* w : whole.parameters()) {
    std::vector<float> sum(static_cast<size_t>(w->numel()), 0.0f);
    int copies = 0;
    for (Parameter* p : got)
      if (p->name() == w->name()) {
        for (int64_t i = 0; i < p->numel(); ++i) sum[i] += p->grad().f32()[i];
        ++copies;
      }
    EXPECT_EQ(copies, w->name() == "embedding.wte" ? 2 : 1) << w->name();
    EXPECT_TRUE(all_close(sum.data(), w->grad().f32(), w->numel(), 1e-5, 1e-7, "gradient of " + w->name()));
  }
}

}  // namespace
}  // namespace loom::nn
