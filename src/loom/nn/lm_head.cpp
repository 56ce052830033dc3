#include "loom/nn/lm_head.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/gemm_input.hpp"

namespace loom::nn {

using kernels::Trans;

namespace {
// The backward GEMMs walk the same pieces of rows, each converted when visited (a piece's
// bf16 copy lives only while its GEMMs run); fp32 runs take all rows at once.
template <typename Piece>
void for_each_piece(const Tensor& dlogits, int64_t V, const Piece& piece) {
  check(V > 0 && dlogits.numel() % V == 0, "LM head: the logits' gradient ", shape_str(dlogits.shape()),
        " is not rows of ", V, " vocabulary columns");
  const int64_t N = dlogits.numel() / V;
  const bool bf16 = kernels::compute_precision() == kernels::Precision::BF16;
  const int64_t rows = bf16 ? kHeadGradientRows : N;
  const Tensor all = dlogits.view({N, V});
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    piece(in_compute_precision(all.narrow(r0, n)), r0, n);  // (n, V)
  }
}
}  // namespace

void head_logits_rows(kernels::Operand h, int64_t rows, Parameter& w, float* logits) {
  const int64_t V = w.shape()[0], C = w.shape()[1];
  kernels::matmul(h, Trans::N, w.gemm_operand(), Trans::T, logits, rows, V, C);
}

Tensor head_logits(const Tensor& h, Parameter& w) {
  Shape shape = h.shape();
  check(!shape.empty() && shape.back() == w.shape()[1], "LM head: input ", shape_str(shape), " does not have ",
        w.shape()[1], " features");
  shape.back() = w.shape()[0];
  Tensor logits = Tensor::empty(shape);
  head_logits_rows(gemm_input(h), h.numel() / w.shape()[1], w, logits.f32());
  return logits;
}

namespace {
// One piece's share of each backward GEMM: dh's rows r0..r0+n, and W's gradient accumulated.
void input_gradient_piece(const Tensor& piece, int64_t r0, int64_t n, Parameter& w, float* dh) {
  const int64_t V = w.shape()[0], C = w.shape()[1];
  kernels::matmul(gemm_input(piece), Trans::N, w.gemm_operand(), Trans::N, dh + r0 * C, n, C, V);
}
void weight_gradient_piece(const Tensor& piece, const Tensor& h, int64_t r0, int64_t n, Parameter& w) {
  const int64_t V = w.shape()[0], C = w.shape()[1];
  kernels::matmul(gemm_input(piece), Trans::T, gemm_input(h, r0 * C), Trans::N, w.grad().f32(), V, C, n, nullptr,
                  /*accumulate=*/true);
}
void check_input_matches(const Tensor& dlogits, const Tensor& h, const Parameter& w) {
  check(h.numel() * w.shape()[0] == dlogits.numel() * w.shape()[1], "LM head: input ", shape_str(h.shape()),
        " does not match the logits' gradient ", shape_str(dlogits.shape()));
}
}  // namespace

void head_input_gradient(const Tensor& dlogits, Parameter& w, float* dh) {
  for_each_piece(dlogits, w.shape()[0],
                 [&](const Tensor& piece, int64_t r0, int64_t n) { input_gradient_piece(piece, r0, n, w, dh); });
}

void head_weight_gradient(const Tensor& dlogits, const Tensor& h, Parameter& w) {
  check_input_matches(dlogits, h, w);
  for_each_piece(dlogits, w.shape()[0],
                 [&](const Tensor& piece, int64_t r0, int64_t n) { weight_gradient_piece(piece, h, r0, n, w); });
}

void head_gradients(const Tensor& dlogits, const Tensor& h, Parameter& w, float* dh,
                    const std::function<void(int64_t r0, int64_t n)>& rows_done) {
  check_input_matches(dlogits, h, w);
  for_each_piece(dlogits, w.shape()[0], [&](const Tensor& piece, int64_t r0, int64_t n) {
    input_gradient_piece(piece, r0, n, w, dh);
    if (rows_done) rows_done(r0, n);
    weight_gradient_piece(piece, h, r0, n, w);
  });
}

}  // namespace loom::nn
