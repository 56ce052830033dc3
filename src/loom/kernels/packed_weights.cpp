#include "loom/kernels/packed_weights.hpp"

#include <omp.h>

#include "dnnl.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

using dnnl::memory;

struct PackedWeights::Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// W in the layout a primitive asked for, made from the weights of `generation` at `source`.
struct PackedWeights::Packed {
  memory::desc desc;
  Tensor data;  // category Parameters: a weight copy
  uint64_t generation = 0;
};

struct PackedWeights::Primitive {
  dnnl::matmul matmul;
  memory::desc x, w, y, bias;
};

PackedWeights::PackedWeights() : engine_(std::make_unique<Engine>()) {}
PackedWeights::~PackedWeights() = default;

void PackedWeights::matmul(const float* x, Operand W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  const bool bf16 = W.dtype == DType::BF16;
  // Without oneDNN's bf16 matmul (native_bf16_matmul()) the packed copy holds W's bf16 values
  // widened to fp32 and x is rounded to bf16 and widened: the same products, in fp32.
  const bool widen = bf16 && !native_bf16_matmul();
  const bool bf16_kernel = bf16 && !widen;
  const memory::data_type dt = bf16_kernel ? memory::data_type::bf16 : memory::data_type::f32;
  const std::vector<int64_t> key{M, N, K, bf16_kernel, bias != nullptr, omp_get_max_threads()};
  std::unique_ptr<Primitive>& p = primitives_[key];
  if (!p) {
    p = std::make_unique<Primitive>();
    p->x = memory::desc({M, K}, dt, memory::format_tag::ab);
    p->y = memory::desc({M, N}, memory::data_type::f32, memory::format_tag::ab);
    p->bias = bias ? memory::desc({1, N}, memory::data_type::f32, memory::format_tag::ab) : memory::desc();
    const memory::desc any({K, N}, dt, memory::format_tag::any);
    const dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(p->x, any, p->bias, p->y) : dnnl::matmul::desc(p->x, any, p->y);
    const dnnl::matmul::primitive_desc pd(desc, engine_->engine);
    p->w = pd.weights_desc();
    p->matmul = dnnl::matmul(pd);
  }
  Engine& e = *engine_;
  std::unique_ptr<Packed>& w = packed_[W.data];
  if (!w || w->generation != weights_generation() || w->desc != p->w) {
    // (N, K) row-major is W^T's (K, N) with strides {1, K}: reordered into the primitive's layout.
    if (!w || w->desc.get_size() < p->w.get_size()) {
      w = std::make_unique<Packed>();
      const int64_t elements = static_cast<int64_t>(p->w.get_size()) / (bf16_kernel ? 2 : 4);
      w->data = Tensor::empty({elements}, bf16_kernel ? DType::BF16 : DType::F32, MemoryCategory::Parameters);
    }
    w->desc = p->w;
    w->generation = weights_generation();
    Tensor wide;
    const void* source = W.data;
    if (widen) {
      wide = Tensor::empty({N * K}, DType::F32, MemoryCategory::Other);
      convert_to_f32(static_cast<const bfloat16*>(W.data), wide.f32(), N * K);
      source = wide.raw();
    }
    memory plain(memory::desc({K, N}, dt, memory::dims{1, K}), e.engine, const_cast<void*>(source));
    memory packed(w->desc, e.engine, w->data.raw());
    dnnl::reorder(plain, packed).execute(e.stream, plain, packed);
  }
  Tensor x_rounded;  // x in bf16, or (widened) its bf16 values in fp32
  const void* src = x;
  if (bf16_kernel) {
    x_rounded = Tensor::empty({M * K}, DType::BF16, MemoryCategory::Other);
    convert_to_bf16(x, x_rounded.bf16(), M * K);
    src = x_rounded.raw();
  } else if (widen) {
    x_rounded = Tensor::empty({M * K}, DType::F32, MemoryCategory::Other);
    round_to_bf16_values(x, x_rounded.f32(), M * K);
    src = x_rounded.raw();
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(p->x, e.engine, const_cast<void*>(src))},
                                       {DNNL_ARG_WEIGHTS, memory(w->desc, e.engine, w->data.raw())},
                                       {DNNL_ARG_DST, memory(p->y, e.engine, y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p->bias, e.engine, const_cast<float*>(bias)));
  p->matmul.execute(e.stream, args);
  e.stream.wait();
}

int64_t PackedWeights::bytes() const {
  int64_t total = 0;
  for (const auto& [source, w] : packed_) total += w->data.nbytes();
  return total;
}

}  // namespace loom::kernels
