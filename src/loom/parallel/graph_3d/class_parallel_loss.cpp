#include "loom/parallel/graph_3d/class_parallel_loss.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/error.hpp"

namespace loom::parallel::graph3d {

nn::NodeLoss ClassParallelNodeLoss::operator()(Tensor& logits, const Tensor& targets, bool backward, float scale) const {
  const nn::GraphConv::OutputBlock block = last_.output_block();
  const std::vector<int64_t>& nodes = *block.nodes;
  const int64_t rows = static_cast<int64_t>(nodes.size()), K = last_.out_features();
  check(logits.ndim() == 2 && logits.size(0) == rows && targets.dtype() == DType::I32 && targets.numel() == rows,
        "node cross-entropy: logits block ", shape_str(logits.shape()), " does not match the targets of its ", rows,
        " nodes ", shape_str(targets.shape()), " (targets_for)");
  const int64_t cols = logits.size(1), real = std::clamp<int64_t>(K - block.col0, 0, cols);  // past real: padding
  const int32_t* t = targets.i32();
  std::vector<int64_t> picked;  // this rank's labelled rows (the same on every outer rank)
  for (int64_t r = 0; r < rows; ++r) {
    check(t[r] >= -1 && t[r] < K, "node ", nodes[static_cast<size_t>(r)], ": class ", t[r], " out of range [0, ", K, ")");
    if (t[r] >= 0) picked.push_back(r);
  }
  const auto M = static_cast<int64_t>(picked.size());
  const Grid3D& grid = last_.grid();
  // The split's labelled nodes: the depth ranks' rows tile the graph. In two floats (count /
  // 4096 and count % 4096), each sum an integer below 2^24, exact for any N < 2^31.
  nn::NodeLoss out;
  Tensor count = Tensor::empty({2});
  count.f32()[0] = static_cast<float>(M / 4096), count.f32()[1] = static_cast<float>(M % 4096);
  grid.all_reduce(count, last_.roles().depth);
  out.count = static_cast<int64_t>(count.f32()[0]) * 4096 + static_cast<int64_t>(count.f32()[1]);
  check(out.count > 0, "node cross-entropy: no labelled node in this split");
  comm::ProcessGroup& classes = grid.group(last_.roles().outer);
  const float* x = logits.f32();
  const auto row = [&](int64_t m) { return x + picked[static_cast<size_t>(m)] * cols; };
  const auto target = [&](int64_t m) { return static_cast<int64_t>(t[picked[static_cast<size_t>(m)]]); };

  std::vector<float> max(static_cast<size_t>(M), -INFINITY);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < real; ++j) max[static_cast<size_t>(m)] = std::max(max[static_cast<size_t>(m)], row(m)[j]);
  // (A group of one rank still counts what it is handed: its ranks skip it, as all of them skip M = 0.)
  const bool shared = M > 0 && classes.size() > 1;
  if (shared) classes.all_reduce(max.data(), M, comm::ReduceOp::Max);
  // Per row: the sum of exp(x - max) and the target's x - max (summed), and the first class at
  // the max as -class (the largest wins; -K: none here).
  std::vector<float> sums(static_cast<size_t>(2 * M), 0.0f), first(static_cast<size_t>(M), -static_cast<float>(K));
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = row(m);
    const float mx = max[static_cast<size_t>(m)];
    double s = 0.0;
    for (int64_t j = 0; j < real; ++j) s += std::exp(static_cast<double>(xm[j] - mx));
    sums[static_cast<size_t>(m)] = static_cast<float>(s);
    const int64_t c = target(m) - block.col0;
    if (c >= 0 && c < real) sums[static_cast<size_t>(M + m)] = xm[c] - mx;
    for (int64_t j = 0; j < real; ++j)
      if (xm[j] == mx) {
        first[static_cast<size_t>(m)] = -static_cast<float>(block.col0 + j);
        break;
      }
  }
  if (shared) {
    classes.all_reduce(sums.data(), 2 * M, comm::ReduceOp::Sum);
    classes.all_reduce(first.data(), M, comm::ReduceOp::Max);
  }
  Tensor totals = Tensor::zeros({2});  // this rank's nodes: the loss sum and the correct count
  double loss = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    loss += std::log(static_cast<double>(sums[static_cast<size_t>(m)])) - sums[static_cast<size_t>(M + m)];
    totals.f32()[1] += -first[static_cast<size_t>(m)] == static_cast<float>(target(m)) ? 1.0f : 0.0f;
  }
  totals.f32()[0] = static_cast<float>(loss);
  grid.all_reduce(totals, last_.roles().depth);
  out.loss = static_cast<float>(static_cast<double>(totals.f32()[0]) / static_cast<double>(out.count));
  out.correct = static_cast<int64_t>(totals.f32()[1]);
  if (backward) {  // (softmax - one-hot) * scale / count on the labelled rows, 0 elsewhere
    Tensor grad = Tensor::zeros(logits.shape());
    const float dloss = scale / static_cast<float>(out.count);
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = row(m);
      float* g = grad.f32() + picked[static_cast<size_t>(m)] * cols;
      const float mx = max[static_cast<size_t>(m)], inv_sum = dloss / sums[static_cast<size_t>(m)];
      for (int64_t j = 0; j < real; ++j) g[j] = std::exp(xm[j] - mx) * inv_sum;
      const int64_t c = target(m) - block.col0;
      if (c >= 0 && c < real) g[c] -= dloss;
    }
    std::copy_n(grad.f32(), grad.numel(), logits.f32());
  }
  return out;
}

Tensor targets_for(const nn::GraphConv& last, const Tensor& whole) {
  const auto* conv = dynamic_cast<const GraphConv3D*>(&last);
  if (conv == nullptr) return whole;
  const std::vector<int64_t>& nodes = *conv->output_block().nodes;
  check(whole.dtype() == DType::I32 && whole.numel() == conv->graph_nodes(), "targets_for: (", conv->graph_nodes(),
        ") i32 targets expected, got ", shape_str(whole.shape()));
  Tensor block = Tensor::empty({static_cast<int64_t>(nodes.size())}, DType::I32, MemoryCategory::Other);
  for (size_t r = 0; r < nodes.size(); ++r) block.i32()[r] = whole.i32()[nodes[r]];
  return block;
}

std::unique_ptr<nn::NodeCrossEntropy> node_loss_for(const nn::GraphConv& last) {
  if (const auto* conv = dynamic_cast<const GraphConv3D*>(&last)) return std::make_unique<ClassParallelNodeLoss>(*conv);
  return std::make_unique<nn::NodeCrossEntropy>();
}

}  // namespace loom::parallel::graph3d
