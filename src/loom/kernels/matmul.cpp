#include "loom/kernels/matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <vector>

#include "dnnl.hpp"
#include "loom/error.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

namespace {

using dnnl::memory;
using Key = std::vector<int64_t>;

struct Cached {
  dnnl::matmul primitive;
  memory::desc a, b, c, bias;
};

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;
  std::map<Key, Cached> cache;
};

Engine& engine() {
  static Engine e;
  return e;
}

memory::desc f32_desc(const memory::dims& dims, const memory::dims& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}

// Creates (or finds) the primitive for this exact geometry.
const Cached& primitive_for(const Key& key, const memory::desc& a, const memory::desc& b,
                            const memory::desc& c, const memory::desc& bias, float alpha,
                            bool accumulate) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.cache.find(key);
  if (it != e.cache.end()) return it->second;
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc = bias.is_zero() ? dnnl::matmul::desc(a, b, c) : dnnl::matmul::desc(a, b, bias, c);
  const dnnl::matmul::primitive_desc pd(desc, attr, e.engine);
  Cached entry{dnnl::matmul(pd), a, b, c, bias};
  return e.cache.emplace(key, std::move(entry)).first->second;
}

void execute(const Cached& p, const float* A, const float* B, const float* bias, float* C) {
  Engine& e = engine();
  memory am(p.a, e.engine, const_cast<float*>(A));
  memory bm(p.b, e.engine, const_cast<float*>(B));
  memory cm(p.c, e.engine, C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(p.bias, e.engine, const_cast<float*>(bias)));
  p.primitive.execute(e.stream, args);
  e.stream.wait();
}

// A row-major B is copied to its transpose before the product when that measured faster
// on this machine's oneDNN fp32 matmul (see bench/kernels/bench_matmul.cpp):
//  - when A is row-major too (dx = dy W), the transposed copy lets both operands stream along
//    K: 10-25% faster, and the copy is O(K N) against the O(M N K) product;
//  - when B's rows are a multiple of 4 KiB apart (e.g. 3072 floats), every row lands in the
//    same cache sets and the product runs at under half speed (50-60 vs 110-150 GFLOP/s).
bool pack_b(Trans ta, Trans tb, int64_t M, int64_t N) {
  const bool aliased_rows = (N * static_cast<int64_t>(sizeof(float))) % 4096 == 0;
  return tb == Trans::N && M >= 256 && (ta == Trans::N || aliased_rows);
}

// dst (N, K) = src (K, N)^T, in cache-sized tiles. Inside a tile the inner loop runs along a
// row of dst (contiguous stores, strided loads, vectorised by GCC): 2-4x faster than storing
// along dst's columns, which for a (1536, 384) weight are 6 KiB apart (4K-aliased).
void transpose(const float* __restrict src, float* __restrict dst, int64_t K, int64_t N) {
  constexpr int64_t kTile = 32;
#pragma omp parallel for collapse(2) schedule(static) if (K * N >= (1 << 15))
  for (int64_t k0 = 0; k0 < K; k0 += kTile)
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
      const int64_t k1 = std::min(K, k0 + kTile), n1 = std::min(N, n0 + kTile);
      for (int64_t n = n0; n < n1; ++n)
#pragma omp simd
        for (int64_t k = k0; k < k1; ++k) dst[n * K + k] = src[k * N + n];
    }
}

}  // namespace

void matmul(const float* A, Trans ta, const float* B, Trans tb, float* C, int64_t M, int64_t N,
            int64_t K, const float* bias, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (pack_b(ta, tb, M, N) && K > 0) {
    // A tracked temporary: the caching allocator hands the same block back next time.
    const Tensor packed = Tensor::empty({N, K}, DType::F32, MemoryCategory::Other);  // (N, K)
    transpose(B, packed.f32(), K, N);
    return matmul(A, ta, packed.f32(), Trans::T, C, M, N, K, bias, accumulate);
  }
  const memory::dims a_strides = ta == Trans::N ? memory::dims{K, 1} : memory::dims{1, M};
  const memory::dims b_strides = tb == Trans::N ? memory::dims{N, 1} : memory::dims{1, K};
  const Key key{0, M, N, K, ta == Trans::T, tb == Trans::T, bias != nullptr, accumulate,
                omp_get_max_threads()};
  const memory::desc bias_desc = bias ? f32_desc({1, N}, {N, 1}) : memory::desc();
  const Cached& p = primitive_for(key, f32_desc({M, K}, a_strides), f32_desc({K, N}, b_strides),
                                  f32_desc({M, N}, {N, 1}), bias_desc, 1.0f, accumulate);
  execute(p, A, B, bias, C);
}

void batched_matmul(const BatchedMatmul& d, const float* A, const float* B, float* C) {
  if (d.M == 0 || d.N == 0 || d.batch0 == 0 || d.batch1 == 0) return;
  const memory::dims a_dims{d.batch0, d.batch1, d.M, d.K};
  const memory::dims b_dims{d.batch0, d.batch1, d.K, d.N};
  const memory::dims c_dims{d.batch0, d.batch1, d.M, d.N};
  auto dims = [](const std::array<int64_t, 4>& s) { return memory::dims(s.begin(), s.end()); };
  Key key{1, d.batch0, d.batch1, d.M, d.N, d.K};
  for (auto* s : {&d.a_strides, &d.b_strides, &d.c_strides}) key.insert(key.end(), s->begin(), s->end());
  key.push_back(std::bit_cast<uint32_t>(d.alpha));  // exact, not rounded
  key.push_back(d.accumulate);
  key.push_back(omp_get_max_threads());
  const Cached& p = primitive_for(key, f32_desc(a_dims, dims(d.a_strides)), f32_desc(b_dims, dims(d.b_strides)),
                                  f32_desc(c_dims, dims(d.c_strides)), memory::desc(), d.alpha, d.accumulate);
  execute(p, A, B, nullptr, C);
}

int64_t matmul_primitive_count() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int64_t>(e.cache.size());
}

std::string cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace loom::kernels
