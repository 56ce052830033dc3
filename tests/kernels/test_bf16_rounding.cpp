// The vector bf16 roundings (convert_to_bf16, convert_run_to_bf16, store_bf16x16) against the
// scalar to_bf16: the same bits for every input but fp32 subnormals, which AVX512-BF16 cores'
// conversion instruction takes to +-0 (to_bf16 keeps them). Special values, ties, tails that
// are not whole vectors, and a length that takes the parallel path.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"

namespace loom::kernels {
namespace {

bool subnormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL; }

// What the vector paths must give for x: to_bf16's bits, or a zero of x's sign for a
// subnormal where they may flush it.
void expect_rounded(float x, bfloat16 got, const char* path) {
  const bfloat16 want = to_bf16(x);
  if (subnormal(x) && got.bits != want.bits) {
    EXPECT_EQ(got.bits, std::signbit(x) ? 0x8000 : 0x0000) << path << ": subnormal " << x << " neither kept nor 0";
    return;
  }
  EXPECT_EQ(got.bits, want.bits) << path << ": x = " << x << " (bits " << std::bit_cast<uint32_t>(x) << ")";
}

std::vector<float> inputs(int64_t n) {
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* a tie: rounds to even */,
                            1.01171875f /* a tie: rounds up to even */, std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7f800001u) /* signalling NaN */, 1e-40f, -1e-40f,
                            std::numeric_limits<float>::min(), 3.3895314e38f /* rounds to infinity */};
  std::vector<float> x(n);
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    x[i] = i < static_cast<int64_t>(std::size(specials)) ? specials[i] : std::bit_cast<float>(state);
  }
  return x;
}

TEST(Bf16Rounding, ConvertMatchesToBf16) {
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100}, int64_t{1} << 17}) {
    const std::vector<float> x = inputs(n);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<bfloat16> got(n + 1, bfloat16{0x1234});
      convert_to_bf16(x.data(), got.data(), n);
      set_num_threads(1);
      for (int64_t i = 0; i < n; ++i) expect_rounded(x[i], got[i], "convert_to_bf16");
      EXPECT_EQ(got[n].bits, 0x1234) << "convert_to_bf16 wrote past n = " << n;
    }
    std::vector<bfloat16> run(n + 1, bfloat16{0x1234});
    convert_run_to_bf16(x.data(), run.data(), n);
    for (int64_t i = 0; i < n; ++i) expect_rounded(x[i], run[i], "convert_run_to_bf16");
    EXPECT_EQ(run[n].bits, 0x1234) << "convert_run_to_bf16 wrote past n = " << n;
  }
}

#if LOOM_FAST_MATH_AVX512
TEST(Bf16Rounding, StoreBf16x16MatchesToBf16UnderItsMask) {
  const std::vector<float> x = inputs(64);
  for (int64_t at = 0; at + 16 <= 64; at += 16)
    for (__mmask16 m : {__mmask16(0xFFFF), __mmask16(0x7FFF), __mmask16(0x0001), __mmask16(0x00FF)}) {
      std::vector<bfloat16> got(16, bfloat16{0x1234});
      store_bf16x16(got.data(), _mm512_loadu_ps(x.data() + at), m);
      for (int j = 0; j < 16; ++j) {
        if ((m >> j) & 1)
          expect_rounded(x[at + j], got[j], "store_bf16x16");
        else
          EXPECT_EQ(got[j].bits, 0x1234) << "store_bf16x16 wrote lane " << j << " outside its mask";
      }
    }
}
#endif

}  // namespace
}  // namespace loom::kernels
