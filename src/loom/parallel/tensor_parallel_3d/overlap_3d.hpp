// The overlap of 3D tensor parallelism's collectives with compute (tp_3d_overlap = "on"):
// each layer's depth all-gather of its weight is started two layers ahead (the next layers' in
// forward, the previous ones' in backward) and runs while the layers before it compute; the
// sums of forward's output rows run under the GEMM of the following rows (linear_3d.cpp); the
// all-reduce of dX runs under the dW GEMM, and a pair's first layer's gather of its whole dX
// behind it (linear_3d.cpp); and the reduce-scatter of dW stays in flight until
// the next layer's backward has started its own (attention, LayerNorm and GELU backward run
// meanwhile). The collectives are the blocking path's, in an order every rank of a group
// shares, so the results are bit-identical to it.
//
// Recompute replays a block's forward inside backward: the replay of a block's last layer
// would prefetch the next block's first layer, whose backward is already done; a layer's
// backward therefore waits for and drops every prefetch of a later layer, so no gather
// outlives the step (the weights change at the optimizer step).
#pragma once

#include <deque>
#include <vector>

#include "loom/nn/parameter.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::tp3d {

class Overlap3D {
 public:
  explicit Overlap3D(const Grid3D& grid) : grid_(grid) {}

  // Registers a layer's depth-sharded weight, in forward order (the builder's); its index.
  int add(nn::Parameter& weight, int64_t blocks);
  // Layer i's weight block gathered over depth: its prefetch when one is in flight, else now.
  Tensor gathered_weight(int i);
  // Starts gathering layer i's weight (nothing when out of range, already in flight, or
  // its value is not here: ZeRO-3 between gathers).
  void prefetch(int i);
  // Forward at layer i: starts the gathers of the next kAhead layers; backward: of the
  // previous kAhead. One layer ahead leaves the depth link idle under short layers (the
  // attention projection) and then exposes the next, larger gather; two keep it busy.
  void prefetch_after(int i);
  void prefetch_before(int i);
  static constexpr int kAhead = 2;
  // Waits for and discards the prefetches of the layers after i.
  void drop_after(int i);
  // Keeps a started reduce-scatter of a weight's gradient in flight; once more than
  // kGradientsInFlight are, completes the oldest into its parameter's gradient. Several in
  // flight let a rank run ahead of peers that share its core instead of waiting for them.
  void defer_gradient(Grid3D::Pending reduce_scatter, nn::Parameter& weight);
  static constexpr size_t kGradientsInFlight = 2;
  // Completes the kept reduce-scatters (the last layer of backward: before its gradients are read).
  void finish_gradients();

 private:
  struct Layer {
    nn::Parameter* weight;
    int64_t blocks;
    Grid3D::Pending in_flight;
  };
  const Grid3D& grid_;
  std::vector<Layer> layers_;
  struct Deferred {
    Grid3D::Pending reduce_scatter;
    nn::Parameter* weight;
  };
  std::deque<Deferred> gradients_;  // oldest first
  void finish_oldest_gradient();
};

}  // namespace loom::parallel::tp3d
