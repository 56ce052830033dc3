#include "loom/nn/graph_conv.hpp"

#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/spmm.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

using kernels::Trans;

std::shared_ptr<const GraphOperator> GraphOperator::from(kernels::CsrMatrix adjacency) {
  auto g = std::make_shared<GraphOperator>();
  g->transposed = kernels::csr_transpose(adjacency);
  g->adjacency = std::move(adjacency);
  return g;
}

GraphConv::GraphConv(int64_t in_features, int64_t out_features, std::shared_ptr<const GraphOperator> graph,
                     bool input_gradient)
    : GraphConv(in_features, out_features, std::move(graph), input_gradient, {in_features, out_features}, out_features) {}

GraphConv::GraphConv(int64_t in_features, int64_t out_features, std::shared_ptr<const GraphOperator> graph,
                     bool input_gradient, const Shape& weight_shape, int64_t bias_size)
    : in_(in_features), out_(out_features), graph_(std::move(graph)), input_gradient_(input_gradient) {
  weight_ = &register_parameter("weight", weight_shape, /*weight_decay=*/false);
  weight_->set_read_by_gemms(true);  // (a sparse input's product keeps it in fp32 instead: kept_in_fp32)
  bias_ = &register_parameter("bias", {bias_size}, /*weight_decay=*/false);
}

void GraphConv::set_weight(const Tensor& whole) {
  check(whole.shape() == Shape{in_, out_}, "GraphConv '", name(), "': a weight of (", in_, ", ", out_, ") expected, got ",
        shape_str(whole.shape()));
  std::copy(whole.f32(), whole.f32() + whole.numel(), weight_->value().f32());
}

double GraphConv::weight_sum_squares() { return kernels::sum_squares(weight_->value().f32(), weight_->numel()); }

bool GraphConv::multiplies_sparse(const Tensor& x) {
  constexpr double kSparseInputDensity = 0.1;  // below this share of non-zeros
  int64_t nonzeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) nonzeros += x.f32()[i] != 0.0f ? 1 : 0;
  return static_cast<double>(nonzeros) < kSparseInputDensity * static_cast<double>(x.numel());
}

const kernels::CsrMatrix* GraphConv::sparse_input(const Tensor& x) {
  if (input_gradient_ || aggregates_first()) return nullptr;
  if (!x.shares_storage(sparse_source_) || x.shape() != sparse_source_.shape()) {
    sparse_source_ = x;
    source_is_sparse_ = multiplies_sparse(x);
    sparse_x_ = source_is_sparse_ ? kernels::dense_to_csr(x.f32(), x.size(0), x.size(1)) : kernels::CsrMatrix{};
    sparse_xt_ = source_is_sparse_ ? kernels::csr_transpose(sparse_x_) : kernels::CsrMatrix{};
    // A sparse product is not a GEMM: it reads the fp32 weight under mixed precision too (as
    // torch.autocast leaves sparse products in fp32), so the weight has no bf16 copy.
    weight_->set_kept_in_fp32(source_is_sparse_);
  }
  return source_is_sparse_ ? &sparse_x_ : nullptr;
}

// Under bf16 mixed precision the GEMMs read the weight's bf16 copy (made once a step) and keep
// their activation operands in bf16 (nn/saved_activation.hpp); sums, SpMMs and the bias stay fp32.
Tensor GraphConv::forward_impl(const Tensor& x, Context& ctx) {
  const kernels::CsrMatrix& A = graph_->adjacency;
  const int64_t N = A.rows;
  check(x.ndim() == 2 && x.size(0) == N && x.size(1) == in_, "GraphConv '", name(), "' expects (", N, ", ", in_,
        ") node features, got ", shape_str(x.shape()));
  Tensor y = Tensor::empty({N, out_});  // (N, out)
  if (aggregates_first()) {
    Tensor agg = Tensor::empty({N, in_});  // (N, in): Â X
    kernels::spmm(A, x.f32(), agg.f32(), in_);
    const Tensor input = saved_activation(agg, ctx);
    kernels::matmul(gemm_input(input), Trans::N, weight_->gemm_operand(), Trans::N, y.f32(), N, out_, in_,
                    bias_->value().f32());
    ctx.save(this, {input});
  } else {
    Tensor support = Tensor::empty({N, out_});  // (N, out): X W
    Tensor input = x;  // the data itself when sparse: its CSR forms are built from it
    if (const kernels::CsrMatrix* sx = sparse_input(x)) {
      kernels::spmm(*sx, weight_->value().f32(), support.f32(), out_);
    } else {
      input = saved_activation(x, ctx);
      kernels::matmul(gemm_input(input), Trans::N, weight_->gemm_operand(), Trans::N, support.f32(), N, out_, in_);
    }
    const float* b = bias_->value().f32();
    for (int64_t i = 0; i < N; ++i) std::copy(b, b + out_, y.f32() + i * out_);
    kernels::spmm(A, support.f32(), y.f32(), out_, /*accumulate=*/true);
    ctx.save(this, {input});
  }
  return y;
}

Tensor GraphConv::backward_impl(const Tensor& dy, Context& ctx) {
  const kernels::CsrMatrix& At = graph_->transposed;
  const int64_t N = At.rows;
  const Tensor saved = ctx.saved(this, 0);  // aggregate first: Â X; else X (either maybe in bf16)
  kernels::bias_backward(bias_->grad().f32(), dy.f32(), N, out_);
  Tensor dx;  // (N, in) when input_gradient_
  if (aggregates_first()) {
    const Tensor dy_c = in_compute_precision(dy);  // converted once for both GEMMs
    kernels::matmul(gemm_input(saved), Trans::T, gemm_input(dy_c), Trans::N, weight_->grad().f32(), in_, out_, N, nullptr,
                    true);
    if (input_gradient_) {
      Tensor dagg = Tensor::empty({N, in_});  // (N, in)
      kernels::matmul(gemm_input(dy_c), Trans::N, weight_->gemm_operand(), Trans::T, dagg.f32(), N, in_, out_);
      dx = Tensor::empty({N, in_});
      kernels::spmm(At, dagg.f32(), dx.f32(), in_);
    }
  } else {
    Tensor dsupport = Tensor::empty({N, out_});  // (N, out): Âᵀ dY
    kernels::spmm(At, dy.f32(), dsupport.f32(), out_);
    const bool sparse = source_is_sparse_ && saved.shares_storage(sparse_source_);  // forward's sparse product
    if (sparse) {
      kernels::spmm(sparse_xt_, dsupport.f32(), weight_->grad().f32(), out_, /*accumulate=*/true);
    } else {
      const Tensor dsupport_c = in_compute_precision(dsupport);  // once for both GEMMs
      kernels::matmul(gemm_input(saved), Trans::T, gemm_input(dsupport_c), Trans::N, weight_->grad().f32(), in_, out_, N,
                      nullptr, true);
      if (input_gradient_) {
        dx = Tensor::empty({N, in_});
        kernels::matmul(gemm_input(dsupport_c), Trans::N, weight_->gemm_operand(), Trans::T, dx.f32(), N, in_, out_);
      }
    }
  }
  weight_->grad_contributed();
  bias_->grad_contributed();
  ctx.release(this);
  return dx;
}

}  // namespace loom::nn
