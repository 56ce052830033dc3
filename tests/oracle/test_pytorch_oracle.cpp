// Loom's GPT against PyTorch as the oracle: the test writes a tiny
// GPT's weights and token batches to a temp dir, tests/oracle/gpt_reference.py rebuilds the
// same model in PyTorch (float32) and writes back the loss, every parameter's gradient,
// the losses of 10 AdamW steps and the parameters after them; this file compares.
// Tolerances, per tensor: max|loom - torch| <= 1e-4 * max|torch| + atol, with atol 1e-7 on
// gradients and 1e-6 on final parameters (except the key bias, see check_against_pytorch);
// the loss and the 10 training losses within 1e-4 relative. Measured: gradients agree to
// ~1e-6 relative, final parameters to ~1e-6 absolute.
// A missing python, torch or numpy is a failure, never a skip.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/kernels/precision.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/kernels/attention_dropout.hpp"
#include "loom/kernels/dropout.hpp"
#include "loom/nn/block.hpp"
#include "loom/nn/hidden_dropout.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/train/safetensors.hpp"
#include "oracle/oracle_util.hpp"
#include "test_util.hpp"

namespace loom {
namespace {

using loom::testing::oracle::run_pytorch;
using loom::testing::oracle::tensor_close;

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
constexpr double kGradAtol = 1e-7;
constexpr double kParamAtol = 1e-6;
constexpr int kTrainSteps = 10;
constexpr float kLr = 1e-3f;
const optim::AdamWConfig kAdamW{0.9f, 0.95f, 1e-8f, 0.1f};

// Bounds per tensor: max|loom - torch| <= rel * max|torch| + atol.
struct Tolerance {
  double loss_rel = kRelTol, grad_rel = kRelTol, grad_atol = kGradAtol, param_rel = kRelTol, param_atol = kParamAtol;
};

struct OracleCase {
  nn::GPTConfig cfg;
  int64_t B = 3, T = 16;
  kernels::Precision precision = kernels::Precision::F32;
  Tolerance tol{};
};

nn::GPTConfig tiny_config(bool recompute = false) {
  nn::GPTConfig c;
  c.vocab_size = 65;  // Vp = 128: 63 padding rows
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.recompute = recompute;
  return c;
}

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("loom_oracle_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Tensor random_tokens(const Shape& shape, int64_t V, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::I32);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = dist(rng);
  return t;
}

// GPT-2's init (std 0.02, zero biases, unit gains) keeps every activation small, where a
// wrong nonlinearity (exact vs tanh GELU), a swapped or dropped bias, or a near-uniform
// softmax would hide under the tolerance. The oracle runs from O(1) activations instead:
// matrices uniform with std 1/sqrt(fan_in), embeddings uniform in [-1, 1], biases in
// [-0.3, 0.3], LayerNorm gains in [0.7, 1.3].
void randomize_parameters(nn::GPT& model, uint64_t seed) {
  uint64_t k = seed;
  for (nn::Parameter* p : model.parameters()) {
    const std::string& name = p->name();
    float lo = -0.3f, hi = 0.3f, offset = 0.0f;
    if (name.starts_with("embedding.")) {
      lo = -1.0f, hi = 1.0f;
    } else if (p->value().ndim() == 2) {
      hi = std::sqrt(3.0f / static_cast<float>(p->value().size(1))), lo = -hi;
    } else if (name.ends_with("weight")) {
      offset = 1.0f;  // LayerNorm gain
    }
    const auto r = loom::testing::random_vector(p->numel(), ++k, lo, hi);
    for (int64_t i = 0; i < p->numel(); ++i) p->value().f32()[i] = offset + r[i];
  }
}

struct LoomResult {
  float loss = 0.0f;
  std::map<std::string, Tensor> grads;
  std::vector<float> losses;
  std::map<std::string, Tensor> final_params;
};

// The hidden dropout's draws of a training step (hidden_dropout.hpp); its step varies.
nn::DropoutRows dropout_rows(int64_t step) { return {/*seed=*/5, static_cast<uint64_t>(step), /*first_row=*/0}; }

// The masks Loom's hidden dropout applies at each of the model's sites (the embedding's 0,
// block l's attention 1 + 2l and MLP 2 + 2l) for a (B, T) batch drawn as `rows`: a tensor of
// ones through each site. PyTorch multiplies them in where its model says (torch_gpt.py).
Tensor dropout_masks(const nn::GPTConfig& cfg, const nn::DropoutRows& rows, int64_t B, int64_t T) {
  const int64_t sites = 1 + 2 * cfg.n_layer, C = cfg.n_embd;
  Tensor out = Tensor::empty({sites, B, T, C});
  nn::Context ctx;
  ctx.set_dropout_rows(rows);
  for (int64_t s = 0; s < sites; ++s) {
    Tensor mask = Tensor::empty({B, T, C});
    mask.fill_(1.0f);
    nn::HiddenDropout(cfg.hidden_dropout, static_cast<uint64_t>(s), cfg.block_size, nn::whole_sequences()).apply(mask, ctx);
    std::copy(mask.f32(), mask.f32() + mask.numel(), out.f32() + s * B * T * C);
  }
  return out;
}

// The masks Loom's attention dropout applies to block l's probabilities (its site
// Block::kAttentionDropoutSites + l), drawn as `rows`: (L, B, NH, T, T), 1 above the diagonal
// (those probabilities are 0). PyTorch multiplies them into its softmax's output.
Tensor attention_dropout_masks(const nn::GPTConfig& cfg, const nn::DropoutRows& rows, int64_t B, int64_t T) {
  const int64_t L = cfg.n_layer, NH = cfg.n_head;
  Tensor out = Tensor::empty({L, B, NH, T, T});
  out.fill_(1.0f);
  for (int64_t l = 0; l < L; ++l) {
    const kernels::AttentionDropout d{
        .p = static_cast<float>(cfg.attention_dropout),
        .key = kernels::dropout_key(rows.seed, rows.step, nn::Block::kAttentionDropoutSites + static_cast<uint64_t>(l)),
        .first_row = rows.first_row, .heads = NH, .first_head = 0, .positions = cfg.block_size};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < T; ++i) d.apply(out.f32() + (((l * B + b) * NH + h) * T + i) * T, i + 1, b, h, i, d.scale());
  }
  return out;
}

float forward_backward(nn::GPT& model, const Tensor& idx, const Tensor& targets, int64_t V,
                       const nn::DropoutRows& rows) {
  kernels::new_weights_generation();  // an optimizer step may have changed the weights
  nn::Context ctx;
  ctx.set_dropout_rows(rows);  // no dropout unless the model has hidden_dropout
  Tensor logits = model.forward(idx, ctx);
  const float loss = nn::cross_entropy_loss(logits, targets, V);
  nn::cross_entropy_loss_backward(logits, targets, V, 1.0f);
  model.backward(logits, ctx);
  return loss;
}

// Builds the model, writes IN for PyTorch, and computes Loom's side of everything in it.
LoomResult run_loom(const OracleCase& c, const fs::path& in_path) {
  const kernels::PrecisionScope precision(c.precision);
  nn::GPT model(c.cfg, /*seed=*/1234);
  randomize_parameters(model, 99);
  const int64_t V = c.cfg.vocab_size;
  std::mt19937 rng(42);
  Tensor check_idx = random_tokens({c.B, c.T}, V, rng), check_targets = random_tokens({c.B, c.T}, V, rng);
  Tensor train_idx = random_tokens({kTrainSteps, c.B, c.T}, V, rng);
  Tensor train_targets = random_tokens({kTrainSteps, c.B, c.T}, V, rng);

  train::TensorFile in;
  for (nn::Parameter* p : model.parameters()) in.tensors["param." + p->name()] = p->value().clone();
  in.tensors["check.idx"] = check_idx;
  in.tensors["check.targets"] = check_targets;
  in.tensors["train.idx"] = train_idx;
  in.tensors["train.targets"] = train_targets;
  // The check batch's masks (step 0) as check.<name>, the training steps' stacked as train.<name>.
  auto add_masks = [&](const std::string& name, auto&& masks) {
    in.tensors["check." + name] = masks(c.cfg, dropout_rows(0), c.B, c.T);
    std::vector<int64_t> shape = in.tensors["check." + name].shape();
    shape.insert(shape.begin(), kTrainSteps);
    Tensor train = Tensor::empty(shape);
    const int64_t per_step = train.numel() / kTrainSteps;
    for (int s = 0; s < kTrainSteps; ++s) {
      const Tensor m = masks(c.cfg, dropout_rows(s + 1), c.B, c.T);
      std::copy(m.f32(), m.f32() + per_step, train.f32() + s * per_step);
    }
    in.tensors["train." + name] = train;
  };
  if (c.cfg.hidden_dropout > 0.0) add_masks("dropout", dropout_masks);
  if (c.cfg.attention_dropout > 0.0) add_masks("attn_dropout", attention_dropout_masks);
  auto str = [](auto v) {
    std::ostringstream s;
    s.precision(9);
    s << v;
    return s.str();
  };
  in.metadata = {{"vocab_size", str(V)},
                 {"block_size", str(c.cfg.block_size)},
                 {"n_layer", str(c.cfg.n_layer)},
                 {"n_head", str(c.cfg.n_head)},
                 {"n_embd", str(c.cfg.n_embd)},
                 {"lr", str(kLr)},
                 {"beta1", str(kAdamW.beta1)},
                 {"beta2", str(kAdamW.beta2)},
                 {"eps", str(kAdamW.eps)},
                 {"weight_decay", str(kAdamW.weight_decay)},
                 {"precision", std::string(kernels::precision_name(c.precision))}};
  train::save_tensor_file(in_path.string(), in);

  LoomResult r;
  model.zero_grad();
  r.loss = forward_backward(model, check_idx, check_targets, V, dropout_rows(0));
  for (nn::Parameter* p : model.parameters()) r.grads[p->name()] = p->grad().clone();

  optim::AdamW opt(model.parameters(), kAdamW);
  for (int s = 0; s < kTrainSteps; ++s) {
    opt.zero_grad();
    Tensor idx = train_idx.view({kTrainSteps * c.B, c.T}).narrow(s * c.B, c.B);
    Tensor tgt = train_targets.view({kTrainSteps * c.B, c.T}).narrow(s * c.B, c.B);
    r.losses.push_back(forward_backward(model, idx, tgt, V, dropout_rows(s + 1)));
    opt.step(kLr);
  }
  for (nn::Parameter* p : model.parameters()) r.final_params[p->name()] = p->value().clone();
  return r;
}

// Compares everything; returns Loom's result for further checks.
LoomResult check_against_pytorch(const OracleCase& c) {
  TempDir dir;
  const fs::path in_path = dir.path / "in.safetensors", out_path = dir.path / "out.safetensors";
  LoomResult loom = run_loom(c, in_path);
  train::TensorFile torch = run_pytorch(LOOM_SOURCE_DIR "/tests/oracle/gpt_reference.py", in_path, out_path);
  if (torch.tensors.empty()) return loom;

  const Tolerance& tol = c.tol;
  const float want_loss = torch.tensors.at("loss").f32()[0];
  EXPECT_NEAR(loom.loss, want_loss, tol.loss_rel * std::fabs(want_loss)) << "loss";
  for (const auto& [name, g] : loom.grads) {
    if (!torch.tensors.count("grad." + name)) {
      ADD_FAILURE() << "PyTorch wrote no gradient for " << name;
      continue;
    }
    EXPECT_TRUE(tensor_close("grad " + name, g, torch.tensors.at("grad." + name), tol.grad_rel, tol.grad_atol));
  }
  const Tensor& want_losses = torch.tensors.at("train.losses");
  EXPECT_EQ(want_losses.numel(), kTrainSteps);
  for (int s = 0; s < kTrainSteps && s < want_losses.numel(); ++s)
    EXPECT_NEAR(loom.losses[s], want_losses.f32()[s], tol.loss_rel * std::fabs(want_losses.f32()[s]))
        << "AdamW step " << s << " loss";
  for (const auto& [name, p] : loom.final_params) {
    if (!torch.tensors.count("final." + name)) {
      ADD_FAILURE() << "PyTorch wrote no final value for " << name;
      continue;
    }
    const Tensor& want = torch.tensors.at("final." + name);
    const std::string what = "after " + std::to_string(kTrainSteps) + " AdamW steps, " + name;
    if (!name.ends_with("attn.qkv.bias")) {
      EXPECT_TRUE(tensor_close(what, p, want, tol.param_rel, tol.param_atol));
      continue;
    }
    // The key bias's true gradient is zero (softmax is shift-invariant per query), so both
    // sides step it by the sign of their own rounding noise: only the size of the drift is
    // bounded, |update| <~ lr per step on each side. q and v are held to the usual bound.
    const int64_t C = c.cfg.n_embd;
    EXPECT_TRUE(tensor_close(what + " [q]", p.narrow(0, C), want.narrow(0, C), tol.param_rel, tol.param_atol));
    EXPECT_TRUE(tensor_close(what + " [k]", p.narrow(C, C), want.narrow(C, C), 0.0, 2.0 * kTrainSteps * kLr));
    EXPECT_TRUE(tensor_close(what + " [v]", p.narrow(2 * C, C), want.narrow(2 * C, C), tol.param_rel, tol.param_atol));
  }
  return loom;
}

TEST(PyTorchOracle, FullBlockGradientsAndAdamW) {
  check_against_pytorch({tiny_config(), /*B=*/3, /*T=*/16});
}

TEST(PyTorchOracle, ShortSequenceGradientsAndAdamW) {
  // T < block_size: only wpe's first T rows are used and get gradient.
  check_against_pytorch({tiny_config(), /*B=*/2, /*T=*/11});
}

TEST(PyTorchOracle, RecomputeGradientsAndAdamW) {
  // Activation recompute must not change the maths: same oracle, and the gradients equal
  // the non-recompute run's bit for bit (the same kernels re-run on the same inputs).
  const LoomResult with = check_against_pytorch({tiny_config(/*recompute=*/true), 3, 16});
  OracleCase plain{tiny_config(false), 3, 16};
  TempDir dir;
  const LoomResult without = run_loom(plain, dir.path / "in.safetensors");
  for (const auto& [name, g] : without.grads)
    EXPECT_TRUE(tensor_close("recompute vs plain grad " + name, with.grads.at(name), g, 0.0, 0.0));
}

// Hidden dropout (p 0.2 on the embedding's output and each branch's) with PyTorch given
// Loom's masks: where they are applied and how they scale, in forward and backward, and a
// mask that changes with the step, to the fp32 tolerances; also under recompute, whose
// replay must draw the forward's masks again. The masks are checked to drop about p.
TEST(PyTorchOracle, HiddenDropoutGradientsAndAdamW) {
  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    OracleCase c{tiny_config(recompute), 3, 16};
    c.cfg.hidden_dropout = 0.2;
    check_against_pytorch(c);
  }
  nn::GPTConfig cfg = tiny_config();
  cfg.hidden_dropout = 0.2;
  const Tensor m = dropout_masks(cfg, dropout_rows(0), 3, 16);
  const auto dropped = std::count(m.f32(), m.f32() + m.numel(), 0.0f);
  const double share = static_cast<double>(dropped) / static_cast<double>(m.numel());  // of 7 x 1536 draws
  EXPECT_NEAR(share, 0.2, 0.02);  // 5 standard deviations (0.004 each)
  EXPECT_EQ(std::count(m.f32(), m.f32() + m.numel(), 1.0f / (1.0f - 0.2f)), m.numel() - dropped) << "kept values scale by 1 / (1 - p)";
}

// Mixed precision against torch.autocast("cpu", dtype=torch.bfloat16) with fp32 master
// weights. Both sides round every GEMM operand to bf16 (8 significant bits: up to 2^-9 = 0.2%
// relative each) and accumulate in fp32, but they round different tensors: autocast also
// stores GEMM results (and the softmax and GELU outputs computed from them) in bf16 where
// Loom keeps fp32, so they differ by a few independent bf16 roundings per layer, carried
// through two blocks: ~0.5-1% of a gradient tensor's scale. Measured: gradients within 0.76%
// of each tensor's largest magnitude, losses within 0.08% relative, parameters after 10
// AdamW steps within 0.0034 absolute (AdamW moves a weight by up to lr = 1e-3 a step whatever
// its gradient's size, so bf16-level gradient differences become differences of up to
// 10 lr = 0.01 after 10 steps). Bounds, about twice the measurements: gradients 1.5%,
// losses 0.2%, parameters 0.005 absolute. An fp32 run (no bf16) or a missing master (the
// 1e-3 steps lost to bf16 rounding) fails them by far. Where torch's own bf16 GEMM does not sum
// in fp32 (torch 1.13 on an AVX2-only CPU: 18x the output's rounding on a K = 512 product),
// gpt_reference.py emulates autocast's GEMMs as the CPUs with bf16 kernels run them; against
// torch's AVX2 kernel the gradients differed by up to 2.0% of scale.
const Tolerance kBf16Tolerance{.loss_rel = 2e-3, .grad_rel = 1.5e-2, .grad_atol = 0, .param_rel = 0, .param_atol = 5e-3};

TEST(PyTorchOracle, Bf16AutocastGradientsAndAdamW) {
  check_against_pytorch({tiny_config(), 3, 16, kernels::Precision::BF16, kBf16Tolerance});
}

// Attention dropout (p 0.2 on every probability) with PyTorch given Loom's masks: where they
// apply (after the softmax, before the product with V) and how they scale, through forward and
// backward and a mask that changes with the step, at the fp32 tolerances, with and without
// recompute (the replay draws the forward's masks again), together with hidden dropout, and in
// bf16 at the autocast tolerances (its kernel zeroes the dropped exp-scores and folds the
// scale into each row's 1 / sum and into dV's product). T = 16 is one causal block; T = 11
// with hidden dropout off covers an odd length. The masks drop about p of the visible probabilities.
TEST(PyTorchOracle, AttentionDropoutGradientsAndAdamW) {
  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    OracleCase c{tiny_config(recompute), 3, 16};
    c.cfg.attention_dropout = 0.2;
    check_against_pytorch(c);
  }
  {
    SCOPED_TRACE("odd length");
    OracleCase c{tiny_config(), 2, 11};
    c.cfg.attention_dropout = 0.2;
    check_against_pytorch(c);
  }
  {
    SCOPED_TRACE("with hidden dropout");
    OracleCase c{tiny_config(), 3, 16};
    c.cfg.attention_dropout = 0.1;
    c.cfg.hidden_dropout = 0.1;
    check_against_pytorch(c);
  }
  {
    SCOPED_TRACE("bf16");
    OracleCase c{tiny_config(), 3, 16, kernels::Precision::BF16, kBf16Tolerance};
    c.cfg.attention_dropout = 0.2;
    check_against_pytorch(c);
  }
  nn::GPTConfig cfg = tiny_config();
  cfg.attention_dropout = 0.2;
  const int64_t B = 3, T = 16;
  const Tensor m = attention_dropout_masks(cfg, dropout_rows(0), B, T);
  int64_t visible = 0, dropped = 0, scaled = 0;
  for (int64_t r = 0; r < m.numel() / T; ++r)
    for (int64_t j = 0; j <= r % T; ++j) {
      const float v = m.f32()[r * T + j];
      ++visible;
      dropped += v == 0.0f;
      scaled += v == 1.0f / (1.0f - 0.2f);
    }
  const double share = static_cast<double>(dropped) / static_cast<double>(visible);  // of 3264 draws
  EXPECT_NEAR(share, 0.2, 0.035);  // 5 standard deviations (0.007 each)
  EXPECT_EQ(scaled, visible - dropped) << "kept probabilities scale by 1 / (1 - p)";
}

}  // namespace
}  // namespace loom
