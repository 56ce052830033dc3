#include "loom/train/gcn_spec.hpp"

#include <algorithm>
#include <sstream>

#include "loom/error.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/parallel/graph_3d/class_parallel_loss.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/graph_3d/graph_layers_3d.hpp"
#include "loom/parallel/graph_3d/local_adjacency.hpp"
#include "loom/parallel/graph_3d/local_features.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::train {

namespace {

// The (in, out) widths of each layer.
std::vector<std::pair<int64_t, int64_t>> layer_widths(const nn::GcnConfig& c, int64_t F, int64_t K) {
  std::vector<std::pair<int64_t, int64_t>> widths;
  int64_t in = F;
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t out = l + 1 == c.layers ? K : c.hidden;
    widths.emplace_back(in, out);
    in = out;
  }
  return widths;
}

}  // namespace

GcnSpec::GcnSpec(TrainConfig& config) : config_(config) {
  // Full-graph training takes one batch a step, the whole graph: nothing for data parallelism
  // (or ZeRO's shards of it) to split. Its ranks go to the 3D grid.
  check(config.dp == 1 && config.zero == 0, "the gcn model trains on the whole graph, one batch a step: dp (",
        config.dp, ") and zero (", config.zero, ") have no batch to split (one graph); set dp = 1 and zero = 0 and "
        "spread the graph over ranks with tp_3d = \"R,C,D\"");
  check(config.pp == 1 && config.tp == 1, "the gcn model trains on one rank or on a 3D grid (tp_3d = \"R,C,D\"): pp (",
        config.pp, ") and tp (", config.tp, ") are GPT layouts; set both to 1");
  check(config.micro_batches == 1, "the gcn model trains on the whole graph in one batch: micro_batches must be 1, got ",
        config.micro_batches);
  // GPT options a graph network has no use for: refused rather than silently ignored.
  check(!config.model.moe.enabled(), "moe_experts (", config.model.moe.experts,
        ") makes a GPT's blocks mixtures of experts; the gcn model has none");
  check(!config.model.recompute, "recompute re-runs a GPT's blocks in backward; the gcn model does not recompute");
  check(!config.model.selective_recompute,
        "selective_recompute recomputes a GPT's attention probabilities; the gcn model has no attention");
  check(config.model.hidden_dropout == 0.0, "hidden_dropout (", config.model.hidden_dropout,
        ") drops out a GPT's residual branches; the gcn model drops out between its layers with gcn_dropout");
  check(config.model.attention_dropout == 0.0, "attention_dropout (", config.model.attention_dropout,
        ") drops out a GPT's attention probabilities; the gcn model drops out between its layers with gcn_dropout");
  config.gcn.validate();
  config.eval_batches = 1;
  // On a grid the features are read in build(), each rank keeping its shard alone.
  edges_source_ = data::open_graph(config.data, config.split, /*keep_features=*/!config.tp_3d_on());
  graph_ = edges_source_->take_nodes();
  graph_.labels.shrink_to_fit(), graph_.split.shrink_to_fit();  // held while training: N of each, as data_need() counts
  if (!config.tp_3d_on()) {
    read_whole_graph();
    take_whole_features();
  } else {
    // What each block of Â will receive, for the memory check before build() reads the edges
    // into the blocks (over the same orders, handed to it).
    orders_ = parallel::graph3d::node_orders(graph_.num_nodes, config.graph_permute, static_cast<uint64_t>(config.seed));
    block_entries_ = parallel::graph3d::count_block_entries(*edges_source_, config.tp_3d_grid(), *orders_, config.gcn.layers);
  }
  train_targets_ = targets_of(data::NodeSplit::Train);
  val_targets_ = targets_of(data::NodeSplit::Val);
  test_targets_ = targets_of(data::NodeSplit::Test);
  check(graph_.count(data::NodeSplit::Val) > 0, graph_.name, ": no validation nodes (set split, or mark nodes 'val')");
}

void GcnSpec::read_whole_graph() {
  if (!edges_source_) return;  // read already
  data::read_features(*edges_source_, graph_);
  data::read_edges(*edges_source_, graph_);
  identity_ = graph_.identity(data::EdgeDigest::of(graph_.src, graph_.dst), graph_.nodes_crc(edges_source_->features_crc()));
  edges_source_.reset();
  operator_ = nn::GraphOperator::from(kernels::gcn_normalized_adjacency(graph_.num_nodes, graph_.src, graph_.dst));
  edges_ = static_cast<int64_t>(graph_.src.size());
  nnz_ = operator_->adjacency.nnz();
  // In Â now (identity_ and edges_ keep what else they said). Swapped with empty vectors: `= {}`
  // assigns an empty list and keeps the capacity.
  std::vector<int64_t>().swap(graph_.src), std::vector<int64_t>().swap(graph_.dst);
}

void GcnSpec::take_whole_features() {
  data::row_normalize_features(graph_);
  features_ = Tensor::empty({graph_.num_nodes, graph_.num_features}, DType::F32, MemoryCategory::Other);
  std::copy(graph_.features.begin(), graph_.features.end(), features_.f32());
  std::vector<float>().swap(graph_.features);  // held once: features_
}

bool GcnSpec::features_multiplied_sparse() const {
  return !config_.tp_3d_on() && features_.defined() && nn::GraphConv::multiplies_sparse(features_);
}

int64_t GcnSpec::structure_bytes() const {
  int64_t bytes = static_cast<int64_t>((graph_.src.capacity() + graph_.dst.capacity()) * sizeof(int64_t));
  if (operator_)
    bytes += parallel::graph3d::csr_bytes(operator_->adjacency) + parallel::graph3d::csr_bytes(operator_->transposed);
  return bytes;
}

Tensor GcnSpec::targets_of(data::NodeSplit split) const {
  Tensor t = Tensor::empty({graph_.num_nodes}, DType::I32, MemoryCategory::Other);
  for (int64_t i = 0; i < graph_.num_nodes; ++i)
    t.i32()[i] = graph_.split[static_cast<size_t>(i)] == split ? graph_.labels[static_cast<size_t>(i)] : -1;
  return t;
}

std::vector<std::unique_ptr<nn::Module>> GcnSpec::build(const nn::LayerBuilder& layers, int64_t) {
  // A grid: its layers read their blocks of Â alone, and its first layer its shard of the
  // features; or, on any other builder, the whole graph.
  std::unique_ptr<data::GraphSource> nodes_source;
  data::EdgeDigest digest;
  if (edges_source_) {
    if (const auto* grid = dynamic_cast<const parallel::graph3d::GraphLayers3D*>(&layers)) {
      check(grid->permute() == config_.graph_permute && grid->seed() == static_cast<uint64_t>(config_.seed),
            "graph_3d: the layer builder's node orders differ from the run's (graph_permute, seed)");
      const parallel::graph3d::LocalAdjacency& local =
          grid->read_graph(*edges_source_, digest, orders_, &block_entries_);
      orders_handed_ = orders_;
      orders_.reset();  // the layers' now, which let them go once built
      nodes_source = std::move(edges_source_);
      edges_ = digest.count();
      nnz_ = local.nnz;
    } else {
      read_whole_graph();
      take_whole_features();
    }
  }
  auto model = std::make_unique<nn::GCN>(config_.gcn, graph_.num_features, classes(), operator_,
                                         static_cast<uint64_t>(config_.seed), layers);
  model_ = model.get();
  const nn::GraphConv& last = *model->convs().back();
  loss_ = parallel::graph3d::node_loss_for(last);
  for (Tensor* targets : {&train_targets_, &val_targets_, &test_targets_})
    *targets = parallel::graph3d::targets_for(last, *targets);  // a parallel rank's rows'
  if (nodes_source) {
    // Every feature read (and digested) here, once: the identity has its part now.
    features_ = parallel::graph3d::read_input_shard(
        dynamic_cast<const parallel::graph3d::GraphConv3D&>(*model->convs().front()), *nodes_source,
        data::row_normalize);
    identity_ = graph_.identity(digest, graph_.nodes_crc(nodes_source->features_crc()));
    // In the targets now, as far as this rank's rows go (split stays: the counts).
    std::vector<int32_t>().swap(graph_.labels);
  } else {
    features_ = parallel::graph3d::model_input_for(*model->convs().front(), features_);  // a parallel rank's shard
  }
  std::vector<std::unique_ptr<nn::Module>> chunks;
  chunks.push_back(std::move(model));
  return chunks;
}

std::vector<nn::Module*> GcnSpec::layers_of(nn::Module& chunk) {
  std::vector<nn::Module*> convs;
  for (nn::GraphConv* conv : dynamic_cast<nn::GCN&>(chunk).convs()) convs.push_back(conv);
  return convs;
}

Shape GcnSpec::stage_activation_shape() const { return {graph_.num_nodes, config_.gcn.hidden}; }

float GcnSpec::loss(Tensor& logits, const Tensor& targets, bool backward, float scale) {
  trace::Span span("loss", backward ? "loss forward+backward" : "loss");
  const nn::NodeLoss l = (*loss_)(logits, targets, backward, scale);
  metrics_ = {{split_name_ + "_acc", static_cast<double>(l.correct) / static_cast<double>(l.count)}};
  float loss = l.loss;
  if (backward && config_.weight_decay > 0.0) {
    // The paper's L2 on the first layer's weights: loss + wd/2 ||W0||², gradient wd · W0.
    nn::GraphConv& first = *model_->convs().front();
    nn::Parameter& w0 = first.weight();  // this rank's block under a parallel layout
    const auto wd = static_cast<float>(config_.weight_decay);
    loss += static_cast<float>(0.5 * config_.weight_decay * first.weight_sum_squares());
    float* g = w0.grad().f32();
    const float* w = w0.value().f32();
    for (int64_t i = 0; i < w0.numel(); ++i) g[i] += wd * scale * w[i];
  }
  return loss;
}

data::Batch GcnSpec::train_batch(int64_t step, int64_t, int) {
  model_->train_mode(static_cast<uint64_t>(step));
  split_name_ = "train";
  return {features_, train_targets_};
}

data::Batch GcnSpec::eval_batch(int64_t, int) {
  model_->eval_mode();
  split_name_ = "val";
  return {features_, val_targets_};
}

data::Batch GcnSpec::test_batch(int64_t, int) {
  model_->eval_mode();
  split_name_ = "test";
  return {features_, test_targets_};
}

std::string GcnSpec::describe() const {
  std::ostringstream os;
  os << config_.gcn.num_parameters(graph_.num_features, classes()) << " parameters | GCN " << graph_.num_features;
  for (const auto& [in, out] : layer_widths(config_.gcn, graph_.num_features, classes())) os << " -> " << out;
  os << ", dropout " << config_.gcn.dropout << " | " << graph_.summary(edges_) << ", " << nnz_ << " non-zeros in Â";
  return os.str();
}

StepWork GcnSpec::step_work() const {
  // Per epoch, each layer: forward GEMM + SpMM (on the narrower side), backward dW GEMM +
  // SpMM, and dX GEMM except on the first layer.
  const double N = static_cast<double>(graph_.num_nodes), nnz = static_cast<double>(nnz_);
  double flops = 0.0;
  bool first = true;
  for (const auto& [in, out] : layer_widths(config_.gcn, graph_.num_features, classes())) {
    const double gemm = 2.0 * N * static_cast<double>(in * out), spmm = 2.0 * nnz * static_cast<double>(std::min(in, out));
    flops += (first ? 2.0 : 3.0) * gemm + 2.0 * spmm;
    first = false;
  }
  return {"edges", "edges_per_s", nnz, flops};
}

plan::GcnShape GcnSpec::plan_shape() const {
  return {.N = graph_.num_nodes, .nnz = nnz_, .F = graph_.num_features, .H = config_.gcn.hidden,
          .K = classes(), .L = config_.gcn.layers, .labelled = graph_.count(data::NodeSplit::Train),
          .weight_decay = config_.weight_decay > 0, .bf16 = config_.precision == "bf16"};
}

double GcnSpec::state_bytes() const {
  // fp32 value and gradient, the optimizer's state (AdamW's two moments, SGD's momentum), and
  // under bf16 mixed precision the GEMMs' bf16 copy of a weight.
  const double per_parameter = 8.0 + (config_.optimizer == "adamw" ? 8.0 : 4.0);
  const bool bf16 = config_.precision == "bf16";
  if (!config_.tp_3d_on()) {
    // Each layer's W and b; a bf16 copy of every W but the first layer's when it multiplies the
    // sparse features (nn::GraphConv::sparse_input: not a GEMM, it reads the fp32 weight).
    double params = 0.0, copies = 0.0;
    bool first = true;
    for (const auto& [in, out] : layer_widths(config_.gcn, graph_.num_features, classes())) {
      params += static_cast<double>(in * out + out);
      if (bf16 && !(first && !nn::GraphConv::aggregates_first(in, out) && features_multiplied_sparse())) copies += static_cast<double>(in * out);
      first = false;
    }
    return per_parameter * params + 2.0 * copies;
  }
  // A grid rank's shards, equal on every rank: W (in/inner x out/(outer x depth)) and b's
  // columns; every W is read by a GEMM (a grid aggregates first), so each has its copy.
  double weights = 0.0, biases = 0.0;
  const auto widths = layer_widths(config_.gcn, graph_.num_features, classes());
  for (size_t l = 0; l < widths.size(); ++l) {
    const auto w = parallel::graph3d::LocalWidths::of(widths[l].first, widths[l].second, static_cast<int64_t>(l),
                                                      config_.tp_3d_grid());
    weights += static_cast<double>(w.in * w.shard);
    biases += static_cast<double>(w.shard);
  }
  return per_parameter * (weights + biases) + (bf16 ? 2.0 * weights : 0.0);
}

MemoryNeed GcnSpec::memory_need_at(std::array<int64_t, 3> at) const {
  return {.state = state_bytes(), .activations = static_cast<double>(activation_estimate(at)),
          .data = static_cast<double>(data_need(at).total())};
}

std::array<int64_t, 3> GcnSpec::largest_position() const {
  std::array<int64_t, 3> largest{0, 0, 0};
  if (!config_.tp_3d_on()) return largest;
  const std::array<int64_t, 3> g = config_.tp_3d_grid();
  double most = -1.0;
  for (int64_t r = 0; r < g[0]; ++r)
    for (int64_t c = 0; c < g[1]; ++c)
      for (int64_t d = 0; d < g[2]; ++d)
        if (const double total = memory_need_at({r, c, d}).total(); total > most) most = total, largest = {r, c, d};
  return largest;
}

MemoryNeed GcnSpec::memory_need() const { return memory_need_at(largest_position()); }

std::array<int64_t, 3> GcnSpec::position() const {
  std::array<int64_t, 3> at{0, 0, 0};
  if (model_ == nullptr) return at;
  if (const auto* conv = dynamic_cast<const parallel::graph3d::GraphConv3D*>(model_->convs().front()))
    for (const parallel::tp3d::Axis a : {parallel::tp3d::Axis::Row, parallel::tp3d::Axis::Col, parallel::tp3d::Axis::Depth})
      at[static_cast<size_t>(a)] = conv->grid().rank(a);
  return at;
}

bool GcnSpec::adjacency_exact() const {
  return !config_.tp_3d_on() || (nnz_ > 0 && block_entries_.total(graph_.num_nodes) == nnz_);
}

GraphDataBytes GcnSpec::data_need(std::array<int64_t, 3> at) const {
  const int64_t N = graph_.num_nodes, F = graph_.num_features;
  const auto csr = [](int64_t rows, int64_t nnz) { return 8 * (rows + 1) + 8 * nnz; };  // row_ptr; col + val
  GraphDataBytes need;
  if (!config_.tp_3d_on()) {
    need.features = 4 * N * F;
    need.nodes = 3 * 4 * N + 4 * N + N;  // the targets (i32), labels (i32), split (1 byte)
    need.adjacency = 2 * csr(N, nnz_);   // Â built at open: its non-zeros counted
    return need;
  }
  // A grid rank: per layer (roles rotating, graph_conv_3d.hpp) its rows (its depth part of
  // N), its columns (its outer part), Â's block and the transpose (at most the entries counted
  // into the block: duplicates fold), and the lists of both's nodes; the first layer's input
  // shard (its columns over depth, padded, x its inner part of F, padded); the last layer's
  // rows' targets; the split (labels go once the targets are cut, the node orders once the
  // layers hold their lists of nodes).
  const std::array<int64_t, 3> sizes = config_.tp_3d_grid();
  const auto part = [&](parallel::tp3d::Axis a) {
    const auto [begin, end] = parallel::graph3d::part_range(N, sizes[static_cast<size_t>(a)], at[static_cast<size_t>(a)]);
    return end - begin;
  };
  need.nodes = N;
  const auto widths = layer_widths(config_.gcn, F, classes());
  for (size_t l = 0; l < widths.size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    const parallel::graph3d::Roles r = parallel::graph3d::Roles::of(layer);
    const int64_t rows = part(r.depth), cols = part(r.outer);
    const int64_t nnz = block_entries_.of(layer, at);
    need.adjacency += csr(rows, nnz) + csr(cols, nnz);
    need.nodes += 8 * (rows + cols);
    if (l == 0) {
      const int64_t depth = sizes[static_cast<size_t>(r.depth)];
      const int64_t in_local = parallel::graph3d::LocalWidths::of(F, widths[0].second, 0, sizes).in;
      need.features = 4 * parallel::graph3d::padded(cols, depth) / depth * in_local;
    }
    if (l + 1 == widths.size()) need.nodes += 3 * 4 * rows;
  }
  return need;
}

GraphDataBytes GcnSpec::data_held() const {
  GraphDataBytes held;
  held.features = features_.nbytes() + static_cast<int64_t>(graph_.features.capacity() * sizeof(float));
  held.nodes = train_targets_.nbytes() + val_targets_.nbytes() + test_targets_.nbytes() +
               static_cast<int64_t>(graph_.labels.capacity() * sizeof(int32_t) +
                                    graph_.split.capacity() * sizeof(data::NodeSplit));
  held.adjacency = structure_bytes();
  if (model_ == nullptr) return held;
  for (const nn::GraphConv* conv : model_->convs())
    if (const auto* grid = dynamic_cast<const parallel::graph3d::GraphConv3D*>(conv)) {
      held.adjacency += grid->block_bytes();
      held.nodes += grid->node_list_bytes();
    }
  // The node orders, while anything holds them (the spec until build(), then the layer builder).
  if (const auto orders = orders_ ? orders_ : orders_handed_.lock()) held.nodes += orders->bytes();
  return held;
}

int64_t GcnSpec::activation_estimate(std::array<int64_t, 3> at) const {
  const int64_t saved = config_.precision == "bf16" ? 2 : 4;
  const auto widths = layer_widths(config_.gcn, graph_.num_features, classes());
  int64_t bytes = 0;
  if (!config_.tp_3d_on()) {
    // Each layer keeps its saved input (N x the narrower width; in bf16 under mixed precision)
    // and its output (N x out); a hidden layer's ReLU/dropout also its mask.
    for (size_t l = 0; l < widths.size(); ++l) {
      const auto [in, out] = widths[l];
      bytes += graph_.num_nodes * (saved * std::min(in, out) + 4 * out + (l + 1 < widths.size() ? 4 * out : 0));
    }
    return bytes;
  }
  // A grid rank once its forward is done: each layer's Â X block (its rows x its input
  // features; bf16 under mixed precision), each hidden layer's mask (its rows x its output
  // features) and the last layer's output, the logits' block. The rest (a layer's output, the
  // first layer's gathered input) is let go within the forward.
  const std::array<int64_t, 3> sizes = config_.tp_3d_grid();
  for (size_t l = 0; l < widths.size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    const parallel::graph3d::Roles r = parallel::graph3d::Roles::of(layer);
    const auto [begin, end] = parallel::graph3d::part_range(graph_.num_nodes, sizes[static_cast<size_t>(r.depth)],
                                                            at[static_cast<size_t>(r.depth)]);
    const auto w = parallel::graph3d::LocalWidths::of(widths[l].first, widths[l].second, layer, sizes);
    bytes += (end - begin) * (saved * w.in + 4 * w.out);  // Â X; the mask, or the logits
  }
  return bytes;
}

}  // namespace loom::train
