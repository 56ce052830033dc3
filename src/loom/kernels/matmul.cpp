#include "loom/kernels/matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "dnnl.hpp"
#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

namespace {

using dnnl::memory;
using Key = std::vector<int64_t>;

struct Cached {
  dnnl::matmul primitive;
  memory::desc a, b, c, bias;
  bool own_scratchpad = false;  // the caller passes the scratchpad (user mode)
  memory::desc scratchpad;
  // A repacked product's b as callers give it, and the reorder from it into b's blocked layout.
  memory::desc b_plain;
  std::optional<dnnl::reorder> repack;
};

// The capacity of both caches below unless ONEDNN_PRIMITIVE_CACHE_CAPACITY sets it. A primitive
// holds its shape's JIT code and buffers: `loom generate` on a 2-layer width-768 model held
// 1-3 MB per prefill primitive (4 per new prompt length), and with oneDNN's default of 1024 its
// RSS reached 3.3 GB after 300 prompts of 700-999 tokens, 0.75 GB at 128. A training step uses
// about three dozen shapes (the Shakespeare model's, with evaluation), which stay.
constexpr int kDefaultPrimitiveCapacity = 256;

int initial_primitive_capacity() {
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") != nullptr || std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") != nullptr)
    return std::max(1, dnnl::get_primitive_cache_capacity());
  dnnl::set_primitive_cache_capacity(kDefaultPrimitiveCapacity);
  return kDefaultPrimitiveCapacity;
}

// The primitives made so far, the most recently used first, at most `capacity` of them: some
// callers meet a new shape with nearly every call (generation's prefill at each new prompt
// length, a fixed-shape kernel's expert counts), which an unbounded cache kept for the whole
// run. oneDNN's own cache holds the same primitives; the two have one capacity. Entries are
// shared_ptrs: a caller running one keeps it alive through an eviction by another thread.
class PrimitiveCache {
 public:
  using Entry = std::shared_ptr<const Cached>;

  // The entry for key, now the most recent; nullptr when there is none.
  Entry find(const Key& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    recent_.splice(recent_.begin(), recent_, it->second);
    return it->second->second;
  }
  // Adds key's entry (absent before) as the most recent, evicting the least recent past capacity.
  Entry add(const Key& key, Cached entry) {
    recent_.emplace_front(key, std::make_shared<const Cached>(std::move(entry)));
    index_.emplace(key, recent_.begin());
    trim();
    return recent_.front().second;
  }
  void set_capacity(size_t capacity) {
    capacity_ = capacity;
    trim();
  }
  size_t capacity() const { return capacity_; }
  size_t size() const { return index_.size(); }

 private:
  void trim() {
    while (index_.size() > capacity_) {
      index_.erase(recent_.back().first);
      recent_.pop_back();
    }
  }

  std::list<std::pair<Key, Entry>> recent_;
  std::map<Key, std::list<std::pair<Key, Entry>>::iterator> index_;
  size_t capacity_ = static_cast<size_t>(initial_primitive_capacity());
};

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;
  PrimitiveCache cache;
};

std::atomic<int64_t> repacked_products{0};    // matmul_repacked_products()
std::atomic<int64_t> created_primitives{0};  // matmul_primitive_count()

Engine& engine() {
  static Engine e;
  return e;
}

memory::desc f32_desc(const memory::dims& dims, const memory::dims& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}
memory::desc operand_desc(const memory::dims& dims, const memory::dims& strides, bool bf16) {
  return memory::desc(dims, bf16 ? memory::data_type::bf16 : memory::data_type::f32, strides);
}

bool bf16_product(const Operand& A, const Operand& B) {
  return A.dtype == DType::BF16 || B.dtype == DType::BF16 || compute_precision() == Precision::BF16;
}

// An operand in the product's precision: a bf16 operand as it is; an fp32 one as it is in an
// fp32 product, else converted into `scratch` (n contiguous elements).
const void* in_precision(const Operand& op, bool bf16, int64_t n, Tensor& scratch) {
  if (!bf16 || op.dtype == DType::BF16) return op.data;
  scratch = Tensor::empty({n}, DType::BF16, MemoryCategory::Other);
  convert_to_bf16(static_cast<const float*>(op.data), scratch.bf16(), n);
  return scratch.raw();
}

// A dense bf16 copy of a strided (batch0, batch1, rows, cols) view into `scratch`, or the
// view itself when it is a dense bf16 one already: oneDNN 2.6's bf16 kernel (brgemm) takes
// dense operands only, and falls back to a generic gemm slower than fp32's on any other.
// `strides` becomes the copy's, row-major, or column-major per matrix when the view's
// columns are strided and its rows are not (K^T read from a QKV buffer), so that the copy
// reads and writes contiguously along the same dimension as the view does. An fp32 view is
// rounded on the way; a bf16 view (q, k, v kept in bf16) is gathered, a run at a time.
const void* dense_bf16(const Operand& op, const memory::dims& dims, memory::dims& strides, Tensor& scratch) {
  const int64_t b0 = dims[0], b1 = dims[1], R = dims[2], C = dims[3];
  const bool by_rows = strides[3] == 1 || strides[2] != 1;
  const memory::dims dense = by_rows ? memory::dims{b1 * R * C, R * C, C, 1} : memory::dims{b1 * R * C, R * C, 1, R};
  if (op.dtype == DType::BF16 && strides == dense) return op.data;
  const int64_t outer = by_rows ? R : C, inner = by_rows ? C : R;
  const int64_t s_outer = by_rows ? strides[2] : strides[3], s_inner = by_rows ? strides[3] : strides[2];
  scratch = Tensor::empty({b0 * b1 * R * C}, DType::BF16, MemoryCategory::Other);
  bfloat16* dst = scratch.bf16();
  const bool bf16_source = op.dtype == DType::BF16;
#pragma omp parallel for collapse(3) schedule(static) if (b0 * b1 * R * C >= (1 << 15))
  for (int64_t i = 0; i < b0; ++i)
    for (int64_t j = 0; j < b1; ++j)
      for (int64_t o = 0; o < outer; ++o) {
        const int64_t from = i * strides[0] + j * strides[1] + o * s_outer;
        bfloat16* d_row = dst + (i * b1 + j) * R * C + o * inner;
        if (s_inner == 1) {
          copy_run_to_bf16(op.at(from), d_row, inner);
        } else if (bf16_source) {
          const bfloat16* s_row = static_cast<const bfloat16*>(op.data) + from;
          for (int64_t e = 0; e < inner; ++e) d_row[e] = s_row[e * s_inner];
        } else {
          const float* s_row = static_cast<const float*>(op.data) + from;
          for (int64_t e = 0; e < inner; ++e) d_row[e] = to_bf16(s_row[e * s_inner]);
        }
      }
  strides = dense;
  return scratch.raw();
}

// n bf16 values (contiguous) widened to fp32 in `scratch`: the operand of an fp32 product
// standing in for a bf16 one where oneDNN has no bf16 matmul (native_bf16_matmul()).
const float* widened(const void* bf16_data, int64_t n, Tensor& scratch) {
  scratch = Tensor::empty({n}, DType::F32, MemoryCategory::Other);
  convert_to_f32(static_cast<const bfloat16*>(bf16_data), scratch.f32(), n);
  return scratch.f32();
}

// A new primitive for these descriptors (fixed, or with a dimension left to run time); throws
// dnnl::error where oneDNN has no kernel for them.
Cached make_primitive(const memory::desc& a, const memory::desc& b, const memory::desc& c, const memory::desc& bias,
                      float alpha, bool accumulate, bool own_scratchpad, bool repack_b) {
  const Engine& e = engine();
  dnnl::primitive_attr attr;
  if (own_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const memory::desc b_any = repack_b ? memory::desc(b.dims(), b.data_type(), memory::format_tag::any) : b;
  const dnnl::matmul::desc desc =
      bias.is_zero() ? dnnl::matmul::desc(a, b_any, c) : dnnl::matmul::desc(a, b_any, bias, c);
  const dnnl::matmul::primitive_desc pd(desc, attr, e.engine);
  created_primitives.fetch_add(1, std::memory_order_relaxed);
  Cached entry{dnnl::matmul(pd), a, b, c, bias, own_scratchpad, pd.scratchpad_desc(), b, std::nullopt};
  if (repack_b) {  // b becomes the blocked layout oneDNN chose, reached from b as given by a reorder
    entry.b = pd.weights_desc();
    entry.repack = dnnl::reorder(dnnl::reorder::primitive_desc(e.engine, b, e.engine, entry.b));
  }
  return entry;
}

// Creates (or finds) the primitive for this exact geometry.
PrimitiveCache::Entry primitive_for(const Key& key, const memory::desc& a, const memory::desc& b,
                                    const memory::desc& c, const memory::desc& bias, float alpha,
                                    bool accumulate, bool repack_b = false) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (PrimitiveCache::Entry found = e.cache.find(key)) return found;
  // Products called inside a parallel region run on their calling thread, several at once
  // (the bf16 attention's shares, attention_bf16.cpp). oneDNN's library scratchpad is then
  // shared between them and they corrupt each other's packed operands, so those primitives
  // take a scratchpad of each thread's own (their keys hold omp_in_parallel()).
  const bool own_scratchpad = omp_in_parallel() != 0;
  return e.cache.add(key, make_primitive(a, b, c, bias, alpha, accumulate, own_scratchpad, repack_b));
}

// A 2-D product's operand and result descriptors: A (M, K) or stored (K, M), B (K, N) or stored
// (N, K), C (M, N) row-major. M or K may be DNNL_RUNTIME_DIM_VAL (a primitive's varying one).
struct Geometry {
  memory::desc a, b, c;
};
Geometry geometry(int64_t M, int64_t N, int64_t K, Trans ta, Trans tb, bool bf16) {
  const memory::dims a_strides = ta == Trans::N ? memory::dims{K, 1} : memory::dims{1, M};
  const memory::dims b_strides = tb == Trans::N ? memory::dims{N, 1} : memory::dims{1, K};
  return {operand_desc({M, K}, a_strides, bf16), operand_desc({K, N}, b_strides, bf16), f32_desc({M, N}, {N, 1})};
}

// Runs p on these operands; `actual`: this call's geometry, for a primitive whose varying
// dimension is left to run time (its own descriptors then hold DNNL_RUNTIME_DIM_VAL).
void execute(const Cached& p, const void* A, const void* B, const float* bias, float* C,
             const Geometry* actual = nullptr) {
  Engine& e = engine();
  memory am(actual ? actual->a : p.a, e.engine, const_cast<void*>(A));
  memory bm(actual ? actual->b : p.b, e.engine, const_cast<void*>(B));
  Tensor repacked;  // B in the primitive's blocked layout, for this product only
  if (p.repack) {
    memory plain(p.b_plain, e.engine, const_cast<void*>(B));
    // get_size() bytes, in 2-byte elements whatever B's type.
    repacked = Tensor::empty({static_cast<int64_t>(p.b.get_size() + 1) / 2}, DType::BF16, MemoryCategory::Other);
    bm = memory(p.b, e.engine, repacked.raw());
    p.repack->execute(e.stream, plain, bm);
    repacked_products.fetch_add(1, std::memory_order_relaxed);
  }
  memory cm(actual ? actual->c : p.c, e.engine, C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(p.bias, e.engine, const_cast<float*>(bias)));
  if (p.own_scratchpad) {
    // This thread's own scratchpad (primitives run concurrently, see primitive_for).
    thread_local std::vector<std::byte> scratchpad;
    scratchpad.resize(std::max(scratchpad.size(), p.scratchpad.get_size()));
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratchpad, e.engine, scratchpad.data()));
  }
  p.primitive.execute(e.stream, args);
  e.stream.wait();
}

// Where repack_b does not apply (fewer rows, A transposed, a parallel region, no blocked
// weights on this CPU), a row-major B is copied to its transpose before an fp32 product when
// that measured faster on this machine's oneDNN fp32 matmul (see bench/kernels/bench_matmul.cpp):
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

// A product on many rows reads B reordered into the blocked layout oneDNN prefers (memory
// format `any`), reordered for the call and freed after it. On an AVX512-BF16 core (Zen 5, 2
// threads) bf16 products then ran 5-15% faster on gpt2-small's weights at 4096 rows, for a
// reorder of 1.5-3% of the product; at 1024 rows the two about cancel for a block's weight and
// the LM head's still gains 9% (bench/kernels/bench_bf16_weight_layout.cpp). fp32 gains too: a
// gpt2-small step at B 4 ran 2% (1 thread) and 5% (2 threads) faster than with the transposed
// copy above, gpt-mini 1-2%. In fp32 A's rows must be contiguous (ta == N), as a Linear's
// forward and input-gradient products have them: a weight gradient (ta == T, B an activation)
// gained nothing there; in bf16 it does too (a gpt2-small step 2% faster at 1 thread, gpt-mini
// ~5% at 2). Not inside a parallel region (attention's shares), whose products are small. Only
// where oneDNN's kernel for the precision takes blocked weights (brgemm, on AVX-512): its AVX2
// fp32 gemm would take `any` as a dense layout, and the copy would lose pack_b's transposes.
bool repack_b(Trans ta, int64_t M, int64_t K, bool bf16) {
  return (ta == Trans::N || bf16) && M >= kRepackMinRows && K > 0 && omp_in_parallel() == 0 &&
         matmul_reads_blocked_weights(bf16);
}

// The primitive of a product whose `varying` dimension is given at run time, shared by every
// call that differs in that dimension only; nullptr where this CPU's oneDNN has no such kernel
// it should use (matmul_varying_shares_primitive), remembered per key. On an AMD EPYC with
// AVX512-BF16 (2 threads) the run-time kernel (`gemm:jit`) multiplied a mixture of experts' six
// products per expert (C 384, 4C 1536, 256-1024 rows) at 0.7-1.4x, mostly 0.9-1.1x, the
// fixed-shape kernel's rate (brgemm) in fp32 and bf16 alike, while creating a fixed-shape
// primitive cost 1.0-1.3 ms, 40% of a 517-row product. A gpt-mini step with 8 experts, top-2,
// created ~300 of them (its counts rarely repeat): 1.39-1.54 s before, 0.80-0.82 s with this.
PrimitiveCache::Entry runtime_primitive(bool bf16, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, bool bias,
                                        bool accumulate, Varying varying) {
  const int64_t m = varying == Varying::Rows ? DNNL_RUNTIME_DIM_VAL : M;
  const int64_t k = varying == Varying::Inner ? DNNL_RUNTIME_DIM_VAL : K;
  const Key key{2, m, N, k, ta == Trans::T, tb == Trans::T, bias, accumulate, bf16, omp_get_max_threads()};
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  PrimitiveCache::Entry found = e.cache.find(key);
  if (!found) {
    Cached entry;  // a null primitive: this key takes the fixed-shape path
    if (matmul_varying_shares_primitive(bf16)) {
      const Geometry g = geometry(m, N, k, ta, tb, bf16);
      const memory::desc bias_desc = bias ? f32_desc({1, N}, {N, 1}) : memory::desc();
      try {
        entry = make_primitive(g.a, g.b, g.c, bias_desc, 1.0f, accumulate, false, false);
      } catch (const dnnl::error&) {
        // No run-time kernel for these options: the fixed-shape path.
      }
    }
    found = e.cache.add(key, std::move(entry));
  }
  return found->primitive ? found : nullptr;
}

// matmul() in the precision given: bf16 (operands rounded to bf16) or fp32 (as they are).
void matmul_in(bool bf16, Operand A, Trans ta, Operand B, Trans tb, float* C, int64_t M, int64_t N, int64_t K,
               const float* bias, bool accumulate, Varying varying) {
  // Not inside a parallel region: such products take a scratchpad of their thread's own, sized
  // by a fixed shape (primitive_for).
  if (varying != Varying::None && K > 0 && omp_in_parallel() == 0 && (!bf16 || native_bf16_matmul())) {
    if (const PrimitiveCache::Entry p = runtime_primitive(bf16, ta, tb, M, N, K, bias != nullptr, accumulate, varying)) {
      Tensor a_scratch, b_scratch;
      const void* a = in_precision(A, bf16, M * K, a_scratch);
      const void* b = in_precision(B, bf16, K * N, b_scratch);
      const Geometry actual = geometry(M, N, K, ta, tb, bf16);
      return execute(*p, a, b, bias, C, &actual);
    }
  }
  const bool repacked = repack_b(ta, M, K, bf16);  // a widened bf16 product decides again, in fp32
  if (!bf16 && !repacked && pack_b(ta, tb, M, N) && K > 0) {
    // A tracked temporary: the caching allocator hands the same block back next time.
    const Tensor packed = Tensor::empty({N, K}, DType::F32, MemoryCategory::Other);  // (N, K)
    transpose(static_cast<const float*>(B.data), packed.f32(), K, N);
    return matmul_in(false, A, ta, packed.f32(), Trans::T, C, M, N, K, bias, accumulate, Varying::None);
  }
  Tensor a_scratch, b_scratch;
  const void* a = in_precision(A, bf16, M * K, a_scratch);
  const void* b = in_precision(B, bf16, K * N, b_scratch);
  if (bf16 && !native_bf16_matmul()) {  // the same bf16 values, multiplied in fp32
    Tensor a_wide, b_wide;
    const float* aw = widened(a, M * K, a_wide);
    const float* bw = widened(b, K * N, b_wide);
    return matmul_in(false, aw, ta, bw, tb, C, M, N, K, bias, accumulate, varying);
  }
  const Key key{0, M, N, K, ta == Trans::T, tb == Trans::T, bias != nullptr, accumulate, bf16, omp_get_max_threads(),
                omp_in_parallel(), repacked};
  const memory::desc bias_desc = bias ? f32_desc({1, N}, {N, 1}) : memory::desc();
  const Geometry g = geometry(M, N, K, ta, tb, bf16);
  const PrimitiveCache::Entry p = primitive_for(key, g.a, g.b, g.c, bias_desc, 1.0f, accumulate, repacked);
  execute(*p, a, b, bias, C);
}

// batched_matmul() in the precision given.
void batched_matmul_in(bool bf16, const BatchedMatmul& d, Operand A, Operand B, float* C) {
  const memory::dims a_dims{d.batch0, d.batch1, d.M, d.K};
  const memory::dims b_dims{d.batch0, d.batch1, d.K, d.N};
  const memory::dims c_dims{d.batch0, d.batch1, d.M, d.N};
  auto dims = [](const std::array<int64_t, 4>& s) { return memory::dims(s.begin(), s.end()); };
  const std::array<int64_t, 4> dense_c{d.batch1 * d.M * d.N, d.M * d.N, d.N, 1};
  if (bf16 && d.c_strides != dense_c) {
    // oneDNN's AMX (brgemm) matmul takes dense operands only; on a strided result (a block of
    // attention rows, heads inside (B, T, C)) it falls back to a bf16 gemm slower than fp32's.
    // So the product goes to a dense scratch, then into C.
    BatchedMatmul dense = d;
    dense.c_strides = dense_c;
    dense.accumulate = false;
    const Tensor out = Tensor::empty({d.batch0 * d.batch1 * d.M * d.N}, DType::F32, MemoryCategory::Other);
    batched_matmul_in(true, dense, A, B, out.f32());
    const float* src = out.f32();
    const auto& cs = d.c_strides;
#pragma omp parallel for collapse(3) schedule(static) if (d.batch0 * d.batch1 * d.M * d.N >= (1 << 15))
    for (int64_t i = 0; i < d.batch0; ++i)
      for (int64_t j = 0; j < d.batch1; ++j)
        for (int64_t m = 0; m < d.M; ++m) {
          const float* row = src + ((i * d.batch1 + j) * d.M + m) * d.N;
          float* dst = C + i * cs[0] + j * cs[1] + m * cs[2];
          if (cs[3] == 1 && !d.accumulate) {
            std::memcpy(dst, row, sizeof(float) * d.N);
          } else if (cs[3] == 1) {
#pragma omp simd
            for (int64_t n = 0; n < d.N; ++n) dst[n] += row[n];
          } else if (d.accumulate) {
            for (int64_t n = 0; n < d.N; ++n) dst[n * cs[3]] += row[n];
          } else {
            for (int64_t n = 0; n < d.N; ++n) dst[n * cs[3]] = row[n];
          }
        }
    return;
  }
  memory::dims a_strides = dims(d.a_strides), b_strides = dims(d.b_strides);
  Tensor a_scratch, b_scratch;
  const void* a = bf16 ? dense_bf16(A, a_dims, a_strides, a_scratch) : A.data;
  const void* b = bf16 ? dense_bf16(B, b_dims, b_strides, b_scratch) : B.data;
  if (bf16 && !native_bf16_matmul()) {  // the dense bf16 copies, widened and multiplied in fp32
    auto extent = [](const memory::dims& sizes, const memory::dims& strides) {  // elements a strided view spans
      int64_t last = 0;
      for (size_t i = 0; i < sizes.size(); ++i) last += (sizes[i] - 1) * strides[i];
      return last + 1;
    };
    Tensor a_wide, b_wide;  // widened with their strides (a bf16 operand may be a view)
    const float* aw = widened(a, extent(a_dims, a_strides), a_wide);
    const float* bw = widened(b, extent(b_dims, b_strides), b_wide);
    BatchedMatmul wide = d;
    std::copy(a_strides.begin(), a_strides.end(), wide.a_strides.begin());
    std::copy(b_strides.begin(), b_strides.end(), wide.b_strides.begin());
    return batched_matmul_in(false, wide, aw, bw, C);
  }
  Key key{1, d.batch0, d.batch1, d.M, d.N, d.K, bf16};
  for (const auto* s : {&a_strides, &b_strides}) key.insert(key.end(), s->begin(), s->end());
  key.insert(key.end(), d.c_strides.begin(), d.c_strides.end());
  key.push_back(std::bit_cast<uint32_t>(d.alpha));  // exact, not rounded
  key.push_back(d.accumulate);
  key.push_back(omp_get_max_threads());
  key.push_back(omp_in_parallel());
  const PrimitiveCache::Entry p =
      primitive_for(key, operand_desc(a_dims, a_strides, bf16), operand_desc(b_dims, b_strides, bf16),
                    f32_desc(c_dims, dims(d.c_strides)), memory::desc(), d.alpha, d.accumulate);
  execute(*p, a, b, nullptr, C);
}

}  // namespace

void copy_run_to_bf16(Operand src, bfloat16* dst, int64_t n) {
  if (src.dtype == DType::BF16)
    std::memcpy(dst, src.data, sizeof(bfloat16) * n);
  else
    convert_run_to_bf16(static_cast<const float*>(src.data), dst, n);
}

void matmul(Operand A, Trans ta, Operand B, Trans tb, float* C, int64_t M, int64_t N, int64_t K,
            const float* bias, bool accumulate, Varying varying) {
  if (M == 0 || N == 0) return;
  matmul_in(bf16_product(A, B), A, ta, B, tb, C, M, N, K, bias, accumulate, varying);
}

void batched_matmul(const BatchedMatmul& d, Operand A, Operand B, float* C) {
  if (d.M == 0 || d.N == 0 || d.batch0 == 0 || d.batch1 == 0) return;
  batched_matmul_in(bf16_product(A, B), d, A, B, C);
}

int64_t matmul_primitive_count() { return created_primitives.load(); }

int64_t matmul_cached_primitives() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int64_t>(e.cache.size());
}

int64_t matmul_primitive_capacity() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int64_t>(e.cache.capacity());
}

void set_matmul_primitive_capacity(int64_t capacity) {
  check(capacity >= 1, "the matmul primitive cache holds at least one primitive, not ", capacity);
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.cache.set_capacity(static_cast<size_t>(capacity));
  dnnl::set_primitive_cache_capacity(static_cast<int>(capacity));
}

int64_t matmul_repacked_products() { return repacked_products.load(); }

bool matmul_reads_blocked_weights(bool bf16) {
  // Asked once per precision: the layout oneDNN picks for a gpt2-small-like weight given `any`.
  static const auto blocked = [](bool b) {
    try {
      const int64_t M = kRepackMinRows, N = 768, K = 768;
      const memory::desc any({K, N}, b ? memory::data_type::bf16 : memory::data_type::f32, memory::format_tag::any);
      const dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(operand_desc({M, K}, {K, 1}, b), any, f32_desc({M, N}, {N, 1})), engine().engine);
      const memory::desc chosen = pd.weights_desc();
      return chosen.data.format_kind == dnnl_blocked && chosen.data.format_desc.blocking.inner_nblks > 0;
    } catch (const dnnl::error&) {
      return false;  // no matmul in this precision (bf16 without AVX-512)
    }
  };
  static const bool f32 = blocked(false), bf16_blocked = blocked(true);
  return bf16 ? bf16_blocked : f32;
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

bool native_bf16_matmul() {
  static const bool native = [] {
    try {
      const dnnl::matmul::desc desc(operand_desc({16, 16}, {16, 1}, true), operand_desc({16, 16}, {16, 1}, true),
                                    f32_desc({16, 16}, {16, 1}));
      (void)dnnl::matmul::primitive_desc(desc, engine().engine);
      return true;
    } catch (const dnnl::error&) {
      return false;  // "could not create a primitive descriptor iterator": no kernel takes bf16 here
    }
  }();
  return native;
}

std::string bf16_speed_warning() {
  // oneDNN's view of the CPU (it honours ONEDNN_MAX_CPU_ISA); an ISA's value is a bit mask
  // that contains the masks of the ISAs it extends.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto includes = [isa](dnnl::cpu_isa base) { return (isa & static_cast<unsigned>(base)) == static_cast<unsigned>(base); };
  if (!bf16_slower_than_fp32(includes(dnnl::cpu_isa::avx512_core_bf16), includes(dnnl::cpu_isa::avx512_core_amx)))
    return "";
  const char* how = native_bf16_matmul() ? "through oneDNN's emulation" : "with its GEMM operands widened to fp32";
  return std::string("note: this CPU has no bf16 instructions (AVX512-BF16 or AMX); bf16 runs correctly ") + how +
         " but slower than fp32";
}

bool matmul_varying_shares_primitive(bool bf16) {
  // Asked once per precision, on a mixture of experts' first projection at 512 rows.
  static const auto shares = [](bool b) {
    if (b && !native_bf16_matmul()) return false;  // such bf16 products are widened fp32 ones, asked as fp32
    const int64_t M = 512, N = 1536, K = 384;
    try {
      const std::string fixed = matmul_implementation(M, N, K, b);
      const Geometry g = geometry(DNNL_RUNTIME_DIM_VAL, N, K, Trans::N, Trans::T, b);
      const std::string runtime =
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(g.a, g.b, g.c), engine().engine).impl_info_str();
      const bool amx_lost = fixed.find("amx") != std::string::npos && runtime.find("amx") == std::string::npos;
      return runtime.find("ref") == std::string::npos && !amx_lost;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool f32 = shares(false), bf16_shares = shares(true);
  return bf16 ? bf16_shares : f32;
}

std::string matmul_implementation(int64_t M, int64_t N, int64_t K, bool bf16) {
  if (bf16 && !native_bf16_matmul()) return "widened to fp32, " + matmul_implementation(M, N, K, false);
  Engine& e = engine();
  const dnnl::matmul::desc desc(operand_desc({M, K}, {K, 1}, bf16), operand_desc({K, N}, {1, K}, bf16),
                                f32_desc({M, N}, {N, 1}));
  return dnnl::matmul::primitive_desc(desc, e.engine).impl_info_str();
}

}  // namespace loom::kernels
