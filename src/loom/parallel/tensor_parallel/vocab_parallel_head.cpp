#include "loom/parallel/tensor_parallel/vocab_parallel_head.hpp"

#include <vector>

#include "loom/error.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/lm_head.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

Tensor VocabParallelHead::logits(const Tensor& x, nn::Parameter& w) const {
  const int t = group.size();
  if (!sequence_parallel || t == 1) return nn::head_logits(x, w);  // f forward is the identity
  check(x.ndim() == 3 && x.size(2) == w.shape()[1], "LM head expects (B, T/t, ", w.shape()[1], "), got ",
        shape_str(x.shape()));
  const int64_t B = x.size(0), Tl = x.size(1), C = x.size(2), T = t * Tl, V = w.shape()[0];
  Tensor out = Tensor::empty({B, T, V});
  const SequenceGather gathered(x, group);
  if (!overlap) gathered.wait();
  // A GEMM per sequence of each rank's chunk (B, T/t, C), straight into the logits' rows.
  auto project_chunk = [&](const Tensor& chunk, int64_t offset, int r) {
    for (int64_t b = 0; b < B; ++b)
      nn::head_logits_rows(nn::gemm_input(chunk, offset + b * Tl * C), Tl, w, out.f32() + (b * T + r * Tl) * V);
  };
  const int me = group.rank();
  project_chunk(x, 0, me);  // under the gather
  for (int r = 0; r < t; ++r)
    if (r != me) project_chunk(gathered.blocks(), r * B * Tl * C, r);
  return out;
}

Tensor VocabParallelHead::backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const {
  const int t = group.size();
  const int64_t C = w.shape()[1];
  Shape shape = dlogits.shape();
  shape.back() = C;
  Tensor dx_partial = Tensor::empty(shape);  // (B, T, C): the whole sequence, partial over the group
  if (sequence_parallel && t > 1) {
    const SequenceGather x_full(kept, group);  // for dW: under the dX GEMMs
    if (!overlap) x_full.wait();
    nn::head_input_gradient(dlogits, w, dx_partial.f32());
    const SequenceReduceScatter dx_sum(dx_partial, group);  // under the dW GEMMs
    if (!overlap) dx_sum.result();
    nn::head_weight_gradient(dlogits, x_full.whole(), w);
    return dx_sum.result();
  }
  // dX's rows summed over the group piece by piece (one piece in fp32), each sum under the
  // piece's dW GEMM and the later pieces: a bf16 piece of dlogits is converted once for both.
  std::vector<comm::Work> sums;
  const Tensor dx_rows = dx_partial.view({dx_partial.numel() / C, C});
  nn::head_gradients(dlogits, kept, w, dx_partial.f32(), [&](int64_t r0, int64_t n) {
    Tensor rows = dx_rows.narrow(r0, n);
    sums.push_back(start_f_backward(rows, group));
    if (!overlap) sums.back().wait();
  });
  for (const comm::Work& sum : sums) sum.wait();
  return dx_partial;
}

}  // namespace loom::parallel::tp
