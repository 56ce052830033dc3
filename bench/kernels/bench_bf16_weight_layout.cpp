// Would oneDNN's bf16 matmul run faster on weights reordered into the layout it prefers
// (memory format `any`) than on the plain (out, in) bf16 copy Loom keeps of each weight?
// The two products of training that read a weight, forward y = x W^T and backward dx = dy W,
// on gpt2-small's Linear shapes at B T = 1024 and 4096 rows, bf16 operands and fp32 results
// as Loom runs them:
//   BM_Bf16WeightPlain   the product on W as stored (Loom's path below kRepackMinRows rows);
//   BM_Bf16WeightPacked  the product on W reordered beforehand (the product alone);
//   BM_Bf16WeightRepack  that reorder, which Loom pays per product from kRepackMinRows
//                        rows on (matmul.hpp), and a per-step cache would pay once per step
//                        for each of the two products (their preferred layouts differ).
// Per call, packing pays when plain - packed exceeds the repack; a cache would pay when
// (plain - packed) x the products a step runs on that weight does, for 2 bytes a parameter
// per layout kept. Argument: thread count. The oneDNN implementation (and so the ISA) is
// printed as the benchmark's label.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "dnnl.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/tensor/dtype.hpp"

namespace {

using dnnl::memory;
using loom::bfloat16;

enum class Product { Forward, InputGradient };
enum class Form { Plain, Packed, Repack };

struct Shape {
  int64_t rows, in, out;
};

// The product's dimensions: y (M, N) = a (M, K) b (K, N); b is W^T (forward) or W (dx).
struct Dims {
  int64_t M, N, K;
};
Dims dims_of(Shape s, Product p) { return p == Product::Forward ? Dims{s.rows, s.out, s.in} : Dims{s.rows, s.in, s.out}; }

// W (out, in) row-major seen as the product's b (K, N): W^T for forward (strides {1, in}),
// W itself for dx.
memory::desc plain_weights(Shape s, Product p) {
  const Dims d = dims_of(s, p);
  return p == Product::Forward ? memory::desc({d.K, d.N}, memory::data_type::bf16, memory::dims{1, d.K})
                               : memory::desc({d.K, d.N}, memory::data_type::bf16, memory::format_tag::ab);
}

void BM_Bf16Weight(benchmark::State& state, Shape s, Product p, Form form) {
  loom::kernels::set_num_threads(static_cast<int>(state.range(0)));
  if (!loom::kernels::native_bf16_matmul()) {
    state.SkipWithError("no oneDNN bf16 matmul on this CPU");
    return;
  }
  const Dims d = dims_of(s, p);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_desc({d.M, d.K}, memory::data_type::bf16, memory::format_tag::ab);
  const memory::desc c_desc({d.M, d.N}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc plain_desc = plain_weights(s, p);
  const memory::desc b_desc =
      form == Form::Plain ? plain_desc : memory::desc({d.K, d.N}, memory::data_type::bf16, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  std::vector<bfloat16> a(static_cast<size_t>(d.M * d.K), loom::to_bf16(0.01f));
  std::vector<bfloat16> w(static_cast<size_t>(d.K * d.N), loom::to_bf16(0.02f));
  std::vector<float> c(static_cast<size_t>(d.M * d.N));
  memory a_mem(a_desc, engine, a.data()), c_mem(c_desc, engine, c.data());
  memory plain(plain_desc, engine, w.data()), b_mem(pd.weights_desc(), engine);
  dnnl::reorder(plain, b_mem).execute(stream, plain, b_mem);
  stream.wait();
  const dnnl::matmul matmul(pd);
  const dnnl::reorder repack(plain, b_mem);
  for (auto _ : state) {
    if (form == Form::Repack)
      repack.execute(stream, plain, b_mem);
    else
      matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  }
  if (form != Form::Repack)
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * d.M * d.N * d.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(pd.impl_info_str());
  loom::kernels::set_num_threads(1);
}

#define LOOM_BF16_LAYOUT(name, rows, in, out)                                                                    \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_fwd_plain, Shape{rows, in, out}, Product::Forward, Form::Plain)        \
      ->Arg(1)->Arg(2)->UseRealTime();                                                                            \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_fwd_packed, Shape{rows, in, out}, Product::Forward, Form::Packed)      \
      ->Arg(1)->Arg(2)->UseRealTime();                                                                            \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_fwd_repack, Shape{rows, in, out}, Product::Forward, Form::Repack)      \
      ->Arg(1)->Arg(2)->UseRealTime();                                                                            \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_dinp_plain, Shape{rows, in, out}, Product::InputGradient, Form::Plain) \
      ->Arg(1)->Arg(2)->UseRealTime();                                                                            \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_dinp_packed, Shape{rows, in, out}, Product::InputGradient,            \
                    Form::Packed)                                                                                 \
      ->Arg(1)->Arg(2)->UseRealTime();                                                                            \
  BENCHMARK_CAPTURE(BM_Bf16Weight, name##_dinp_repack, Shape{rows, in, out}, Product::InputGradient,            \
                    Form::Repack)                                                                                 \
      ->Arg(1)->Arg(2)->UseRealTime()

// gpt2-small, batch 1 and batch 4 of 1024 tokens.
LOOM_BF16_LAYOUT(gpt2_small_qkv_1k, 1024, 768, 2304);
LOOM_BF16_LAYOUT(gpt2_small_fc_1k, 1024, 768, 3072);
LOOM_BF16_LAYOUT(gpt2_small_fc_proj_1k, 1024, 3072, 768);
LOOM_BF16_LAYOUT(gpt2_small_lm_head_1k, 1024, 768, 50304);
LOOM_BF16_LAYOUT(gpt2_small_qkv_4k, 4096, 768, 2304);
LOOM_BF16_LAYOUT(gpt2_small_attn_proj_4k, 4096, 768, 768);
LOOM_BF16_LAYOUT(gpt2_small_fc_4k, 4096, 768, 3072);
LOOM_BF16_LAYOUT(gpt2_small_fc_proj_4k, 4096, 3072, 768);
LOOM_BF16_LAYOUT(gpt2_small_lm_head_4k, 4096, 768, 50304);

}  // namespace
