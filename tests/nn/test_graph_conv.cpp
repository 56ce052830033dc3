// GraphConv against a dense reference computed in double (Y = Â X W + b and its three
// gradients), in both orders (aggregate first for in <= out, transform first otherwise) and
// with a sparse first-layer input (multiplied by SpMM) next to the same input dense.
// Tolerance 1e-5 relative to the largest reference value: fp32 sums of at most ~100 terms.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/kernels/sparse.hpp"
#include "loom/nn/graph_conv.hpp"
#include "test_util.hpp"

namespace loom::nn {
namespace {

struct Dense {
  int64_t rows, cols;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Dense matmul(const Dense& a, const Dense& b) {
  Dense c{a.rows, b.cols, std::vector<double>(static_cast<size_t>(a.rows * b.cols), 0.0)};
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k)
      for (int64_t j = 0; j < b.cols; ++j) c.v[static_cast<size_t>(i * b.cols + j)] += a.at(i, k) * b.at(k, j);
  return c;
}

Dense transpose(const Dense& a) {
  Dense t{a.cols, a.rows, std::vector<double>(a.v.size())};
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t.v[static_cast<size_t>(j * a.rows + i)] = a.at(i, j);
  return t;
}

Dense dense_of(const float* x, int64_t rows, int64_t cols) { return {rows, cols, std::vector<double>(x, x + rows * cols)}; }

::testing::AssertionResult close(const std::string& what, const float* got, const Dense& want) {
  double scale = 0.0;
  for (double w : want.v) scale = std::max(scale, std::fabs(w));
  std::vector<float> w(want.v.begin(), want.v.end());
  return testing::all_close(got, w.data(), static_cast<int64_t>(w.size()), 0.0, 1e-5 * scale, what);
}

void check_layer(int64_t in, int64_t out, bool input_gradient, double zeros) {
  const int64_t N = 40;
  std::vector<int64_t> src, dst;
  for (int64_t i = 0; i < N; ++i) src.push_back(i), dst.push_back((i * 7 + 3) % N);
  auto graph = GraphOperator::from(kernels::gcn_normalized_adjacency(N, src, dst));
  GraphConv conv(in, out, graph, input_gradient);
  const std::vector<float> w = testing::random_vector(in * out, 1), b = testing::random_vector(out, 2);
  std::copy(w.begin(), w.end(), conv.weight().value().f32());
  std::copy(b.begin(), b.end(), conv.bias().value().f32());
  Tensor x = Tensor::empty({N, in});
  const std::vector<float> xs = testing::random_vector(N * in, 3), keep = testing::random_vector(N * in, 4, 0.0f, 1.0f);
  for (int64_t i = 0; i < N * in; ++i) x.f32()[i] = keep[static_cast<size_t>(i)] < zeros ? 0.0f : xs[static_cast<size_t>(i)];
  Tensor dy = Tensor::empty({N, out});
  const std::vector<float> dys = testing::random_vector(N * out, 5);
  std::copy(dys.begin(), dys.end(), dy.f32());

  Context ctx;
  const Tensor y = conv.forward(x, ctx);
  const Tensor dx = conv.backward(dy, ctx);

  const Dense A = dense_of(kernels::csr_to_dense(graph->adjacency).data(), N, N), X = dense_of(x.f32(), N, in),
              W = dense_of(w.data(), in, out), dY = dense_of(dy.f32(), N, out);
  Dense Y = matmul(matmul(A, X), W);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < out; ++j) Y.v[static_cast<size_t>(i * out + j)] += b[static_cast<size_t>(j)];
  const std::string name = std::to_string(in) + " -> " + std::to_string(out) + (zeros > 0.5 ? " sparse input" : "");
  EXPECT_TRUE(close("Y " + name, y.f32(), Y));
  EXPECT_TRUE(close("dW " + name, conv.weight().grad().f32(), matmul(transpose(matmul(A, X)), dY)));
  Dense db{1, out, std::vector<double>(static_cast<size_t>(out), 0.0)};
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < out; ++j) db.v[static_cast<size_t>(j)] += dY.at(i, j);
  EXPECT_TRUE(close("db " + name, conv.bias().grad().f32(), db));
  if (input_gradient) {
    EXPECT_TRUE(close("dX " + name, dx.f32(), matmul(transpose(A), matmul(dY, transpose(W)))));
  } else {
    EXPECT_FALSE(dx.defined());
  }
}

TEST(GraphConv, BothOrdersMatchTheDenseReference) {
  check_layer(6, 9, true, 0.0);   // aggregate first
  check_layer(9, 6, true, 0.0);   // transform first
  check_layer(30, 5, false, 0.0);  // a first layer, dense input
}

TEST(GraphConv, SparseFirstLayerInputMatchesTheDenseReference) {
  check_layer(30, 5, false, 0.95);  // ~5% non-zeros: multiplied by SpMM
}

}  // namespace
}  // namespace loom::nn
