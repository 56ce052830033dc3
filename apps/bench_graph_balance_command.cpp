// `loom bench graph-balance`: the load balance of the Plexus 3D GCN on every grid of the
// given rank counts, in one process and without training: for each grid R x C x D and each
// layer, the non-zeros of the busiest rank's block of Â over the mean (graph_3d's
// block_imbalance), with the double random permutation and in file order. Training runs print
// the same figure for their own grid; this gives every grid's, permuted or not, at the cost
// of one graph load (bench/gcn_plexus_rmat.sh), as JSON lines.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.hpp"
#include "loom/data/graph.hpp"
#include "loom/error.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"

namespace loom::apps {

namespace {

struct GraphBalanceArgs {
  std::string data = "data/cora";
  std::vector<int64_t> ranks{2, 4, 8};
  int64_t layers = 2;
  int64_t seed = 1337;  // the training seed, which draws the permutation (train's default)
};

int run_graph_balance(const GraphBalanceArgs& a) {
  using parallel::tp3d::Axis;
  check(a.layers >= 1, "--layers must be >= 1, got ", a.layers);
  // Training's bound: each layer's imbalance is computed on every grid (10^9 layers ran on past 1.7 GB).
  check(a.layers <= 64, "--layers must be <= 64 (as gcn_layers), got ", a.layers);
  for (const int64_t p : a.ranks) check(p >= 1, "--ranks must be >= 1, got ", p);
  const data::Graph g = data::load_graph(a.data, "");
  // A grid's axis can be as long as the ranks: past the nodes, its blocks are empty.
  for (const int64_t p : a.ranks)
    check(p <= g.num_nodes, "--ranks ", p, " is more ranks than ", a.data, " has nodes (", g.num_nodes, ")");
  const kernels::CsrMatrix A = kernels::gcn_normalized_adjacency(g.num_nodes, g.src, g.dst);
  const auto permuted = parallel::graph3d::node_orders(A.rows, true, static_cast<uint64_t>(a.seed));
  const auto file_order = parallel::graph3d::node_orders(A.rows, false, static_cast<uint64_t>(a.seed));
  for (const int64_t p : a.ranks)
    for (int64_t R = 1; R <= p; ++R)
      for (int64_t C = 1; R * C <= p; ++C) {
        if (p % (R * C) != 0) continue;
        const int64_t D = p / (R * C);
        auto size = [&](Axis axis) { return axis == Axis::Row ? R : axis == Axis::Col ? C : D; };
        std::vector<double> with, without;
        for (int64_t l = 0; l < a.layers; ++l) {
          const auto roles = parallel::graph3d::Roles::of(l);
          with.push_back(parallel::graph3d::block_imbalance(A, *permuted, l, size(roles.depth), size(roles.outer)));
          without.push_back(parallel::graph3d::block_imbalance(A, *file_order, l, size(roles.depth), size(roles.outer)));
        }
        const nlohmann::json out = {{"ranks", p}, {"grid", std::to_string(R) + "," + std::to_string(C) + "," + std::to_string(D)},
                                    {"permuted", with}, {"file_order", without}};
        std::printf("%s\n", out.dump().c_str());
      }
  return 0;
}

}  // namespace

CLI::App* add_graph_balance_bench(CLI::App& bench, Runner& runner) {
  auto args = std::make_shared<GraphBalanceArgs>();
  CLI::App* sub = bench.add_subcommand(
      "graph-balance",
      "non-zeros per rank (max/mean) of every 3D grid's blocks of Â, permuted and in file order, as JSON lines "
      "(example: loom bench graph-balance --data rmat:scale=16 --ranks 8 --layers 3)");
  sub->allow_extras();
  sub->add_option("--data", args->data, "a graph: data/cora, a text-format prefix, or rmat:scale=S,...");
  sub->add_option("--ranks", args->ranks, "rank counts: every grid R x C x D of each")->delimiter(',');
  sub->add_option("--layers", args->layers, "graph convolutions (the axes' roles rotate by layer)");
  sub->add_option("--seed", args->seed, "the training seed the permutation is drawn from");
  runner = [args, sub]() {
    reject_unknown_flags(*sub);
    return run_graph_balance(*args);
  };
  return sub;
}

}  // namespace loom::apps
