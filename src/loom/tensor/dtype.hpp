// Element types: fp32 (compute and master weights), bf16 (mixed-precision GEMM operands) and
// int32 (token ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace loom {

enum class DType : uint8_t { F32 = 0, BF16 = 1, I32 = 2 };  // I32: token ids

constexpr size_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
constexpr std::string_view dtype_name(DType t) {
  return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "i32";
}

// bfloat16: the upper 16 bits of an fp32 (8 exponent bits, 7 stored mantissa bits).
struct bfloat16 {
  uint16_t bits;
};

// Round to nearest, ties to even, as oneDNN and PyTorch convert; NaN stays NaN.
inline bfloat16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
inline float to_f32(bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace loom
