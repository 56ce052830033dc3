// `loom verify`: the equivalence harness as a user command. It trains the same small model
// twice from the same seed and global batch: serially (on every rank, locally) and under the
// requested layout (any dp x pp x tp, ZeRO stage, schedule, sequence parallelism), and prints
// per step the loss difference, the gradient (before clipping) and parameter tensors that
// differ most, and the gradient norms before clipping. Exit status 1 when any goes past its
// tolerance: the check users (and CI) can run on any combination. By default the serial run
// takes the layout's state after each step (re-anchored), so each step is compared from the
// same parameters and moments; --no-reanchor lets the two drift apart.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "loom/train/verify_compare.hpp"

namespace loom::apps {

namespace {

// Gradients and parameters get a looser default than losses: in AdamW's first steps a parameter that
// starts at zero (a bias) is only ~lr large; a real bug (a missing sum, a wrong slice) shows
// as errors of order 1. Elements whose gradient is near zero (of eps's order) move by an
// amount that amplifies reduction-order rounding far past any such tolerance: each parameter
// element is allowed, on top of param_rtol, what a gradient within grad_rtol can change its
// AdamW update by (train::AdamWBound), next to nothing for a gradient of ordinary size.
//
// The global gradient norm before clipping (what clipping scales by) is compared too: a norm
// summed over the wrong group or counting a replica twice leaves every gradient right, and
// AdamW normalises a clipped gradient's constant factor away, so only the norm shows it.
// fp32 norms differ by reduction order alone: within 1.3e-7 over 237 steps of 1-8 rank
// layouts (dp, ZeRO, tp, sp, pp, cp, ep, tp_3d).
//
// Re-anchored (the default, VerifyMode::reanchor) every step starts both runs from the same
// parameters and moments, so the tolerances are one step's: measured by bench/verify_noise.py
// on 51 layouts of 1-8 ranks (dp 2-8 with ZeRO 0-3, HSDP and each all-reduce; tp 2-4 with
// and without sp; pp 2-4 in gpipe, 1f1b, interleaved; cp 2-4; 3D grids; ep 2-4; mixes), 3
// steps each, on 2026-11-29. fp32: gradients within 5.8e-7 (the same at step 1 as later:
// nothing compounds), so the gradient tolerance 1e-4 leaves a margin of 170x, which bigger
// models' longer reductions can use (a sum's rounding grows with its length), and makes the
// AdamW bound, derived from it, 10x tighter than the former 1e-3 did; the parameters past
// that bound within 2.3e-7, moments within their bound, losses within 1.2e-7, norms within
// 7.5e-8.
struct Tolerances {
  double loss_rtol, grad_rtol, param_rtol, norm_rtol;
};
const Tolerances kFp32Tolerances{1e-5, 1e-4, 1e-3, 1e-5};

// Free-running (--no-reanchor) the runs drift apart: reduction-order rounding moves AdamW's
// near-zero-gradient elements by up to 2 lr (which the bound allows), and the next gradients
// are taken at different parameters. fp32 gradients then reach 3.9e-4 by step 3 (tp 4,
// against 5.8e-7 re-anchored; parameters past the bound 5.3e-5), so the old 1e-3 stays.
const Tolerances kFp32FreeRunningTolerances{1e-5, 1e-3, 1e-3, 1e-5};

// Mixed precision against the serial bf16 run: both round the same GEMM operands to bf16,
// but operands that differ in their last fp32 bits (another reduction order: a row-parallel
// sum, a gradient all-reduce) can round to neighbouring bf16 values, 2^-8 apart relative,
// and such flips propagate through the layers; activations crossing the model-parallel wires
// in bf16 add one rounding per crossing (2^-9 relative at most). AdamW's first steps then
// turn a near-zero gradient of the other sign into a parameter difference of 2 lr (0.002
// against weights of ~0.02: relative 0.1 of the tensor), which the AdamW bound allows (such a
// gradient is within the gradient tolerance of zero). A real bug (a missing or doubled sum, a
// wrong slice) shows as errors of order 1 in the gradients. Re-anchored, on the same 51
// layouts (a mixture of experts with top-k = E: a top-k < E router flips a token's expert at
// a near-tie, docs/mixed-precision.md): gradients within 9.6e-3 at step 1 and 1.5e-2 later (tp 4; tp 4 x 6
// layers 2.1e-2 at step 4 of 4), parameters past the AdamW bound within 3.3e-3, moments
// within their bound, losses within 3.0e-5, norms within 7.8e-4. Bounds: 1e-4, 6e-2 (3x the
// worst gradient: a rounding can flip an operand to its neighbouring bf16 value, a long
// tail; still 15x below a bug's errors of order 1), 1e-1, 1e-2.
const Tolerances kBf16Tolerances{1e-4, 6e-2, 1e-1, 1e-2};

// Free-running, the drift after step 1 is what the gradients show: on 18 of those layouts
// 9.6e-3 at step 1 (dp 2 x cp 2 x tp 2) and up to 6.6e-2 at step 2 (tp 4 x 6 layers, past the
// bound; with the first step's lr 500 times smaller, 7.9e-3: the drift's, not the roundings');
// parameters past the bound within 2.8e-2, losses 3.2e-5, norms 7.8e-4. Such a layout can go
// past 6e-2 free-running; `--grad-rtol 1e-1` still separates it from a real bug's errors of
// order 1.
const Tolerances kBf16FreeRunningTolerances{1e-4, 6e-2, 1e-1, 1e-2};

const Tolerances& default_tolerances(bool bf16, bool reanchor) {
  return bf16 ? (reanchor ? kBf16Tolerances : kBf16FreeRunningTolerances)
              : (reanchor ? kFp32Tolerances : kFp32FreeRunningTolerances);
}

// The layout's twin without any parallelism: the same global batch on one process.
// resumed: the layout's run resumed from a checkpoint (config.resume), which the twin then loads too.
train::TrainConfig serial_twin(const train::TrainConfig& c, int64_t padded_vocab, bool resumed) {
  train::TrainConfig s = c;
  s.batch_size = c.batch_size * c.batch_shards();
  s.dp = s.pp = s.tp = s.cp = s.ep = 1;
  s.tp_3d = "";
  s.graph_aggregation_chunks = 1;  // the grid's blocked aggregation: one SpMM serially
  s.zero = s.hsdp_shard = 0;
  s.zero3_reshard = "micro-batch";
  s.sequence_parallel = false;
  s.schedule = "1f1b";
  s.schedule_file = "";
  s.chunks = 1;
  s.pipeline_svg = "";  // the layout's picture; the twin has no pipeline
  s.model.padded_vocab_size = padded_vocab;
  // Compared in memory: the twin (one on every rank) writes no run directory, so --out-dir is
  // the layout's alone and no rank's twin contends for its lock; it resumes from the same
  // checkpoint, named by its path ('latest' and 'auto' name one in out_dir).
  s.out_dir = "";
  const bool in_out_dir = c.resume == "latest" || c.resume == "auto";
  s.resume = !resumed ? "" : in_out_dir ? train::resolve_checkpoint_path(c.out_dir) : c.resume;
  return s;
}

// What verify does besides comparing. reanchor: after each step the serial run takes the
// layout's parameters and optimizer moments (Trainer::load_state_dict), so the next step's
// gradients are compared at the same parameters and roundings do not compound over steps.
// inject_gradient_error (hidden, tests): the layout's gradient of one parameter scaled by
// 1 + this before its update, a small error such as a slightly wrong average would make. Only
// the gradient comparison sees it: AdamW's update m / sqrt(v) does not see a constant factor,
// so the parameters and, free-running, the later steps stay as they were.
struct VerifyMode {
  bool reanchor = true;
  double inject_gradient_error = 0.0;
};

// Scales the layout's local gradient of the parameter `name` (on every rank that holds a piece of it).
void inject_gradient_error(train::Trainer& parallel, const std::string& name, double error) {
  for (nn::Module* chunk : parallel.parallelized().chunks)
    for (nn::Parameter* p : chunk->parameters())
      if (p->name() == name && p->grad().defined())
        for (int64_t i = 0; i < p->grad().numel(); ++i) p->grad().f32()[i] *= static_cast<float>(1.0 + error);
}

std::string fmt(double x, const char* format = "%.0e") {
  char text[32];
  std::snprintf(text, sizeof text, format, x);
  return text;
}

int verify(const train::TrainConfig& config, const Tolerances& tol, const VerifyMode& mode, comm::ProcessGroup* world) {
  const bool speaks = world == nullptr || world->rank() == 0;
  train::Trainer parallel(config, /*quiet=*/true, world);
  train::Trainer serial(serial_twin(config, parallel.config().model.resolved_padded_vocab(), parallel.step() > 0), true);
  const nn::MoeConfig& moe = config.model.moe;
  const std::string experts = !moe.enabled() ? std::string()
                                             : ", " + std::to_string(moe.experts) + " experts top-" + std::to_string(moe.top_k) +
                                                   (moe.capacity_factor > 0 ? " with capacity" : " dropless") + " over ep " +
                                                   std::to_string(config.ep);
  if (speaks && config.family == "gcn")  // one batch a step (the whole graph), serial or on a 3D grid
    std::printf("verify: %s, gcn on %s%s; tolerances: loss %.0e, gradients %.0e, parameters %.0e past the AdamW bound, gradient norm %.0e (relative)\n",
                config.precision.c_str(), config.data.c_str(), config.tp_3d_on() ? (", tp_3d " + config.tp_3d).c_str() : "",
                tol.loss_rtol, tol.grad_rtol, tol.param_rtol, tol.norm_rtol);
  else if (speaks)
    std::printf("verify: %s, dp %lld x pp %lld x cp %lld x tp %lld, zero %lld%s%s%s%s%s, %lld micro-batch(es) of %lld; tolerances: loss "
                "%.0e, gradients %.0e, parameters %.0e past the AdamW bound, gradient norm %.0e (relative)\n",
                config.precision.c_str(), static_cast<long long>(config.dp), static_cast<long long>(config.pp),
                static_cast<long long>(config.cp), static_cast<long long>(config.tp),
                static_cast<long long>(config.zero), config.zero3_reshard == "step" ? " (units kept for the step)" : "",
                config.sequence_parallel ? ", sequence parallel" : "",
                config.tp_3d_on() ? (", tp_3d " + config.tp_3d).c_str() : "",
                config.pp > 1 ? (", schedule " + (config.schedule_file.empty() ? config.schedule : config.schedule_file)).c_str() : "",
                experts.c_str(), static_cast<long long>(config.micro_batches), static_cast<long long>(config.batch_size), tol.loss_rtol,
                tol.grad_rtol, tol.param_rtol, tol.norm_rtol);
  if (speaks && mode.reanchor)
    std::printf("verify: re-anchored: each step starts the serial run from the layout's parameters and optimizer "
                "moments, which are compared too (worst moment)\n");
  bool ok = true;
  int64_t excused = 0;
  train::AdamWBound bound;
  for (int64_t step = 1; step <= config.steps; ++step) {
    train::StepResult want_step = serial.compute_gradients(), got_step = parallel.compute_gradients();
    if (mode.inject_gradient_error != 0.0) inject_gradient_error(parallel, "ln_f.bias", mode.inject_gradient_error);
    // Gradients before clipping (the dicts gather collectively): a gradient scaled by any
    // constant would clip to the same update as the serial one.
    const std::map<std::string, Tensor> want_grads = serial.gradient_dict();
    const train::Worst grad = train::worst_gradient_difference(parallel.gradient_dict(), want_grads);
    if (mode.reanchor) bound = train::AdamWBound();  // one step's allowance: the state was the same before it
    bound.add_step(config, want_grads, serial.state_dict(), want_step.lr, want_step.grad_norm, serial.step() + 1, tol.grad_rtol);
    serial.apply_update(want_step);
    parallel.apply_update(got_step);
    const float want = want_step.loss, got = got_step.loss;
    const double loss_error = std::fabs(static_cast<double>(got) - want) / std::max(1e-12, std::fabs(static_cast<double>(want)));
    const std::map<std::string, Tensor> got_state = parallel.state_dict(), want_state = serial.state_dict();
    const train::ParameterComparison params = train::compare_parameters(got_state, want_state, tol.param_rtol, bound.allowances());
    const train::Worst& worst = params.worst;
    const double norm_error = std::fabs(got_step.grad_norm - want_step.grad_norm) / std::max(1e-12, want_step.grad_norm);
    const train::Worst moment = !mode.reanchor ? train::Worst{}
                                               : train::worst_moment_difference(config, got_state, want_state, want_grads,
                                                                                want_step.grad_norm, tol.grad_rtol, tol.norm_rtol);
    if (mode.reanchor) serial.load_state_dict(got_state);
    const bool step_ok = loss_error <= tol.loss_rtol && grad.error <= tol.grad_rtol && worst.error <= tol.param_rtol &&
                         norm_error <= tol.norm_rtol && moment.error <= tol.param_rtol;
    const std::string moment_note =
        !mode.reanchor ? std::string() : " | worst moment " + moment.name + " (rel " + fmt(moment.error, "%.1e") + ")";
    ok = ok && step_ok;
    excused += params.excused.elements;
    // One clause, only on a step where the AdamW bound let an element through.
    const std::string excused_note =
        params.excused.elements == 0 ? std::string()
                                     : " | " + std::to_string(params.excused.elements) + " parameter element(s) within the AdamW bound, worst " +
                                           params.excused.worst.name + " (rel " + fmt(params.excused.worst.error, "%.1e") + ")";
    if (speaks)
      std::printf("step %3lld | loss %.6f vs serial %.6f (rel %.1e) | worst gradient %s (rel %.1e) | worst parameter "
                  "%s (rel %.1e) | norm %.6f vs serial %.6f (rel %.1e)%s%s%s\n",
                  static_cast<long long>(step), got, want, loss_error, grad.name.c_str(), grad.error, worst.name.c_str(), worst.error,
                  got_step.grad_norm, want_step.grad_norm, norm_error, moment_note.c_str(), excused_note.c_str(), step_ok ? "" : "  <-- past tolerance");
  }
  if (speaks && excused > 0)
    std::printf("verify: %lld time(s) a parameter element past the parameter tolerance was within the AdamW bound: a "
                "gradient within the gradient tolerance of its own moves it so far (docs/verify.md: what loom verify allows)\n",
                static_cast<long long>(excused));
  if (speaks) std::printf(ok ? "verify: equivalent to the serial run\n" : "verify: NOT equivalent to the serial run\n");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

Runner add_verify_command(CLI::App& sub) {
  // A model small enough to train twice in seconds, with 4 heads and 8 blocks so most
  // layouts fit; every key can still be set.
  train::TrainConfig defaults;
  defaults.model.n_layer = 8;
  defaults.model.n_head = 4;
  defaults.model.n_embd = 32;
  defaults.model.block_size = 32;
  defaults.batch_size = 2;
  defaults.micro_batches = 4;
  defaults.steps = 5;
  defaults.warmup_steps = 2;
  defaults.lr = 1e-3;
  defaults.threads = 1;
  defaults.out_dir = "";
  auto tol = std::make_shared<Tolerances>(kFp32Tolerances);
  auto mode = std::make_shared<VerifyMode>();
  sub.add_flag("--reanchor,!--no-reanchor", mode->reanchor,
               "after each step set the serial run's parameters and optimizer moments to the layout's (compared too), so "
               "every step is compared from the same state and roundings do not compound over steps; --no-reanchor: "
               "free-running, the runs drift apart (docs/verify.md: what loom verify allows) [default on]");
  sub.add_option("--inject-gradient-error", mode->inject_gradient_error,
                 "tests: scale the layout's ln_f.bias gradient by 1 + this each step")
      ->group("");
  // Each tolerance's defaults: re-anchored fp32 and bf16 (--precision bf16 or --grad-reduce-dtype
  // bf16), then free-running.
  auto defaults_of = [](double Tolerances::*field) {
    return " [default " + fmt(kFp32Tolerances.*field) + ", bf16 " + fmt(kBf16Tolerances.*field) + "; with --no-reanchor " +
           fmt(kFp32FreeRunningTolerances.*field) + ", bf16 " + fmt(kBf16FreeRunningTolerances.*field) + "]";
  };
  auto* loss = sub.add_option("--loss-rtol", tol->loss_rtol, "relative loss tolerance per step" + defaults_of(&Tolerances::loss_rtol));
  auto* grad = sub.add_option("--grad-rtol", tol->grad_rtol,
                 "gradient tolerance, relative to each tensor's largest magnitude" + defaults_of(&Tolerances::grad_rtol));
  auto* param = sub.add_option("--param-rtol", tol->param_rtol,
                 "parameter (and re-anchored, optimizer moment) tolerance, relative to each tensor's largest magnitude, on what the AdamW bound (docs/verify.md) leaves of each element's difference" + defaults_of(&Tolerances::param_rtol));
  auto* norm = sub.add_option("--norm-rtol", tol->norm_rtol,
                 "relative tolerance of the global gradient norm before clipping per step" + defaults_of(&Tolerances::norm_rtol));
  std::shared_ptr<ConfigFlags> flags = add_config_flags(sub, defaults);
  return [flags, tol, mode, defaults, loss, grad, param, norm]() {
    train::TrainConfig config = flags->resolve(defaults);
    if (config.family == "gcn") {  // one batch a step, the whole graph: no micro-batches to split it into
      train::TrainConfig gcn_defaults = defaults;
      gcn_defaults.micro_batches = 1;
      config = flags->resolve(gcn_defaults);
    }
    // The precision's and the mode's defaults where none was given.
    const Tolerances& chosen = default_tolerances(config.precision == "bf16" || config.grad_reduce_dtype == "bf16", mode->reanchor);
    if (loss->count() == 0) tol->loss_rtol = chosen.loss_rtol;
    if (grad->count() == 0) tol->grad_rtol = chosen.grad_rtol;
    if (param->count() == 0) tol->param_rtol = chosen.param_rtol;
    if (norm->count() == 0) tol->norm_rtol = chosen.norm_rtol;
    // inf passes anything, nan or a negative fails everything: neither compares the runs.
    for (const auto& [flag, value] : {std::pair{"--loss-rtol", tol->loss_rtol}, {"--grad-rtol", tol->grad_rtol},
                                      {"--param-rtol", tol->param_rtol}, {"--norm-rtol", tol->norm_rtol}})
      check(std::isfinite(value) && value > 0, flag, " must be a finite number > 0, got ", value);
    // The gradient is scaled by 1 + this: within [-1, 1] it is anything from no gradient to a
    // doubled one; nan or inf would only corrupt the run, and a larger factor tests nothing more.
    check(std::isfinite(mode->inject_gradient_error) && std::fabs(mode->inject_gradient_error) <= 1,
          "--inject-gradient-error must be a finite number within [-1, 1] (the gradient is scaled by 1 + it), got ",
          mode->inject_gradient_error);
    check(config.steps >= 1, "--steps must be >= 1 (verify compares steps), got ", config.steps);
    const int64_t ranks = config.world_ranks();

    if (!launched_by_mpi()) {
      check(ranks == 1, "layout dp(", config.dp, ") x pp(", config.pp, ") x cp(", config.cp, ") x tp(", config.tp,
            ") needs ", ranks,
            " processes: start it with mpirun -np ", ranks, " loom verify ...");
      return verify(config, *tol, *mode, nullptr);
    }
    int status = 0;
    const int failed =
        run_on_world([&](comm::ProcessGroup& world) { status = verify(config, *tol, *mode, &world); }, config.comm_timeout);
    return failed != 0 ? failed : status;
  };
}

}  // namespace loom::apps
