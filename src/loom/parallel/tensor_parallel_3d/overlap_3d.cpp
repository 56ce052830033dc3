#include "loom/parallel/tensor_parallel_3d/overlap_3d.hpp"

#include "loom/kernels/residual.hpp"

namespace loom::parallel::tp3d {

int Overlap3D::add(nn::Parameter& weight, int64_t blocks) {
  layers_.push_back({.weight = &weight, .blocks = blocks, .in_flight = {}});
  return static_cast<int>(layers_.size()) - 1;
}

Tensor Overlap3D::gathered_weight(int i) {
  Layer& l = layers_.at(static_cast<size_t>(i));
  if (l.in_flight.active()) return l.in_flight.wait();
  return grid_.all_gather_depth(l.weight->gemm_value(), l.blocks);
}

void Overlap3D::prefetch(int i) {
  if (i < 0 || i >= static_cast<int>(layers_.size())) return;
  Layer& l = layers_[static_cast<size_t>(i)];
  // Under ZeRO-3 a layer of the next unit has no value yet (its gather binds it just before
  // the unit runs): that layer gathers when it runs instead.
  if (!l.in_flight.active() && l.weight->has_value())
    l.in_flight = grid_.start_all_gather_depth(l.weight->gemm_value(), l.blocks);
}

void Overlap3D::prefetch_after(int i) {
  for (int k = 1; k <= kAhead; ++k) prefetch(i + k);
}

void Overlap3D::prefetch_before(int i) {
  for (int k = 1; k <= kAhead; ++k) prefetch(i - k);
}

void Overlap3D::drop_after(int i) {
  for (size_t j = static_cast<size_t>(i) + 1; j < layers_.size(); ++j)
    if (layers_[j].in_flight.active()) layers_[j].in_flight.wait();
}

void Overlap3D::defer_gradient(Grid3D::Pending reduce_scatter, nn::Parameter& weight) {
  gradients_.push_back({std::move(reduce_scatter), &weight});
  while (gradients_.size() > kGradientsInFlight) finish_oldest_gradient();
}

void Overlap3D::finish_oldest_gradient() {
  Deferred d = std::move(gradients_.front());
  gradients_.pop_front();
  const Tensor shard = d.reduce_scatter.wait();
  kernels::add_inplace(d.weight->grad().f32(), shard.f32(), shard.numel());
  d.weight->grad_contributed();
}

void Overlap3D::finish_gradients() {
  while (!gradients_.empty()) finish_oldest_gradient();
}

}  // namespace loom::parallel::tp3d
