// The projections of a batched decode step, y(M, N) = x(M, K) W(N, K)^T [+ b(N)] for more
// rows than the GEMV kernel takes (gemv.hpp), through oneDNN's matmul with W reordered once
// into the blocked layout oneDNN's kernel prefers (memory format `any`) and kept. At these M
// the product is bound by reading W, and oneDNN streams a plain (N, K) weight at about half
// the copy bandwidth; the packed one measured 1.2-1.5x faster on gpt2-small's shapes at 16
// rows (the repack itself costs about one plain product, paid once per weight).
// Inference only: the generator owns one of these beside its KV cache. A copy is valid for
// one weights generation (precision.hpp) and one source address, so it is never stale.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

// Rows up to which the decode path uses the packed weights (beyond kGemvMaxRows); more rows
// (a prefill) go through the plain matmul, which is compute-bound there.
constexpr int64_t kPackedMaxRows = 64;

class PackedWeights {
 public:
  PackedWeights();
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // y = x W^T [+ bias], W (N, K) row-major as a Parameter's gemm_operand gives it: fp32, or
  // bf16 (x is then rounded to bf16, as matmul() does). Packs W on first use.
  void matmul(const float* x, Operand W, const float* bias, float* y, int64_t M, int64_t N, int64_t K);
  // Bytes of the packed copies held (counted by the memory check as one more weight copy).
  int64_t bytes() const;
  int64_t copies() const { return static_cast<int64_t>(packed_.size()); }

 private:
  struct Engine;
  struct Packed;
  struct Primitive;
  std::unique_ptr<Engine> engine_;
  std::map<const void*, std::unique_ptr<Packed>> packed_;   // by the source weight's address
  std::map<std::vector<int64_t>, std::unique_ptr<Primitive>> primitives_;
};

}  // namespace loom::kernels
