// DDP and ZeRO 1-3 through the one face of data parallelism (GradientSync), without a
// Trainer: each rank backpropagates its own batch through a tiny GPT, the sync averages, and
// every gradient (or ZeRO shard of it) must equal the mean of the ranks' serial gradients,
// computed on every rank from all the batches. The comparison is exact in scale (no clipping,
// no optimizer), so a sum instead of a mean, or a reduction twice, fails it. Tolerance: rtol
// 1e-5, atol 1e-7 (fp32 sums of up to 8 terms in another order).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/zero.hpp"
#include "test_util.hpp"

namespace loom::parallel::gradient_sync_test {
namespace {

using loom::testing::all_close;
using loom::testing::world;

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

// Rank q's micro-batch m: (2, 8) token ids and targets drawn from its own seed.
std::pair<Tensor, Tensor> batch_of(int q, int m) {
  const int64_t B = 2, T = 8;
  Tensor idx = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
  const std::vector<float> u = loom::testing::random_vector(2 * B * T, 1000 + 10 * q + m, 0.0f, 31.99f);
  for (int64_t i = 0; i < B * T; ++i) {
    idx.i32()[i] = static_cast<int32_t>(u[i]);
    targets.i32()[i] = static_cast<int32_t>(u[B * T + i]);
  }
  return {idx, targets};
}

// Forward, loss and backward of one micro-batch, the loss scaled by 1 / micro_batches.
void backprop(nn::GPT& model, int q, int m, int micro_batches) {
  auto [idx, targets] = batch_of(q, m);
  nn::Context ctx;
  Tensor logits = model.forward(idx, ctx);
  nn::cross_entropy_loss(logits, targets, model.config().vocab_size);
  nn::cross_entropy_loss_backward(logits, targets, model.config().vocab_size, 1.0f / static_cast<float>(micro_batches));
  model.backward(logits, ctx);
}

// The mean over all ranks' batches of the serial gradients, by parameter name.
std::map<std::string, std::vector<float>> mean_gradients(int micro_batches) {
  const int p = world().size();
  std::map<std::string, std::vector<float>> sum;
  for (int q = 0; q < p; ++q) {
    nn::GPT serial(tiny_gpt(), 7);
    for (int m = 0; m < micro_batches; ++m) backprop(serial, q, m, micro_batches);
    for (nn::Parameter* param : serial.parameters()) {
      std::vector<float>& s = sum[param->name()];
      s.resize(static_cast<size_t>(param->numel()), 0.0f);
      for (int64_t i = 0; i < param->numel(); ++i) s[i] += param->grad().f32()[i] / static_cast<float>(p);
    }
  }
  return sum;
}

double sum_of_squares(const std::map<std::string, std::vector<float>>& grads) {
  double s = 0.0;
  for (const auto& [name, g] : grads)
    for (float x : g) s += static_cast<double>(x) * x;
  return s;
}

struct SyncCase {
  int zero;  // 0: DDP
  int micro_batches;
};

class GradientSyncFace : public ::testing::TestWithParam<SyncCase> {};

TEST_P(GradientSyncFace, AveragesEveryGradientOnce) {
  const SyncCase c = GetParam();
  const int M = c.micro_batches;
  const auto want = mean_gradients(M);
  nn::GPT model(tiny_gpt(), 7);
  std::unique_ptr<GradientSync> sync;
  if (c.zero == 0) {
    sync = std::make_unique<DistributedDataParallel>(model, world(), DdpOptions{4096});
  } else {
    ZeroOptions options;
    options.stage = c.zero;
    for (nn::Block* block : model.blocks()) options.units.push_back(block);
    sync = std::make_unique<ShardedDataParallel>(model, world(), nullptr, options);
  }
  sync->zero_grad();
  for (int m = 0; m < M; ++m) {
    sync->set_sync(m == M - 1);  // accumulate locally, reduce during the last backward
    backprop(model, world().rank(), m, M);
  }
  sync->finish_gradient_sync();

  if (auto* ddp = dynamic_cast<DistributedDataParallel*>(sync.get())) {
    EXPECT_EQ(ddp->optimizer_parameters().size(), model.parameters().size());
    for (nn::Parameter* param : sync->optimizer_parameters())
      EXPECT_TRUE(all_close(param->grad().f32(), want.at(param->name()).data(), param->numel(), 1e-5, 1e-7,
                            param->name().c_str()));
  } else {
    // Every model element must sit in exactly one rank's shard; this rank checks its pieces.
    auto& sharded = dynamic_cast<ShardedDataParallel&>(*sync);
    int64_t mine = 0;
    for (const ShardedDataParallel::ShardPiece& piece : sharded.shard_pieces()) {
      const std::vector<float>& full = want.at(piece.param->name());
      EXPECT_TRUE(all_close(piece.shard->grad().f32(), full.data() + piece.param_offset, piece.shard->numel(), 1e-5,
                            1e-7, piece.param->name().c_str()));
      mine += piece.shard->numel();
    }
    float total = static_cast<float>(mine);
    world().all_reduce(&total, 1);
    EXPECT_EQ(static_cast<int64_t>(total), model.num_parameters());
    EXPECT_EQ(sync->optimizer_parameters().size(), sharded.shard_pieces().size());
  }
  // The norm through the face: each element counted once, across the shards.
  EXPECT_NEAR(sync->grad_sum_squares({}), sum_of_squares(want), 1e-5 * sum_of_squares(want));
  sync->after_optimizer_step();
}

INSTANTIATE_TEST_SUITE_P(DdpAndZero, GradientSyncFace,
                         ::testing::Values(SyncCase{0, 1}, SyncCase{0, 2}, SyncCase{1, 1}, SyncCase{1, 2},
                                           SyncCase{2, 1}, SyncCase{2, 2}, SyncCase{3, 1}, SyncCase{3, 2}),
                         [](const auto& info) {
                           return (info.param.zero == 0 ? std::string("ddp") : "zero" + std::to_string(info.param.zero)) +
                                  "_mb" + std::to_string(info.param.micro_batches);
                         });

}  // namespace
}  // namespace loom::parallel::gradient_sync_test
