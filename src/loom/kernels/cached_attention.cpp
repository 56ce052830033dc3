// One (row, head) pair per task: its scores, softmax and weighted sum of values touch only
// that head's cache rows, which decode reads once per step (the cache is the part of a
// decode step's bytes that grows with the context).
#include "loom/kernels/cached_attention.hpp"

#include <cmath>
#include <vector>

#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

namespace {
float rounded_to_bf16(float x) { return to_f32(to_bf16(x)); }

// A cached value as the attention reads it: fp32 as it is, bf16 widened (exact).
inline float value_of(float x) { return x; }
inline float value_of(bfloat16 x) { return to_f32(x); }
// A k or v value as the cache stores it: in bf16 compute precision rounded to bf16 either way.
inline void store(float& slot, float x, bool bf16) { slot = bf16 ? rounded_to_bf16(x) : x; }
inline void store(bfloat16& slot, float x, bool) { slot = to_bf16(x); }

template <typename T>
void append(T* keys, T* values, const float* qkv, const int64_t* slots, const int64_t* positions, int64_t N,
            const CacheGeometry& g) {
  const int64_t C = g.NH * g.HS;
  const bool bf16 = compute_precision() == Precision::BF16;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < g.NH; ++h) {
      const float* row = qkv + n * 3 * C + h * g.HS;  // this head's q
      const int64_t at = g.offset(slots[n], h, positions[n]);
      for (int64_t d = 0; d < g.HS; ++d) {
        store(keys[at + d], row[C + d], bf16);
        store(values[at + d], row[2 * C + d], bf16);
      }
    }
}

template <typename T>
void attend(float* out, const float* qkv, const T* keys, const T* values, const int64_t* slots,
            const int64_t* positions, int64_t N, const CacheGeometry& g) {
  const int64_t C = g.NH * g.HS, HS = g.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool bf16 = compute_precision() == Precision::BF16;
  int64_t work = 0;
  for (int64_t n = 0; n < N; ++n) work += (positions[n] + 1) * C;
#pragma omp parallel if (work >= (1 << 15))
  {
    std::vector<float> scores(static_cast<size_t>(g.capacity)), query(static_cast<size_t>(HS));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < N * g.NH; ++task) {
      const int64_t n = task / g.NH, h = task % g.NH, len = positions[n] + 1;
      const float* __restrict q = qkv + n * 3 * C + h * HS;            // (HS)
      if (bf16) {
        for (int64_t d = 0; d < HS; ++d) query[d] = rounded_to_bf16(q[d]);
        q = query.data();
      }
      const T* __restrict k = keys + g.offset(slots[n], h, 0);     // (len, HS)
      const T* __restrict v = values + g.offset(slots[n], h, 0);   // (len, HS)
      float* __restrict s = scores.data();
      float m = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < HS; ++d) dot += q[d] * value_of(k[j * HS + d]);
        s[j] = dot * scale;
        m = s[j] > m ? s[j] : m;
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < len; ++j) {
        s[j] = fast_exp(s[j] - m);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
      float* __restrict o = out + n * C + h * HS;  // (HS)
      for (int64_t d = 0; d < HS; ++d) o[d] = 0.0f;
      // In bf16, as training's bf16 attention: V times the unnormalised exp-scores rounded to
      // bf16, the sum divided out afterwards.
      for (int64_t j = 0; j < len; ++j) {
        const float p = bf16 ? rounded_to_bf16(s[j]) : s[j] * inv;
#pragma omp simd
        for (int64_t d = 0; d < HS; ++d) o[d] += p * value_of(v[j * HS + d]);
      }
      if (bf16)
        for (int64_t d = 0; d < HS; ++d) o[d] *= inv;
    }
  }
}
}  // namespace

void cache_append(float* keys, float* values, const float* qkv, const int64_t* slots, const int64_t* positions,
                  int64_t N, const CacheGeometry& g) {
  append(keys, values, qkv, slots, positions, N, g);
}
void cache_append(bfloat16* keys, bfloat16* values, const float* qkv, const int64_t* slots, const int64_t* positions,
                  int64_t N, const CacheGeometry& g) {
  append(keys, values, qkv, slots, positions, N, g);
}

void cached_attention(float* out, const float* qkv, const float* keys, const float* values, const int64_t* slots,
                      const int64_t* positions, int64_t N, const CacheGeometry& g) {
  attend(out, qkv, keys, values, slots, positions, N, g);
}
void cached_attention(float* out, const float* qkv, const bfloat16* keys, const bfloat16* values, const int64_t* slots,
                      const int64_t* positions, int64_t N, const CacheGeometry& g) {
  attend(out, qkv, keys, values, slots, positions, N, g);
}

}  // namespace loom::kernels
