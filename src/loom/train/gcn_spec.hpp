// The GCN family behind the model seam: a node-classification graph (data/graph.hpp) trained
// whole, one optimizer step per epoch (Kipf & Welling 2017). A "batch" is the node features
// with the targets of one split (the other nodes' targets are -1); the loss is the softmax
// cross-entropy over that split's nodes plus, in training, the L2 penalty weight_decay / 2 ·
// ||W0||² on the first layer's weights (the paper's regulariser, in place of AdamW's
// decoupled decay, which no GCN parameter takes). Asking for a batch sets the model's mode:
// a training batch of step s turns dropout on with masks keyed by (seed, s), an evaluation
// batch turns it off. Serial, or Plexus's 3D grid (tp_3d: parallel/graph_3d); any other
// parallel layout is refused by name. On a grid the spec reads the nodes when made (their
// features' shape, not their values) and counts the entries of Â each block will receive (a
// pass over the edges that keeps none), and build() streams the edges again into the rank's
// blocks of Â (GraphLayers3D::read_graph) and reads the features, once, into the rank's shard:
// no rank holds the whole edge list, Â or the features. The edges stream twice, the memory
// check between the two (block_entries.hpp says why nothing larger than counts and a digest is
// carried across it).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "loom/data/graph.hpp"
#include "loom/nn/gcn.hpp"
#include "loom/nn/node_cross_entropy.hpp"
#include "loom/parallel/graph_3d/block_entries.hpp"
#include "loom/plan/gcn_cost.hpp"
#include "loom/train/model_spec.hpp"

namespace loom::train {

// Bytes of a graph's data one rank holds while it trains, by part.
struct GraphDataBytes {
  int64_t features = 0;   // the model's input: the whole N x F features, or a grid rank's first layer's shard
  int64_t nodes = 0;      // per-node arrays: the three splits' targets, labels and split; on a grid each layer's
                          // lists of its rows' and columns' nodes (and the node orders, 32 bytes a node, while held)
  int64_t adjacency = 0;  // Â and Âᵀ in CSR (row pointers, columns, values), or on a grid each layer's block of Â
                          // and its transpose
  int64_t total() const { return features + nodes + adjacency; }
};

class GcnSpec : public ModelSpec {
 public:
  // Reads the graph config.data names (split: config.split), normalises its features by row
  // and builds Â (on a grid: reads the nodes, build() the edges); evaluates the whole
  // validation split as one batch (eval_batches = 1).
  explicit GcnSpec(TrainConfig& config);

  std::vector<std::unique_ptr<nn::Module>> build(const nn::LayerBuilder& layers, int64_t pp_rank) override;
  std::vector<nn::Module*> layers_of(nn::Module& chunk) override;
  nn::Parameter* tied_parameter(nn::Module&) override { return nullptr; }
  bool owns_tied_parameter(nn::Module&) override { return false; }
  Shape stage_activation_shape() const override;
  void build_loss(comm::ProcessGroup&) override {}
  float loss(Tensor& logits, const Tensor& targets, bool backward, float scale) override;
  data::Batch train_batch(int64_t step, int64_t m, int dp_rank) override;
  data::Batch eval_batch(int64_t i, int dp_rank) override;
  data::Batch test_batch(int64_t i, int dp_rank) override;
  int64_t test_batches() const override { return graph_.count(data::NodeSplit::Test) > 0 ? 1 : 0; }
  std::string data_identity() const override { return identity_; }
  std::string describe() const override;
  StepWork step_work() const override;
  MemoryNeed memory_need() const override;
  int64_t activation_bytes(nn::Module&) override { return activation_estimate(position()); }
  DataBytes data_bytes() const override { return {data_need(position()).total(), data_held().total()}; }
  std::vector<Metric> last_metrics() const override { return metrics_; }

  // The graph's nodes (its features moved into the model's input), and its edges where it was
  // read whole (not on a grid).
  const data::Graph& graph() const { return graph_; }
  const nn::GraphOperator& graph_operator() const { return *operator_; }
  // Bytes of the graph's structure this rank holds: the whole Â (with Âᵀ) when read whole
  // (the edges as read are let go once Â is built); 0 on a grid, whose layers hold their
  // blocks (GraphConv3D::block()).
  int64_t structure_bytes() const;
  // The graph data the rank at grid position `at` = {row, col, depth} holds once build() has
  // made the model (serially: the one rank), predicted from what is known when the spec is
  // made, as memory_need() counts it. Exact but for a grid's blocks of Â, which are bounded
  // from above by the entries counted into each at open (block_entries.hpp): equal where the
  // graph lists no edge twice (either way) and no self-loop (adjacency_exact()).
  GraphDataBytes data_need(std::array<int64_t, 3> at = {0, 0, 0}) const;
  // What this rank holds of it after build(), measured from its tensors and arrays (allocated
  // bytes: capacities).
  GraphDataBytes data_held() const;
  // Whether the first layer multiplies the whole features as a sparse matrix (its weight then
  // has no bf16 copy); false on a grid, whose first layer aggregates its shard first.
  bool features_multiplied_sparse() const;
  // Whether data_need's Â is exact: serially, or once the whole Â's non-zeros are known (after
  // build(), or a dry run's read_whole_graph()) and equal to the entries counted.
  bool adjacency_exact() const;
  // The memory of the rank at grid position `at`: its parameters' shards with their gradients,
  // optimizer state (and bf16 copies), its activations and its graph data.
  MemoryNeed memory_need_at(std::array<int64_t, 3> at) const;
  // The grid position whose memory_need_at is the largest ({0, 0, 0} serially): memory_need()'s.
  std::array<int64_t, 3> largest_position() const;
  // This rank's grid position once build() has made the model ({0, 0, 0} serially or before).
  std::array<int64_t, 3> position() const;
  // Reads the edges (and the features, when not kept) into graph() and builds the whole Â now
  // (a grid's spec reads them in build()): for a dry run, which describes the whole graph
  // without building a model.
  void read_whole_graph();
  // The run as Plexus's cost model (plan/gcn_cost.hpp) reads it: graph, widths, precision.
  plan::GcnShape plan_shape() const;

 private:
  // (N) i32: each node's class when it is in `split`, else -1.
  Tensor targets_of(data::NodeSplit split) const;
  // graph()'s whole features, normalised by row, into features_ (graph() keeps none).
  void take_whole_features();
  int64_t classes() const { return graph_.num_classes; }
  // What the forward keeps for backward at grid position `at`, and the logits.
  int64_t activation_estimate(std::array<int64_t, 3> at) const;
  // Bytes of parameter state at any grid position (the shards are equal).
  double state_bytes() const;

  const TrainConfig& config_;
  data::Graph graph_;
  std::unique_ptr<data::GraphSource> edges_source_;  // on a grid, until build() reads the edges and features
  std::shared_ptr<const parallel::graph3d::NodeOrders> orders_;  // on a grid, drawn at open, until build()
  std::weak_ptr<const parallel::graph3d::NodeOrders> orders_handed_;  // to build()'s layers, for data_held()
  parallel::graph3d::BlockEntries block_entries_;                 // on a grid: counted at open
  std::string identity_;
  std::shared_ptr<const nn::GraphOperator> operator_;  // null on a grid
  int64_t edges_ = 0, nnz_ = 0;                        // the graph's edges and Â's non-zeros
  Tensor features_;  // (N, F), or what a parallel model's first layer reads of them (on a grid: read in build())
  Tensor train_targets_, val_targets_, test_targets_;  // (N) i32
  nn::GCN* model_ = nullptr;  // what build() made
  std::unique_ptr<nn::NodeCrossEntropy> loss_;  // on the model's output as its layers lay it out
  std::string split_name_ = "train";  // of the last batch handed out
  std::vector<Metric> metrics_;
};

}  // namespace loom::train
