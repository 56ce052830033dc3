#include "loom/comm/bf16_wire.hpp"

#include <algorithm>
#include <mutex>

namespace loom::comm {

namespace {

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(to_f32(a[i]) + to_f32(b[i]));
}

void max_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(std::max(to_f32(a[i]), to_f32(b[i])));
}

struct Bf16Mpi {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
};

const Bf16Mpi& bf16_mpi() {
  static Bf16Mpi handles;
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Type_contiguous(2, MPI_BYTE, &handles.type);
    MPI_Type_commit(&handles.type);
    MPI_Op_create(&sum_bf16, /*commute=*/1, &handles.sum);
    MPI_Op_create(&max_bf16, 1, &handles.max);
  });
  return handles;
}

}  // namespace

MPI_Datatype bf16_mpi_type() { return bf16_mpi().type; }

MPI_Op bf16_mpi_op(ReduceOp op) { return op == ReduceOp::Max ? bf16_mpi().max : bf16_mpi().sum; }

std::vector<bfloat16> to_bf16_vector(const float* src, int64_t n) {
  std::vector<bfloat16> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  pack_bf16(src, out.data(), n);
  return out;
}

void pack_bf16(const float* src, bfloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

void widen_bf16(const bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

}  // namespace loom::comm
