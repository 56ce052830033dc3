// `loom bench gemm`: the fp32 and bf16 matmul peaks (the MFU denominators) on transformer
// shapes, with the implementation (ISA) oneDNN dispatched.
// `loom bench train`: median time of full training steps (forward, backward, AdamW) of a
// GPT on random tokens, as JSON, for bench/train_vs_pytorch.sh to put next to PyTorch.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/peak_flops.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "timing.hpp"

namespace loom::apps {

namespace {

struct BenchArgs {
  std::vector<int> threads{1, 2};
  nn::GPTConfig model;
  int64_t batch_size = 8;
  int64_t steps = 10;
  int64_t warmup = 2;
  int bench_threads = 0;
  std::string precision = "fp32";
};

// Median GFLOP/s of C = A B^T with operands already in the precision (bf16: no conversion timed).
double gemm_rate(int64_t M, int64_t N, int64_t K, kernels::Precision precision) {
  std::vector<float> A(M * K, 0.5f), B(N * K, 0.25f), C(M * N);
  std::vector<bfloat16> Ab(A.size(), to_bf16(0.5f)), Bb(B.size(), to_bf16(0.25f));
  const bool bf16 = precision == kernels::Precision::BF16;
  auto run = [&] {
    if (bf16)
      kernels::matmul(Ab.data(), kernels::Trans::N, Bb.data(), kernels::Trans::T, C.data(), M, N, K);
    else
      kernels::matmul(A.data(), kernels::Trans::N, B.data(), kernels::Trans::T, C.data(), M, N, K);
  };
  run();  // primitive creation
  std::vector<double> rates;
  const auto start = Clock::now();
  while (rates.size() < 3 || (seconds_since(start) < 0.5 && rates.size() < 50)) {
    const auto t0 = Clock::now();
    run();
    rates.push_back(2.0 * static_cast<double>(M * N * K) / seconds_since(t0) / 1e9);
  }
  return median(rates);
}

int run_gemm(const BenchArgs& a) {
  // Checked before the first row is printed; 0 is all cores, as for `loom train --threads`.
  for (int t : a.threads) kernels::check_thread_count(t);
  struct Shape {
    const char* name;
    int64_t M, N, K;
  };
  const Shape shapes[] = {{"square 1024", 1024, 1024, 1024},
                          {"gpt-mini qkv (2048x1152x384)", 2048, 1152, 384},
                          {"gpt-mini mlp (2048x1536x384)", 2048, 1536, 384},
                          {"gpt2 mlp (4096x3072x768)", 4096, 3072, 768},
                          {"gpt2 lm head (4096x50304x768)", 4096, 50304, 768}};
  std::printf("oneDNN implementation: fp32 %s, bf16 %s\n", kernels::matmul_implementation(1024, 1024, 1024, false).c_str(),
              kernels::matmul_implementation(1024, 1024, 1024, true).c_str());
  if (const std::string warning = kernels::bf16_speed_warning(); !warning.empty()) std::printf("%s\n", warning.c_str());
  // The shapes from kRepackMinRows rows on include that reorder, as training's products do.
  auto repacked = [](bool bf16) { return kernels::matmul_reads_blocked_weights(bf16) ? "yes" : "no"; };
  std::printf("B reordered into oneDNN's blocked layout per product of >= %lld rows: fp32 %s, bf16 %s\n",
              static_cast<long long>(kernels::kRepackMinRows), repacked(false),
              repacked(kernels::native_bf16_matmul()));
  std::printf("%-32s %8s %12s %12s %8s\n", "shape (M x N x K)", "threads", "fp32 GFLOP/s", "bf16 GFLOP/s", "bf16/fp32");
  for (int t : a.threads) {
    kernels::set_num_threads(t);
    for (const Shape& s : shapes) {
      const double fp32 = gemm_rate(s.M, s.N, s.K, kernels::Precision::F32);
      const double bf16 = gemm_rate(s.M, s.N, s.K, kernels::Precision::BF16);
      std::printf("%-32s %8d %12.1f %12.1f %8.2f\n", s.name, kernels::num_threads(), fp32, bf16, bf16 / fp32);
      std::fflush(stdout);  // a row as soon as it is measured, through a pipe too
    }
  }
  return 0;
}

int run_train(BenchArgs a) {
  kernels::set_num_threads(a.bench_threads);
  const kernels::PrecisionScope precision(kernels::parse_precision(a.precision));
  a.model.validate();
  // An empty batch divides by zero; without timed steps there is no median to report.
  check(a.batch_size >= 1, "--batch-size must be >= 1, got ", a.batch_size);
  check(a.steps >= 1, "--steps must be >= 1 (timed steps), got ", a.steps);
  check(a.warmup >= 0, "--warmup must be >= 0, got ", a.warmup);
  nn::GPT model(a.model, 1);
  optim::AdamW opt(model.parameters(), optim::AdamWConfig{});
  const int64_t B = a.batch_size, T = a.model.block_size, V = a.model.vocab_size;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  Tensor inputs = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) {
    inputs.i32()[i] = token(rng);
    targets.i32()[i] = token(rng);
  }
  std::vector<double> times;
  float loss = 0.0f;
  for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
    const auto t0 = Clock::now();
    kernels::new_weights_generation();  // the step's bf16 weight copies (bf16 only)
    opt.zero_grad();
    {
      MemoryScope scope(MemoryCategory::Activations);
      nn::Context ctx;
      Tensor logits = model.forward(inputs, ctx);
      loss = nn::cross_entropy_loss(logits, targets, V);
      nn::cross_entropy_loss_backward(logits, targets, V, 1.0f);
      model.backward(logits, ctx);
    }
    opt.step(1e-4f);
    if (s >= a.warmup) times.push_back(seconds_since(t0));
  }
  const double step_s = median(times);
  const double tokens_per_s = static_cast<double>(B * T) / step_s;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const nlohmann::json out = {{"impl", "loom"},
                              {"precision", a.precision},
                              {"threads", kernels::num_threads()},
                              {"params", a.model.num_parameters()},
                              {"batch_size", B},
                              {"block_size", T},
                              {"median_step_s", step_s},
                              {"step_s", times},  // each timed step: a slow outlier shows here
                              {"tokens_per_s", tokens_per_s},
                              {"model_gflops_per_s", tokens_per_s * a.model.flops_per_token(T) / 1e9},
                              {"tracked_peak_bytes", MemoryTracker::instance().total_peak()},
                              {"max_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024},
                              {"final_loss", loss}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

Runner add_bench_command(CLI::App& sub) {
  auto args = std::make_shared<BenchArgs>();
  sub.require_subcommand(1);
  CLI::App* gemm = sub.add_subcommand("gemm", "fp32 and bf16 GEMM GFLOP/s on transformer shapes (example: loom bench gemm --threads 1,2)");
  gemm->add_option("--threads", args->threads, "thread counts to measure; 0 = all cores")->delimiter(',');
  gemm->allow_extras();
  CLI::App* tr = sub.add_subcommand("train", "median training-step time on random tokens, as JSON "
                                             "(example: loom bench train --n-layer 6 --n-embd 384 --n-head 6)");
  tr->allow_extras();
  tr->add_option("--n-layer", args->model.n_layer, "transformer blocks");
  tr->add_option("--n-head", args->model.n_head, "attention heads");
  tr->add_option("--n-embd", args->model.n_embd, "model width");
  tr->add_option("--block-size", args->model.block_size, "sequence length");
  tr->add_option("--vocab-size", args->model.vocab_size, "vocabulary size (tokens are random)");
  tr->add_option("--batch-size", args->batch_size, "sequences per step");
  tr->add_option("--steps", args->steps, "timed steps");
  tr->add_option("--warmup", args->warmup, "untimed steps first");
  tr->add_option("--threads", args->bench_threads, "compute threads; 0 = all cores");
  tr->add_flag("--recompute", args->model.recompute, "recompute activations in backward");
  tr->add_option("--precision", args->precision, "fp32, or bf16 (mixed precision: bf16 GEMMs, fp32 master weights)");
  auto comm_runner = std::make_shared<Runner>();
  add_comm_bench(sub, *comm_runner);
  auto generate_runner = std::make_shared<Runner>();
  add_generate_bench(sub, *generate_runner);
  auto spmm_runner = std::make_shared<Runner>();
  CLI::App* spmm = add_spmm_bench(sub, *spmm_runner);
  auto balance_runner = std::make_shared<Runner>();
  CLI::App* balance = add_graph_balance_bench(sub, *balance_runner);
  return [args, gemm, tr, comm_runner, generate_runner, spmm, spmm_runner, balance, balance_runner, &sub]() {
    if (sub.got_subcommand("generate")) return (*generate_runner)();
    if (spmm->parsed()) return (*spmm_runner)();
    if (balance->parsed()) return (*balance_runner)();
    if (!gemm->parsed() && !tr->parsed()) return (*comm_runner)();
    if (gemm->parsed()) {
      reject_unknown_flags(*gemm);
      return run_gemm(*args);
    }
    reject_unknown_flags(*tr);
    return run_train(*args);
  };
}

}  // namespace loom::apps
