#include "loom/comm/reduce_op.hpp"

namespace loom::comm {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

void reduce_into(float* dst, const float* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::Max) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

void finish_reduction(float* data, int64_t n, ReduceOp op, int group_size) {
  if (op != ReduceOp::Avg) return;
  const float inv = 1.0f / static_cast<float>(group_size);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) data[i] *= inv;
}

}  // namespace loom::comm
