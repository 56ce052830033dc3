// Shared by the data-parallel equivalence tests: a tiny GPT training config, a run that
// records losses, gradients before clipping and final parameters, and the comparison
// against the serial run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/train/config.hpp"
#include "loom/train/trainer.hpp"
#include "loom/train/verify_compare.hpp"
#include "test_util.hpp"
#include "tiny_config.hpp"

namespace loom::testing::equivalence {

inline train::TrainConfig tiny(int64_t dp, int64_t batch_per_rank, int64_t micro_batches) {
  train::TrainConfig c = tiny_config();
  c.batch_size = batch_per_rank;
  c.micro_batches = micro_batches;
  c.dp = dp;
  c.steps = 20;
  c.warmup_steps = 3;
  // AdamW turns reduction-order noise into steps of up to lr where a gradient is ~0 (and into
  // differences of ~lr x its relative rounding elsewhere): a small lr keeps that well inside
  // the parameter tolerance of 1e-4 at every rank count.
  c.lr = 5e-4;
  c.threads = 1;  // no files (tiny_config): each test compares in memory
  c.bucket_mb = 0.01;  // ~10 KiB: several buckets even for the tiny model
  return c;
}

// Every gradient of one step in the serial layout, keyed "grad.<parameter>".
using Gradients = std::map<std::string, std::vector<float>>;

struct TrainingRun {
  std::vector<float> losses;
  std::vector<std::string> names;
  std::vector<std::vector<float>> params;
  // A serial run's (run(t, grad_rtol)): per parameter element, how far AdamW's updates can move
  // it when each step's gradients are within grad_rtol of this run's, summed over the steps
  // (`loom verify`'s bound, train::AdamWBound). Where a layout's parameters may drift by
  // AdamW's sign noise (Tolerances::adamw_bound), expect_equivalent allows them it too.
  std::optional<train::Allowances> adamw_bound{};
  // Per step, before clipping (a gradient scaled by any constant clips to the same update):
  // the global norm, and the gradients of the first kGradientSteps steps.
  std::vector<double> grad_norms{};
  std::vector<Gradients> grads{};
  // Per step, with a mixture of experts: the share of routed assignments capacity dropped.
  std::vector<double> moe_dropped{};
  // After the last step, when asked for (serial_run's evaluate).
  std::optional<float> val_loss{};
};

// Gradients gathered at these first steps: the reduction is the same code every step, and
// each gather is a round of collectives per tensor.
constexpr int64_t kGradientSteps = 3;

// Collective: the trainer's gradients of the step in progress, copied (the next step
// overwrites them).
inline Gradients gradients_of(train::Trainer& t) {
  Gradients g;
  for (auto& [name, value] : t.gradient_dict()) g[name].assign(value.f32(), value.f32() + value.numel());
  return g;
}

// Adds the step in progress (gradients computed, not yet applied) to the AdamW bound of
// gradients within grad_rtol of t's: the serial run's bound, as `loom verify` keeps it.
inline void add_adamw_step(train::AdamWBound& bound, train::Trainer& t, const train::StepResult& s, double grad_rtol) {
  bound.add_step(t.config(), t.gradient_dict(), t.state_dict(), s.lr, s.grad_norm, t.step() + 1, grad_rtol);
}

// Trains to the config's step count; gradients and norms are read between the backward and
// the optimizer step; the final parameters come from the trainer's state dict, so sharded
// runs report them gathered, in the serial layout. bound_grad_rtol (the serial run, compared
// with the tolerances' `grad`): records the AdamW bound of gradients within it.
inline TrainingRun run(train::Trainer& t, std::optional<double> bound_grad_rtol = std::nullopt) {
  TrainingRun r;
  train::AdamWBound bound;
  for (int64_t step = 1; t.step() < t.config().steps; ++step) {
    train::StepResult s = t.compute_gradients();
    if (step <= kGradientSteps) r.grads.push_back(gradients_of(t));
    if (bound_grad_rtol) add_adamw_step(bound, t, s, *bound_grad_rtol);
    t.apply_update(s);
    r.losses.push_back(s.loss);
    r.grad_norms.push_back(s.grad_norm);
    if (s.moe.present) r.moe_dropped.push_back(s.moe.dropped_fraction);
  }
  for (auto& [name, value] : t.state_dict()) {
    if (name.rfind("model.", 0) != 0) continue;
    r.names.push_back(name.substr(6));
    r.params.emplace_back(value.f32(), value.f32() + value.numel());
  }
  if (bound_grad_rtol) r.adamw_bound = bound.allowances();
  return r;
}

// The serial run of c (with bound_grad_rtol, its AdamW bound; with evaluate, its validation
// loss after the last step), trained once per process and kept: a table compares many layouts
// with the same serial run, and every rank trains it on its own, so 8 ranks on 2 cores trained
// each one 8 times over for every layout of every variant. Keyed by every configuration key
// (train::to_toml) and the vocabulary, which the data sets and no key names.
inline const TrainingRun& serial_run(train::TrainConfig c, std::optional<double> bound_grad_rtol = std::nullopt,
                                     bool evaluate = false) {
  static std::map<std::string, TrainingRun> runs;
  std::string key = train::to_toml(c) + "\nvocab_size = " + std::to_string(c.model.vocab_size);
  if (bound_grad_rtol) key += "\nbound_grad_rtol = " + std::to_string(*bound_grad_rtol);
  if (evaluate) key += "\nevaluate";
  auto it = runs.find(key);
  if (it == runs.end()) {
    train::Trainer serial(c, /*quiet=*/true);
    TrainingRun r = run(serial, bound_grad_rtol);
    if (evaluate) r.val_loss = serial.evaluate();
    it = runs.emplace(std::move(key), std::move(r)).first;
  }
  return it->second;
}

// Each gradient within rtol of its serial tensor's largest magnitude: reduction order moves
// a gradient by rounding, a missing or doubled sum by a multiple of itself.
inline ::testing::AssertionResult gradients_match(const Gradients& got, const Gradients& want, double rtol,
                                                  const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " gradients, serially " << want.size();
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    if (it == got.end()) return ::testing::AssertionFailure() << what << ": no " << name;
    float scale = 0.0f;
    for (float x : w) scale = std::max(scale, std::fabs(x));
    ::testing::AssertionResult close = all_close(it->second, w, 0, rtol * scale, what + " " + name);
    if (!close) return close;
  }
  return ::testing::AssertionSuccess();
}

// Losses and gradient norms: relative 1e-5 each. Gradients (before clipping, the first
// kGradientSteps steps): relative 1e-4 of each tensor's largest magnitude. Parameters:
// relative 1e-4 of each tensor's largest magnitude, except the key third of each attention
// QKV bias: its true gradient is exactly zero (a constant added to every key of a query
// leaves the softmax unchanged), so AdamW steps it by rounding noise, which differs with the
// reduction order; it is held to the drift bound 2 * steps * lr instead. Runs that recorded
// no gradients (a resumed run against part of another) compare losses and parameters only.
// Mixed precision (bf16) passes its own, looser bounds: see kBf16Tolerances.
struct Tolerances {
  double loss = 1e-5, grad_norm = 1e-5, grad = 1e-4, param = 1e-4;
  // Also allow each parameter element the serial run's AdamW bound (TrainingRun::adamw_bound),
  // for runs whose near-zero gradients may differ in sign (bf16): AdamW steps such an element
  // by up to lr either way, one of ordinary size by next to nothing whatever its rounding.
  bool adamw_bound = false;
};
// bf16 against the serial bf16 run: both round the same GEMM operands to bf16, but values that
// differ in their last fp32 bits (another reduction order, another row split) can round to
// neighbouring bf16 values, 2^-8 apart relative, and such flips propagate through the layers;
// AdamW's first steps turn a near-zero gradient of the other sign into a parameter difference
// of up to 2 lr a step: parameters pass within 1e-1 of their tensor's scale plus the AdamW
// bound of gradients within 6e-2 (a LayerNorm bias starting at 0 differed by 9.8e-4 at
// dp 5; the bound gives an element up to 2 lr a step where its gradient is within 6e-2 of the
// tensor's scale of zero, next to nothing where it is of ordinary size: not the 2 x steps x lr
// AdamW can move any element by). The other bounds are `loom verify --precision bf16`'s
// (measured there: losses 3.8e-6, gradients 1.2e-2 of each tensor's scale); the gradient
// norm, a sum over all those gradients, differed by up to 1.8e-4 relative (dp 3): bound 1e-3.
// Activations crossing the model-parallel wires in bf16 (comm/activation_wire.hpp) add one
// rounding per crossing, at most 2^-9 relative (half of bf16's 2^-8 spacing): with the same
// parameters (step 1) gradients stay within 7.1e-3 of their tensor's scale; from step 2 the
// runs' parameters differ by AdamW's sign-noise drift above, and the gradients computed from
// them by up to 3.2e-2 (pp 2 x dp 2, a fc bias at step 2) here and 5.2e-2 under `loom verify`
// (tp 2, 8 layers): bound 6e-2, some 15 bf16 spacings; a real bug is off by order 1.
inline const Tolerances kBf16Tolerances{.loss = 1e-4, .grad_norm = 1e-3, .grad = 6e-2, .param = 1e-1, .adamw_bound = true};

// The final parameters: each element within tol.param of its tensor's largest magnitude, plus,
// under tol.adamw_bound, the serial run's AdamW bound (as `loom verify` allows: the tolerance
// on what the bound leaves of the difference). The key third of each QKV bias
// is held to AdamW's drift 2 x steps x lr instead, and its scale left out of the tensor's: its
// true gradient is zero, so each run moves it by its own rounding noise, through moments of
// its own; the bound, one run's moments moved by gradients within the tolerance, does not
// cover that (a bf16 cp 2 x tp 2 layout went 1.3% past it).
inline ::testing::AssertionResult parameters_match(const TrainingRun& got, const TrainingRun& serial,
                                                   const train::TrainConfig& c, const Tolerances& tol,
                                                   const std::string& what) {
  if (got.params.size() != serial.params.size())
    return ::testing::AssertionFailure() << what << ": " << got.params.size() << " parameters, serially " << serial.params.size();
  if (tol.adamw_bound && !serial.adamw_bound)
    return ::testing::AssertionFailure() << what << ": the serial run recorded no AdamW bound: run(serial, tol.grad)";
  const size_t C = static_cast<size_t>(c.model.n_embd);
  const double drift = 2.0 * static_cast<double>(c.steps) * c.lr;
  for (size_t i = 0; i < serial.params.size(); ++i) {
    const std::vector<float>& got_i = got.params[i];
    const std::vector<float>& want = serial.params[i];
    if (got_i.size() != want.size())
      return ::testing::AssertionFailure() << what << " " << serial.names[i] << ": " << got_i.size() << " elements, serially " << want.size();
    const bool qkv_bias = serial.names[i].ends_with("attn.qkv.bias");
    auto zero_gradient = [&](size_t k) { return qkv_bias && k >= C && k < 2 * C; };
    float scale = 0.0f;
    for (size_t k = 0; k < want.size(); ++k)
      if (!zero_gradient(k)) scale = std::max(scale, std::fabs(want[k]));
    const std::vector<float>* bound = nullptr;  // none: not AdamW
    if (tol.adamw_bound)
      if (const auto it = serial.adamw_bound->find("model." + serial.names[i]); it != serial.adamw_bound->end()) bound = &it->second;
    for (size_t k = 0; k < want.size(); ++k) {
      const double adamw = bound == nullptr ? 0.0 : (*bound)[k];
      const double allowed = zero_gradient(k) ? drift : tol.param * scale + adamw;
      const double diff = std::fabs(static_cast<double>(got_i[k]) - want[k]);
      if (!(diff <= allowed))
        return ::testing::AssertionFailure() << what << " " << serial.names[i] << "[" << k << "]"
                                             << (zero_gradient(k) ? " (k, zero gradient)" : "") << ": " << got_i[k] << " vs serial "
                                             << want[k] << ", off by " << diff << " past " << allowed << " (" << tol.param
                                             << " x scale " << scale << " + AdamW bound " << adamw << "; drift " << drift << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline void expect_equivalent(const TrainingRun& ddp, const TrainingRun& serial, const train::TrainConfig& c,
                       const std::string& what, const Tolerances& tol = {}) {
  ASSERT_EQ(ddp.losses.size(), serial.losses.size());
  EXPECT_TRUE(all_close(ddp.losses, serial.losses, tol.loss, 0, what + " losses"));
  if (!ddp.grads.empty() && !serial.grads.empty()) {
    ASSERT_EQ(ddp.grads.size(), serial.grads.size());
    std::vector<float> got_norms(ddp.grad_norms.begin(), ddp.grad_norms.end()),
        want_norms(serial.grad_norms.begin(), serial.grad_norms.end());
    EXPECT_TRUE(all_close(got_norms, want_norms, tol.grad_norm, 0, what + " gradient norms before clipping"));
    for (size_t s = 0; s < serial.grads.size(); ++s)
      EXPECT_TRUE(gradients_match(ddp.grads[s], serial.grads[s], tol.grad,
                                  what + " step " + std::to_string(s + 1) + " gradient before clipping"));
  }
  if (!serial.params.empty()) {
    EXPECT_TRUE(parameters_match(ddp, serial, c, tol, what));
  }
}

// A checkpoint directory every rank of one machine sees, emptied by rank 0 before use.
inline std::string fresh_shared_dir(const std::string& name, comm::ProcessGroup& world) {
  const std::string dir = std::filesystem::temp_directory_path() / (name + "_np" + std::to_string(world.size()));
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier();
  return dir;
}

inline void remove_shared_dir(const std::string& dir, comm::ProcessGroup& world) {
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// Trains c's layout for `steps` steps and saves a checkpoint into dir (c's checkpoint format).
inline void train_and_checkpoint(train::TrainConfig c, int64_t steps, const std::string& dir,
                                 comm::ProcessGroup& world) {
  c.steps = steps;
  c.out_dir = dir;
  train::Trainer saver(c, true, &world);
  run(saver);
  saver.save_checkpoint_now();
}

}  // namespace loom::testing::equivalence
