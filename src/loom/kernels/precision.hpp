// The compute precision of a run, a process-wide run-time value every layer may query.
// fp32: every GEMM in fp32. bf16 (mixed precision): every GEMM reads bf16 operands and
// accumulates in fp32 into an fp32 result; the parameters stay fp32 (the master copy the
// optimizer updates) and each weight's bf16 copy is converted once per weights generation
// (once per step), never per GEMM. LayerNorm, softmax, GELU, the loss and all reductions
// compute in fp32 either way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

enum class Precision : uint8_t { F32, BF16 };

std::string_view precision_name(Precision p);  // "fp32", "bf16"
// "fp32" or "bf16"; loom::Error naming the choices otherwise.
Precision parse_precision(std::string_view name);

Precision compute_precision();
void set_compute_precision(Precision p);

// Sets the precision for a scope and restores the previous one (tests, `loom verify`).
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p) : previous_(compute_precision()) { set_compute_precision(p); }
  ~PrecisionScope() { set_compute_precision(previous_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision previous_;
};

// Cached bf16 weight copies are valid for one generation. The trainer starts a new one at
// every step (and evaluation), after which the fp32 masters may have changed (an optimizer
// step, a ZeRO gather, a checkpoint load); within a step the weights do not change.
uint64_t weights_generation();
void new_weights_generation();

// A copy the optimizer refreshed in its own pass (Parameter::bf16_copy_refreshed) stays valid
// across generations, since only the optimizer changes a master between steps in training.
// Whatever else writes masters (a checkpoint load into a live model) calls
// weights_overwritten(), which invalidates every such copy; lazily converted copies are
// invalidated by the generation as before.
uint64_t weights_overwrite_epoch();
void weights_overwritten();

// dst[i] = bf16(src[i]) (round to nearest even, as to_bf16; on AVX512-BF16 cores by their
// conversion instruction, which also takes fp32 subnormals to +-0), in parallel for large n.
void convert_to_bf16(const float* src, bfloat16* dst, int64_t n);
// The same on the calling thread alone, for a run inside a caller's parallel loop (no nested
// parallel region: its set-up cost more than converting a row of a few hundred values).
void convert_run_to_bf16(const float* src, bfloat16* dst, int64_t n);
void convert_to_f32(const bfloat16* src, float* dst, int64_t n);
// dst[i] = src[i] rounded to the nearest bf16 value, kept in fp32 (one pass; dst may be src):
// an fp32 product of such values equals the bf16 product's up to summation order.
void round_to_bf16_values(const float* src, float* dst, int64_t n);

// Whether bf16 GEMMs will be slower than fp32 on a CPU with these capabilities: without
// native bf16 instructions (AVX512-BF16 or AMX) oneDNN emulates bf16 through fp32.
bool bf16_slower_than_fp32(bool has_avx512_bf16, bool has_amx_bf16);

}  // namespace loom::kernels
