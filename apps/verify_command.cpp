// `loom verify`: the equivalence harness as a user command. It trains the same small model
// twice from the same seed and global batch: serially (on every rank, locally) and under the
// requested layout (any dp x pp x tp, ZeRO stage, schedule, sequence parallelism), and prints
// per step the loss difference, the gradient (before clipping) and parameter tensors that
// differ most, and the gradient norms before clipping. Exit status 1 when any goes past its
// tolerance: the check users (and CI) can run on any combination.
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
struct Tolerances {
  double loss_rtol = 1e-5;
  double grad_rtol = 1e-3;
  double param_rtol = 1e-3;
  double norm_rtol = 1e-5;
};

// Mixed precision against the serial bf16 run: both round the same GEMM operands to bf16,
// but operands that differ in their last fp32 bits (another reduction order: a row-parallel
// sum, a gradient all-reduce) can round to neighbouring bf16 values, 2^-8 apart relative,
// and such flips propagate through the layers. AdamW's first steps then turn a near-zero
// gradient of the other sign into a parameter difference of 2 lr (0.002 against weights of
// ~0.02: relative 0.1 of the tensor), which the AdamW bound allows (such a gradient is within
// the gradient tolerance of zero). Measured on the default model (5 steps): dp 2 with ZeRO 0
// and 3, tp 2 with sequence parallelism, pp 2: losses within 3.8e-6, gradients within 1.2e-2
// (tp). Activations crossing the model-parallel wires in bf16 add one rounding per crossing
// (2^-9 relative at most): gradients then within 7.1e-3 at step 1 (same parameters) and,
// once AdamW's drift has moved the parameters apart, 5.2e-2 (tp 2, step 2), 3.7e-2 (pp 2).
// That later part is the drift's, not the roundings': with the first step's lr 500 times
// smaller (--warmup-steps 1000) tp 4 x 6 layers stays within 7.9e-3 at steps 2-3, against
// 6.6e-2 at step 2 with the default warmup (past the bound); over 3 seeds x tp 2, 4 x 4, 8
// layers, 2.5e-2 to 6.2e-2, with no trend in depth, so the bound does not scale with the
// layers or a reduction's length. Parameters past the AdamW bound: within 7.9e-3 (tp 4 x 6
// layers), 6.7e-4 (dp 2, ZeRO-3), 4.0e-4 (pp 2 x tp 2, sp). Bounds: 1e-4, 6e-2, 1e-1. A real
// bug (a missing or doubled sum, a wrong slice) shows as errors of order 1 in the gradients.
// Gradient norms: within 1.9e-3 (a mixture of experts whose tokens changed expert, cp 2 x ep
// 4), bound 1e-2.
const Tolerances kBf16Tolerances{1e-4, 6e-2, 1e-1, 1e-2};

// The layout's twin without any parallelism: the same global batch on one process.
// resumed: the layout's run resumed from a checkpoint (config.resume), which the twin then loads too.
train::TrainConfig serial_twin(const train::TrainConfig& c, int64_t padded_vocab, bool resumed) {
  train::TrainConfig s = c;
  s.batch_size = c.batch_size * c.batch_shards();
  s.dp = s.pp = s.tp = s.cp = s.ep = 1;
  s.tp_3d = "";
  s.graph_aggregation_chunks = 1;  // the grid's blocked aggregation: one SpMM serially
  s.zero = s.hsdp_shard = 0;
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

std::string fmt(double x, const char* format = "%.0e") {
  char text[32];
  std::snprintf(text, sizeof text, format, x);
  return text;
}

int verify(const train::TrainConfig& config, const Tolerances& tol, comm::ProcessGroup* world) {
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
    std::printf("verify: %s, dp %lld x pp %lld x cp %lld x tp %lld, zero %lld%s%s%s%s, %lld micro-batch(es) of %lld; tolerances: loss "
                "%.0e, gradients %.0e, parameters %.0e past the AdamW bound, gradient norm %.0e (relative)\n",
                config.precision.c_str(), static_cast<long long>(config.dp), static_cast<long long>(config.pp),
                static_cast<long long>(config.cp), static_cast<long long>(config.tp),
                static_cast<long long>(config.zero), config.sequence_parallel ? ", sequence parallel" : "",
                config.tp_3d_on() ? (", tp_3d " + config.tp_3d).c_str() : "",
                config.pp > 1 ? (", schedule " + (config.schedule_file.empty() ? config.schedule : config.schedule_file)).c_str() : "",
                experts.c_str(), static_cast<long long>(config.micro_batches), static_cast<long long>(config.batch_size), tol.loss_rtol,
                tol.grad_rtol, tol.param_rtol, tol.norm_rtol);
  bool ok = true;
  int64_t excused = 0;
  train::AdamWBound bound;
  for (int64_t step = 1; step <= config.steps; ++step) {
    train::StepResult want_step = serial.compute_gradients(), got_step = parallel.compute_gradients();
    // Gradients before clipping (the dicts gather collectively): a gradient scaled by any
    // constant would clip to the same update as the serial one.
    const std::map<std::string, Tensor> want_grads = serial.gradient_dict();
    const train::Worst grad = train::worst_gradient_difference(parallel.gradient_dict(), want_grads);
    bound.add_step(config, want_grads, serial.state_dict(), want_step.lr, want_step.grad_norm, serial.step() + 1, tol.grad_rtol);
    serial.apply_update(want_step);
    parallel.apply_update(got_step);
    const float want = want_step.loss, got = got_step.loss;
    const double loss_error = std::fabs(static_cast<double>(got) - want) / std::max(1e-12, std::fabs(static_cast<double>(want)));
    const train::ParameterComparison params =
        train::compare_parameters(parallel.state_dict(), serial.state_dict(), tol.param_rtol, bound.allowances());
    const train::Worst& worst = params.worst;
    const double norm_error = std::fabs(got_step.grad_norm - want_step.grad_norm) / std::max(1e-12, want_step.grad_norm);
    const bool step_ok = loss_error <= tol.loss_rtol && grad.error <= tol.grad_rtol && worst.error <= tol.param_rtol &&
                         norm_error <= tol.norm_rtol;
    ok = ok && step_ok;
    excused += params.excused.elements;
    // One clause, only on a step where the AdamW bound let an element through.
    const std::string excused_note =
        params.excused.elements == 0 ? std::string()
                                     : " | " + std::to_string(params.excused.elements) + " parameter element(s) within the AdamW bound, worst " +
                                           params.excused.worst.name + " (rel " + fmt(params.excused.worst.error, "%.1e") + ")";
    if (speaks)
      std::printf("step %3lld | loss %.6f vs serial %.6f (rel %.1e) | worst gradient %s (rel %.1e) | worst parameter "
                  "%s (rel %.1e) | norm %.6f vs serial %.6f (rel %.1e)%s%s\n",
                  static_cast<long long>(step), got, want, loss_error, grad.name.c_str(), grad.error, worst.name.c_str(), worst.error,
                  got_step.grad_norm, want_step.grad_norm, norm_error, excused_note.c_str(), step_ok ? "" : "  <-- past tolerance");
  }
  if (speaks && excused > 0)
    std::printf("verify: %lld time(s) a parameter element past the parameter tolerance was within the AdamW bound: a "
                "gradient within the gradient tolerance of its own moves it so far (README: what loom verify allows)\n",
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
  auto tol = std::make_shared<Tolerances>();
  const std::string bf16 = "; with --precision bf16 or --grad-reduce-dtype bf16 ";
  auto* loss = sub.add_option("--loss-rtol", tol->loss_rtol, "relative loss tolerance per step [default 1e-5" + bf16 + fmt(kBf16Tolerances.loss_rtol) + "]");
  auto* grad = sub.add_option("--grad-rtol", tol->grad_rtol,
                 "gradient tolerance, relative to each tensor's largest magnitude [default 1e-3" + bf16 + fmt(kBf16Tolerances.grad_rtol) + "]");
  auto* param = sub.add_option("--param-rtol", tol->param_rtol,
                 "parameter tolerance, relative to each tensor's largest magnitude, on what the AdamW bound (README) leaves of each element's difference [default 1e-3" + bf16 + fmt(kBf16Tolerances.param_rtol) + "]");
  auto* norm = sub.add_option("--norm-rtol", tol->norm_rtol,
                 "relative tolerance of the global gradient norm before clipping per step [default 1e-5" + bf16 + fmt(kBf16Tolerances.norm_rtol) + "]");
  std::shared_ptr<ConfigFlags> flags = add_config_flags(sub, defaults);
  return [flags, tol, defaults, loss, grad, param, norm]() {
    train::TrainConfig config = flags->resolve(defaults);
    if (config.family == "gcn") {  // one batch a step, the whole graph: no micro-batches to split it into
      train::TrainConfig gcn_defaults = defaults;
      gcn_defaults.micro_batches = 1;
      config = flags->resolve(gcn_defaults);
    }
    if (config.precision == "bf16" || config.grad_reduce_dtype == "bf16") {  // bf16's defaults where none was given
      if (loss->count() == 0) tol->loss_rtol = kBf16Tolerances.loss_rtol;
      if (grad->count() == 0) tol->grad_rtol = kBf16Tolerances.grad_rtol;
      if (param->count() == 0) tol->param_rtol = kBf16Tolerances.param_rtol;
      if (norm->count() == 0) tol->norm_rtol = kBf16Tolerances.norm_rtol;
    }
    // inf passes anything, nan or a negative fails everything: neither compares the runs.
    for (const auto& [flag, value] : {std::pair{"--loss-rtol", tol->loss_rtol}, {"--grad-rtol", tol->grad_rtol},
                                      {"--param-rtol", tol->param_rtol}, {"--norm-rtol", tol->norm_rtol}})
      check(std::isfinite(value) && value > 0, flag, " must be a finite number > 0, got ", value);
    check(config.steps >= 1, "--steps must be >= 1 (verify compares steps), got ", config.steps);
    const int64_t ranks = config.world_ranks();

    if (!launched_by_mpi()) {
      check(ranks == 1, "layout dp(", config.dp, ") x pp(", config.pp, ") x cp(", config.cp, ") x tp(", config.tp,
            ") needs ", ranks,
            " processes: start it with mpirun -np ", ranks, " loom verify ...");
      return verify(config, *tol, nullptr);
    }
    int status = 0;
    run_on_world([&](comm::ProcessGroup& world) { status = verify(config, *tol, &world); }, config.comm_timeout);
    return status;
  };
}

}  // namespace loom::apps
