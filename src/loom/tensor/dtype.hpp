// Element types. Only fp32 is computed today; the type is carried everywhere so that
// bf16 (AMX GEMMs, mixed precision) can be added without changing signatures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom {

enum class DType : uint8_t { F32 = 0, BF16 = 1, I32 = 2 };  // I32: token ids

constexpr size_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
constexpr std::string_view dtype_name(DType t) {
  return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "i32";
}

}  // namespace loom
