#include "loom/plan/tensor_parallel_3d_cost.hpp"

namespace loom::plan {

namespace {

struct Axes {
  int64_t R, C, D;
  int64_t size(int axis) const { return axis == 0 ? R : (axis == 1 ? C : D); }
};

// Values moved per micro-batch along each axis (0 row, 1 col, 2 depth: activations and
// weights; 3: gradients reduce-scattered over depth), and of row's and col's those that run
// under a GEMM (Grid3DBytes).
struct Floats {
  int64_t moved[4] = {0, 0, 0, 0};
  int64_t forward_sums[2] = {0, 0}, under_weight_gradient[2] = {0, 0};
};

// One linear layer's values per micro-batch, plus (to `replicated`) the values of its
// gradients averaged over depth once per step.
void add_layer(int64_t N, int64_t in, int64_t out, int64_t blocks, bool first, const Axes& g, Floats& f,
               int64_t& replicated) {
  const int in_axis = first ? 1 : 0, out_axis = first ? 0 : 1;
  const int64_t pi = g.size(in_axis), po = g.size(out_axis);
  // n values on `axis` (none on an axis of one rank), also counted in `hidden` when not null.
  auto on = [&](int axis, int64_t n, int64_t* hidden = nullptr) {
    if (g.size(axis) <= 1) return;
    f.moved[axis] += n;
    if (hidden != nullptr) hidden[axis] += n;
  };
  if (in % pi == 0 && out % (blocks * po * g.D) == 0) {
    on(2, 2 * out * in / (pi * po));  // the whole block, twice gathered
    if (g.D > 1) f.moved[3] += out * in / (pi * po);  // and its gradient once reduce-scattered
    on(in_axis, N * out / po, f.forward_sums);         // forward: partial outputs summed
    on(out_axis, N * in / pi, f.under_weight_gradient);  // backward: partial input gradients summed
    if (first)
      on(1, N * in, f.under_weight_gradient);  // the whole input's gradient gathered behind that sum
    else
      on(1, N * out);  // the whole output gathered, the forward's last step
    replicated += out / po;  // the bias
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
  Floats per_micro_batch;
  int64_t replicated = s.Vp * C + s.block_size * C + 2 * C;  // token table, positions, final LayerNorm
  int64_t plane_values = 0;  // per micro-batch
  for (int64_t l = 0; l < s.L; ++l) {
    add_layer(N, C, 3 * C, 3, true, g, per_micro_batch, replicated);   // attention's QKV
    add_layer(N, C, C, 1, false, g, per_micro_batch, replicated);      // attention's projection
    replicated += 4 * C;                                               // ln1, ln2
    if (l < s.moe_blocks) {  // the router and this rank's experts; their rows gathered twice
      replicated += C * s.experts + s.experts / s.expert_split * (8 * C * C + 5 * C);
      if (s.expert_split > 1) plane_values += 2 * N * s.top_k * C;
      continue;
    }
    add_layer(N, C, 4 * C, 1, true, g, per_micro_batch, replicated);   // MLP fc
    add_layer(N, 4 * C, C, 1, false, g, per_micro_batch, replicated);  // MLP projection
  }
  const int64_t* moved = per_micro_batch.moved;
  Grid3DBytes bytes;
  bytes.row = activation_bytes * s.M * moved[0];
  bytes.col = activation_bytes * s.M * moved[1];
  bytes.depth = activation_bytes * s.M * moved[2] + gradient_bytes * (s.M * moved[3] + (D > 1 ? replicated : 0));
  bytes.plane = activation_bytes * s.M * plane_values;
  // A mixture of experts' routing statistics (each expert's load and four sums: E + 4 fp32
  // values), added over depth once a step: each depth rank routes its own rows.
  if (s.experts > 0 && D > 1) bytes.depth += 4 * (s.experts + 4);
  for (int axis : {0, 1}) {
    bytes.forward_sums[axis] = activation_bytes * s.M * per_micro_batch.forward_sums[axis];
    bytes.under_weight_gradient[axis] = activation_bytes * s.M * per_micro_batch.under_weight_gradient[axis];
  }
  return bytes;
}

}  // namespace loom::plan
