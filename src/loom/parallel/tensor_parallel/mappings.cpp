#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
void sum_over(Tensor& t, comm::ProcessGroup& group) {
  if (group.size() > 1) group.all_reduce(t, comm::ReduceOp::Sum);
}
}  // namespace

void f_backward(Tensor& dx, comm::ProcessGroup& group) { sum_over(dx, group); }

void g_forward(Tensor& y, comm::ProcessGroup& group) { sum_over(y, group); }

}  // namespace loom::parallel::tp
