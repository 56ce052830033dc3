#include "loom/kernels/precision.hpp"

#include <algorithm>
#include <atomic>

#include "loom/error.hpp"
#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {

namespace {
std::atomic<Precision> g_precision{Precision::F32};
std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_overwrite_epoch{1};

}  // namespace

std::string_view precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  throw Error("precision must be 'fp32' or 'bf16', got '" + std::string(name) + "'");
}

Precision compute_precision() { return g_precision.load(std::memory_order_relaxed); }
void set_compute_precision(Precision p) { g_precision.store(p, std::memory_order_relaxed); }

uint64_t weights_generation() { return g_generation.load(std::memory_order_relaxed); }
void new_weights_generation() { g_generation.fetch_add(1, std::memory_order_relaxed); }

uint64_t weights_overwrite_epoch() { return g_overwrite_epoch.load(std::memory_order_relaxed); }
void weights_overwritten() {
  g_overwrite_epoch.fetch_add(1, std::memory_order_relaxed);
  new_weights_generation();
}

void convert_run_to_bf16(const float* __restrict src, bfloat16* __restrict dst, int64_t n) {
#if defined(__AVX512BF16__)
  // store_bf16x16's one instruction a vector (fast_math.hpp); the compiler's vectorisation of
  // to_bf16 takes five.
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_bf16x16(dst + i, _mm512_loadu_ps(src + i), 0xFFFF);
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    store_bf16x16(dst + i, _mm512_maskz_loadu_ps(tail, src + i), tail);
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
#endif
}

void convert_to_bf16(const float* src, bfloat16* dst, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;  // whole vectors a chunk
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t c = 0; c < chunks; ++c)
    convert_run_to_bf16(src + c * kChunk, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
}

void convert_to_f32(const bfloat16* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

void round_to_bf16_values(const float* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(to_bf16(src[i]));
}

bool bf16_slower_than_fp32(bool has_avx512_bf16, bool has_amx_bf16) { return !has_avx512_bf16 && !has_amx_bf16; }

}  // namespace loom::kernels
