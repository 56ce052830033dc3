#include "loom/plan/tensor_parallel_3d_cost.hpp"

namespace loom::plan {

namespace {

struct Axes {
  int64_t R, C, D;
  int64_t size(int axis) const { return axis == 0 ? R : (axis == 1 ? C : D); }
};

// Values moved along each axis (0 row, 1 col, 2 depth: activations and weights; 3: gradients
// reduce-scattered over depth) for one linear layer per micro-batch, plus (to `replicated`)
// the values of its gradients averaged over depth once per step.
void add_layer(int64_t N, int64_t in, int64_t out, int64_t blocks, bool first, const Axes& g, int64_t floats[4],
               int64_t& replicated) {
  const int in_axis = first ? 1 : 0, out_axis = first ? 0 : 1;
  const int64_t pi = g.size(in_axis), po = g.size(out_axis);
  auto on = [&](int axis, int64_t n) {
    if (g.size(axis) > 1) floats[axis] += n;
  };
  if (in % pi == 0 && out % (blocks * po * g.D) == 0) {
    on(2, 2 * out * in / (pi * po));  // the whole block, twice gathered
    if (g.D > 1) floats[3] += out * in / (pi * po);  // and its gradient once reduce-scattered
    on(in_axis, N * out / po);        // forward: partial outputs summed
    on(out_axis, N * in / pi);        // backward: partial input gradients summed
    on(1, first ? N * in : N * out);  // the whole input's gradient, or the whole output, gathered
    replicated += out / po;                     // the bias
    return;
  }
  // Serial fallback: gathers what crosses the row split between the pair's two layers.
  const int64_t between = first ? out : in;
  if (between % (blocks * g.R) == 0) on(0, N * between);
  replicated += out * in + out;
}

}  // namespace

Grid3DBytes tensor_parallel_3d_bytes_per_step(const Gpt3DShape& s, int64_t R, int64_t Cg, int64_t D,
                                              int64_t activation_bytes, int64_t gradient_bytes) {
  const Axes g{R, Cg, D};
  const int64_t N = s.B * s.T, C = s.C;
  int64_t per_micro_batch[4] = {0, 0, 0, 0};
  int64_t replicated = s.Vp * C + s.block_size * C + 2 * C;  // token table, positions, final LayerNorm
  for (int64_t l = 0; l < s.L; ++l) {
    add_layer(N, C, 3 * C, 3, true, g, per_micro_batch, replicated);   // attention's QKV
    add_layer(N, C, C, 1, false, g, per_micro_batch, replicated);      // attention's projection
    add_layer(N, C, 4 * C, 1, true, g, per_micro_batch, replicated);   // MLP fc
    add_layer(N, 4 * C, C, 1, false, g, per_micro_batch, replicated);  // MLP projection
    replicated += 4 * C;                                               // ln1, ln2
  }
  Grid3DBytes bytes;
  bytes.row = activation_bytes * s.M * per_micro_batch[0];
  bytes.col = activation_bytes * s.M * per_micro_batch[1];
  bytes.depth = activation_bytes * s.M * per_micro_batch[2] +
                gradient_bytes * (s.M * per_micro_batch[3] + (D > 1 ? replicated : 0));
  return bytes;
}

}  // namespace loom::plan
