// The expert MLPs of a mixture of experts, stored stacked: expert e is
// Linear(C, 4C), GELU, Linear(4C, C) with weights fc_weight[e] and proj_weight[e]. The rows
// of all experts arrive as one buffer grouped by expert, and each group is one oneDNN GEMM
// per projection (a grouped GEMM). Under expert parallelism a rank holds E/ep experts: the
// first dimension of every parameter is split over the `ep` ranks.
#pragma once

#include <vector>

#include "loom/nn/module.hpp"

namespace loom::nn {

class Experts : public Module {
 public:
  // El local experts of width C; first: the global index of the first (ep rank x El), of E.
  Experts(int64_t El, int64_t C, int64_t first, int64_t E);
  int64_t local_experts() const { return El_; }
  Parameter& fc_weight() { return *fc_w_; }
  Parameter& proj_weight() { return *proj_w_; }

  // x (R, C) grouped by local expert, counts[le] rows each. Saves what backward needs. In an
  // inference context an expert's few rows (a decode step's) go through the GEMV or the
  // context's packed weights, as a dense Linear's.
  Tensor forward_grouped(const Tensor& x, const std::vector<int64_t>& counts, Context& ctx);
  // dy (R, C) -> dx (R, C); adds every expert's weight gradients (also for an expert given no
  // rows: each parameter reports its gradient once per backward, so data-parallel hooks fire).
  Tensor backward_grouped(const Tensor& dy, const std::vector<int64_t>& counts, Context& ctx);

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;  // all rows to expert 0 (El == 1)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  int64_t El_, C_;
  Parameter* fc_w_;    // (El, 4C, C)
  Parameter* fc_b_;    // (El, 4C)
  Parameter* proj_w_;  // (El, C, 4C)
  Parameter* proj_b_;  // (El, C)
};

}  // namespace loom::nn
