// The layer builder that makes a model 3D tensor-parallel (AxoNN's auto_parallelize, by layer
// substitution: docs/architecture.md). A column-parallel request (attention's QKV, the MLP's
// fc) becomes a Linear3D with input features over col and output features over row; the
// row-parallel request that follows it swaps the two (input over row, output over col, the
// output gathered whole). Everything else (embedding, LayerNorm, residual, the tied head,
// the loss) stays serial on the whole features of this rank's batch rows, so attention heads
// are split over row, the axis holding the QKV output features. A layer whose shapes do not
// divide the grid stays serial (SerialLinear3D) and is listed in fallbacks(). A mixture of
// experts shares its experts out over the grid's plane (plane_experts.hpp), or, where the
// plane's ranks do not divide the experts, runs them all on every plane rank (listed too).
#pragma once

#include <array>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/nn/layer_builder.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"
#include "loom/parallel/tensor_parallel_3d/overlap_3d.hpp"
#include "loom/parallel/tensor_parallel_3d/plane_experts.hpp"

namespace loom::parallel::tp3d {

class Layers3D : public nn::LayerBuilder {
 public:
  // overlap: the 3D layers' collectives overlapped with compute (overlap_3d.hpp); plane: the
  // row x col ranks of this depth slice, over which a mixture of experts shares its experts out
  // (null: every plane rank runs every expert); expert_statistics: the plane's ranks again, for
  // the experts' routing statistics (PlaneExperts).
  explicit Layers3D(const Grid3D& grid, bool overlap = false, comm::ProcessGroup* plane = nullptr,
                    comm::ProcessGroup* expert_statistics = nullptr)
      : grid_(grid), overlap_(overlap ? std::make_unique<Overlap3D>(grid) : nullptr),
        plane_experts_(plane != nullptr ? std::make_unique<PlaneExperts>(*plane, expert_statistics) : nullptr) {}

  int64_t tensor_parallel_size() const override { return grid_.size(Axis::Row); }
  int64_t first_head(int64_t NH) const override { return grid_.rank(Axis::Row) * NH; }
  int64_t vocabulary_parts() const override { return 1; }
  std::unique_ptr<nn::Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const override;
  std::unique_ptr<nn::Linear> row_parallel_linear(int64_t in, int64_t out) const override;
  std::unique_ptr<nn::MoE> mixture_of_experts_over(int64_t C, const nn::MoeConfig& config,
                                                   const nn::SequenceParts& parts) const override;
  // The ranks a mixture of E experts shares them out over on a grid of these axis sizes (row,
  // col, depth): the plane's R x C where they divide E, else 1 (each plane rank runs all E).
  static int64_t expert_split(int64_t E, const std::array<int64_t, 3>& sizes);

  // A layer kept serial (or a mixture of experts whole on every plane rank), and why (its name
  // is known once the model has registered it).
  struct Fallback {
    const nn::Module* layer;
    std::string why;
  };
  const std::vector<Fallback>& fallbacks() const { return fallbacks_; }
  // The weights split over depth (each depth rank holds a different piece): every other
  // parameter's gradient is partial over depth and is averaged over it.
  bool depth_sharded(const nn::Parameter& p) const { return depth_sharded_.count(&p) > 0; }
  const Grid3D& grid() const { return grid_; }
  // Completes every weight gradient's reduce-scatter over depth still in flight (overlap keeps
  // them past the layer's backward): before sharded data parallelism reads a unit's gradients.
  void land_gradients() const {
    if (overlap_) overlap_->finish_gradients();
  }

  // What a rank of a grid of these axis sizes (row, col, depth) holds of the layer a
  // column-parallel (`first`) or row-parallel request (in, out, blocks) becomes: its Linear3D
  // shard, or the whole weight and bias where the shapes do not divide the grid (the serial
  // fallback). The memory check counts a grid rank's state with it before any grid exists.
  struct Share {
    int64_t weight = 0, bias = 0;
  };
  static Share share(int64_t in, int64_t out, int64_t blocks, bool first, const std::array<int64_t, 3>& sizes);
  // Whether that layer is a Linear3D (false: the serial fallback, on whole features).
  static bool splits(int64_t in, int64_t out, int64_t blocks, bool first, const std::array<int64_t, 3>& sizes);

 protected:
  // A parameter whose gradient every depth rank already holds whole (not averaged over depth).
  void keep_gradient_over_depth(const nn::Parameter& p) const { depth_sharded_.insert(&p); }

 private:
  std::unique_ptr<nn::Linear> make(int64_t in, int64_t out, int64_t blocks, bool first) const;
  const Grid3D& grid_;
  std::unique_ptr<Overlap3D> overlap_;
  std::unique_ptr<PlaneExperts> plane_experts_;
  mutable std::vector<Fallback> fallbacks_;
  mutable std::set<const nn::Parameter*> depth_sharded_;
};

}  // namespace loom::parallel::tp3d
