// `loom plan`: the best layouts for a model on a cluster, by the planner's memory and time
// model (src/loom/plan/layout_cost.hpp), as a table or JSON, or the cost of one layout;
// `--cluster local` measures this machine first.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "local_cluster.hpp"
#include "loom/error.hpp"
#include "loom/data/graph.hpp"
#include "loom/data/output_file.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/plan/gcn_cost.hpp"
#include "loom/plan/layout_cost.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/spec_files.hpp"
#include "loom/plan/tensor_parallel_3d_layout.hpp"
#include "loom/train/config.hpp"

namespace loom::apps {

namespace {

struct PlanArgs {
  std::string model = "gpt2-small", cluster = "dgx-a100", model_file, cluster_file, save_cluster;
  int64_t devices = 8, global_batch = 512, top = 10;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;  // 0: the preset's
  bool json = false;
  std::string recompute = "any";
  int zero = 1;
  std::string zero3_reshard = "micro-batch";
  double bucket_mb = 25.0;  // DDP's gradient buckets, as `loom train --bucket-mb`
  std::string sequence_parallel = "on";
  std::string tp_3d = "off";  // on: 3D grids searched too
  bool crossover = false;
  std::string precision;  // "": the cluster's own
  int64_t dp = 0, pp = 0, tp = 0, micro_batch = 0, chunks = 1;  // dp > 0: this one layout only
  int64_t cp = 1, cp_from_seq = plan::SearchSpace{}.cp_from_seq;
  int64_t moe_experts = 0, moe_top_k = 2, moe_every = 1, ep = 1;   // a mixture of experts (moe_cost.hpp)
  double moe_capacity_factor = 0.0;
  double moe_rank_imbalance = 1.0;
  double hidden_dropout = 0.0;
  std::string selective_recompute = "any";
  double link_latency_us = 0, link_gbs = 0;                      // > 0: override both link tiers
  double net_gbps = 0;  // > 0: price a run of `loom train --net-gbps` (plan::with_emulated_network)
  std::string graph = "data/cora";  // --model gcn
  int64_t gcn_layers = 2, gcn_hidden = 16;
};

// The link flags on `cluster`: --link-latency-us and --link-gbs replace both tiers' latency
// and bandwidth, then --net-gbps prices the emulated network over them.
void apply_link_flags(const PlanArgs& a, plan::ClusterSpec& cluster) {
  check(std::isfinite(a.link_latency_us) && a.link_latency_us >= 0 && std::isfinite(a.link_gbs) && a.link_gbs >= 0,
        "--link-latency-us and --link-gbs must be >= 0 (0: the cluster's), got ", a.link_latency_us, " and ", a.link_gbs);
  for (plan::LinkCost* link : {&cluster.intra_node, &cluster.inter_node}) {
    if (a.link_latency_us > 0) link->alpha_s = a.link_latency_us * 1e-6;
    if (a.link_gbs > 0) link->beta_s_per_byte = 1.0 / (a.link_gbs * 1e9);
  }
  if (a.net_gbps > 0) cluster = plan::with_emulated_network(cluster, a.net_gbps);
}

// `loom plan --model gcn`: the graph's tp_3d grids on --gpus ranks by Plexus's model
// (plan/gcn_cost.hpp), the cluster's intra-node link (or --link-gbs) on every axis.
int plan_gcn(const PlanArgs& a) {
  const data::Graph g = data::load_graph(a.graph, "");
  const plan::GcnShape shape{.N = g.num_nodes,
                             .nnz = kernels::gcn_normalized_adjacency(g.num_nodes, g.src, g.dst).nnz(),
                             .F = g.num_features, .H = a.gcn_hidden, .K = g.num_classes, .L = a.gcn_layers,
                             .labelled = g.count(data::NodeSplit::Train), .bf16 = a.precision == "bf16"};
  check(a.gcn_layers >= 1 && a.gcn_hidden >= 1 && a.devices >= 1, "--gcn-layers, --gcn-hidden and --gpus must be >= 1");
  plan::ClusterSpec cluster =
      !a.cluster_file.empty() ? plan::cluster_from_file(a.cluster_file) : plan::cluster_preset(a.cluster == "local" ? "local-default" : a.cluster);
  apply_link_flags(a, cluster);
  const double gbs = 1.0 / (cluster.intra_node.beta_s_per_byte * 1e9);
  const double gflops = cluster.peak_flops * cluster.gemm_peak_share / 1e9;
  std::printf("%s", plan::describe_gcn_plan(shape, plan::rank_gcn_grids(shape, a.devices, gbs, gflops), a.top).c_str());
  std::printf("(%s: %.1f GB/s a link, %.1f GFLOP/s a device; %s)\n", cluster.name.c_str(), gbs, gflops,
              shape.bf16 ? "bf16: activation sums and W's gathers at 2 bytes a value" : "fp32 on the wire");
  return 0;
}

// Full recompute, selective or both, as loom train's flags name them.
std::string recompute_name(const plan::Layout& l) {
  return std::string(l.recompute ? ", recompute" : "") + (l.selective_recompute ? ", selective" : "");
}

std::string layout_name(const plan::Layout& l) {
  if (l.tensor_parallel_3d())
    return "dp " + std::to_string(l.dp) + (l.pp > 1 ? " x pp " + std::to_string(l.pp) : "") +
           (l.cp > 1 ? " x cp " + std::to_string(l.cp) : "") + " x 3D " + std::to_string(l.row) + "x" +
           std::to_string(l.col) + "x" + std::to_string(l.depth) +
           (l.chunks > 1 ? " (v " + std::to_string(l.chunks) + ")" : "") +
           (l.ep > 1 ? " (ep " + std::to_string(l.ep) + ")" : "") + ", mb " + std::to_string(l.micro_batch) +
           recompute_name(l);
  return "dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x tp " + std::to_string(l.tp) +
         (l.chunks > 1 ? " (v " + std::to_string(l.chunks) + ")" : "") +
         (l.cp > 1 ? " x cp " + std::to_string(l.cp) : "") + (l.ep > 1 ? " (ep " + std::to_string(l.ep) + ")" : "") +
         ", mb " + std::to_string(l.micro_batch) + recompute_name(l);
}

// The slowest forward rate of a measured table (0 when empty).
double min_rate(const std::vector<plan::MeasuredRate>& rates) {
  double low = 0;
  for (const plan::MeasuredRate& r : rates) low = low == 0 ? r.forward : std::min(low, r.forward);
  return low;
}

// Why a runner-up loses to the best layout: its step's excess in percent, the term that costs
// it most and the one where it saves most (a near tie is a gain that almost pays for a loss).
std::string why_slower(const plan::LayoutCost& c, const plan::LayoutCost& best) {
  const plan::StepTime &a = c.time, &b = best.time;
  const std::pair<const char*, double> terms[] = {{"compute", a.compute_s - b.compute_s},
                                                  {"bubble", a.bubble_s - b.bubble_s},
                                                  {"tp comm", a.tp_comm_s - b.tp_comm_s},
                                                  {"pp comm", a.pp_comm_s - b.pp_comm_s},
                                                  {"dp comm", a.dp_comm_s - b.dp_comm_s},
                                                  {"optimizer", a.optimizer_s - b.optimizer_s},
                                                  {"cp ring", a.cp_comm_s - b.cp_comm_s},
                                                  {"core sharing", a.sharing_s - b.sharing_s},
                                                  {"ep all-to-all", a.ep_comm_s - b.ep_comm_s}};
  auto worst = terms[0], gain = terms[0];
  for (const auto& t : terms) {
    if (t.second > worst.second) worst = t;
    if (t.second < gain.second) gain = t;
  }
  char buf[160];
  const double pct = 100.0 * (c.step_s() / best.step_s() - 1.0);
  if (pct < 0.05) return "tie: the same predicted step";
  int n = std::snprintf(buf, sizeof buf, "+%.1f%%%s: %s +%.3g s", pct, pct < 3.0 ? " (near tie)" : "", worst.first,
                        worst.second);
  if (gain.second < 0) std::snprintf(buf + n, sizeof buf - n, ", %s %.3g s", gain.first, gain.second);
  return buf;
}

// Flags a layout that fills more than 90% of the usable memory: allocator fragmentation or
// buffers the model leaves out may push it over.
std::string memory_note(const plan::LayoutCost& c, const plan::ClusterSpec& cluster) {
  const double usable = static_cast<double>(cluster.memory_bytes - cluster.reserved_bytes);
  const double share = static_cast<double>(c.memory_bytes()) / usable;
  if (share <= 0.9) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, " [memory %.0f%% full]", 100.0 * share);
  return buf;
}

// The best 1D layout against the best 3D one of a search, and by how much the winner wins.
std::string one_d_against_3d(const std::vector<plan::LayoutCost>& ranked) {
  const plan::BestOfEach best = plan::best_of_each(ranked);
  if (best.one_d == nullptr || best.three_d == nullptr)
    return std::string("1D against 3D: no valid ") + (best.one_d == nullptr ? "1D" : "3D") + " layout";
  const bool three_d_wins = best.three_d->step_s() < best.one_d->step_s();
  const plan::LayoutCost &win = three_d_wins ? *best.three_d : *best.one_d, &lose = three_d_wins ? *best.one_d : *best.three_d;
  char buf[320];
  std::snprintf(buf, sizeof buf, "1D against 3D: %s wins, %s %.4g s against %s %.4g s (%.1f%% faster; comm %.3g s against %.3g s)",
                three_d_wins ? "3D" : "1D", layout_name(win.layout).c_str(), win.step_s(), layout_name(lose.layout).c_str(),
                lose.step_s(), 100.0 * (1.0 - win.step_s() / lose.step_s()), win.time.tp_comm_s + win.time.dp_comm_s,
                lose.time.tp_comm_s + lose.time.dp_comm_s);
  return buf;
}

// The crossover: the same model at 8, 16, ... devices up to --gpus, the best of each kind.
void print_crossover(const plan::ModelSpec& model, const plan::ClusterSpec& cluster, const PlanArgs& a,
                     const plan::SearchSpace& space) {
  std::printf("%s (%lld parameters) on %s, global batch %lld: 1D (dp x pp x tp) against 3D (dp x row x col x depth)\n",
              model.name.c_str(), static_cast<long long>(model.parameters()), cluster.name.c_str(),
              static_cast<long long>(a.global_batch));
  for (int64_t devices = std::min<int64_t>(8, a.devices); devices <= a.devices; devices *= 2) {
    const std::vector<plan::LayoutCost> ranked = plan::search(model, cluster, devices, a.global_batch, space);
    std::printf("%6lld devices: %s\n", static_cast<long long>(devices), one_d_against_3d(ranked).c_str());
  }
}

}  // namespace

Runner add_plan_command(CLI::App& sub) {
  auto a = std::make_shared<PlanArgs>();
  sub.add_option("--model", a->model,
                 "model preset (gpt2-small, gpt3-1.3b, gpt3-175b, gpt-1t, sc21-1.7b, sc21-145b, sc21-1t), a .toml file, or gcn (with --graph)");
  sub.add_option("--cluster", a->cluster,
                 "cluster preset (dgx-a100, local: this machine, measured; local-default) or a .toml file");
  sub.add_option("--model-file", a->model_file, "model description in TOML (configs/plan/sc21-145b.toml)");
  sub.add_option("--cluster-file", a->cluster_file, "cluster description in TOML (configs/plan/dgx-a100.toml)");
  sub.add_option("--save-cluster", a->save_cluster,
                 "write the cluster as planned for (with --cluster local: as measured) to this TOML file, to plan "
                 "from it again with --cluster FILE");
  sub.add_option("--gpus,--devices", a->devices, "devices to lay the model out on");
  sub.add_option("--global-batch", a->global_batch, "sequences per step");
  sub.add_option("--layers", a->layers, "override the preset's layers");
  sub.add_option("--hidden", a->hidden, "override the preset's hidden size");
  sub.add_option("--heads", a->heads, "override the preset's attention heads");
  sub.add_option("--seq", a->seq, "override the preset's sequence length");
  sub.add_option("--vocab", a->vocab, "override the preset's vocabulary");
  sub.add_option("--top", a->top, "layouts to print [10]");
  sub.add_option("--dp", a->dp, "price this layout only: data-parallel degree (with --pp, --tp)");
  sub.add_option("--pp", a->pp, "pipeline degree of the one layout [1]");
  sub.add_option("--tp", a->tp, "tensor-parallel degree of the one layout [1]");
  sub.add_option("--micro-batch-size", a->micro_batch, "sequences per micro-batch of the one layout [per-replica batch / pp]");
  sub.add_option("--link-latency-us", a->link_latency_us,
                 "latency of every link, e.g. the alpha `loom bench comm` measured (overrides the cluster's)");
  sub.add_option("--link-gbs", a->link_gbs, "bandwidth of every link in GB/s, e.g. 1/beta from `loom bench comm`");
  sub.add_option("--net-gbps", a->net_gbps,
                 "price a run of `loom train --net-gbps G`: collectives last their time on a G Gbit/s link where it "
                 "is slower, and the cores copy only for the real link's (--link-gbs) share of it [0: off]");
  sub.add_option("--cp", a->cp, "context-parallel degree of the one layout [1]");
  sub.add_option("--cp-from-seq", a->cp_from_seq,
                 "the search tries context parallelism for sequences of at least this many tokens [4096]");
  sub.add_option("--chunks", a->chunks, "virtual pipeline stages per rank of the one layout [1]");
  sub.add_option("--moe-experts", a->moe_experts, "experts of each mixture-of-experts block; 0 = a dense model [0]");
  sub.add_option("--moe-top-k", a->moe_top_k, "experts each token runs through [2]");
  sub.add_option("--moe-every", a->moe_every, "every N-th block is a mixture of experts [1]");
  sub.add_option("--moe-capacity-factor", a->moe_capacity_factor,
                 "each expert takes at most ceil(f K T / E) tokens of a sequence, as loom train's; under ep a rank's "
                 "expert rows are priced at that bound, dropless (0) at the balanced share [0]");
  sub.add_option("--moe-rank-imbalance", a->moe_rank_imbalance,
                 "where ranks share the experts out (ep, a 3D grid's plane), the busiest rank's routed rows over the "
                 "mean's, each exchange waiting for it: the experts' compute is priced at this multiple (loom train "
                 "measures it: `ranks max/mean` on the progress line, moe_rank_imbalance in metrics.jsonl) [1: balanced]");
  sub.add_option("--hidden-dropout", a->hidden_dropout,
                 "price loom train's --hidden-dropout P in Loom's precisions (fp32, bf16): backward holds a masked "
                 "copy of each branch's incoming gradient, the masks are not kept (the mixed presets' published "
                 "activation formula counts dropout's masks already) [0]");
  sub.add_option("--selective-recompute", a->selective_recompute,
                 "loom train's --selective-recompute (Megatron-LM's selective granularity: attention's probabilities "
                 "not kept, Loom's fp32 layer's or the mixed presets' 5as/h term, and QK^T and the softmax run again "
                 "in backward): on (also the bare flag), off or any; the search tries it where it changes anything "
                 "(not in Loom's bf16, which keeps none, nor under cp) and, with any, not beside full recompute [any]")
      ->expected(0, 1)
      ->check(CLI::IsMember({"on", "off", "any"}));
  sub.add_option("--ep", a->ep, "expert-parallel degree of the one layout (a split of dp; the search tries every one) [1]");
  sub.add_flag("--json", a->json, "print the ranking as JSON");
  sub.add_option("--precision", a->precision,
                 "price training in this precision: fp32 or bf16 (Loom's mixed precision: 18 bytes a parameter, bf16 "
                 "GEMMs, measured in bf16 with --cluster local) or mixed (Megatron's 16 bytes) [the cluster's]")
      ->check(CLI::IsMember({"fp32", "bf16", "mixed"}));
  sub.add_option("--recompute", a->recompute, "full activation recompute: on, off or any [any]")
      ->check(CLI::IsMember({"on", "off", "any"}));
  sub.add_option("--zero", a->zero, "ZeRO stage inside data parallelism (1: distributed optimizer) [1]")
      ->check(CLI::Range(0, 3));
  sub.add_option("--zero3-reshard", a->zero3_reshard,
                 "with --zero 3, when gathered units are freed: micro-batch or step, as loom train's [micro-batch]")
      ->check(CLI::IsMember({"micro-batch", "step"}));
  sub.add_option("--bucket-mb", a->bucket_mb, "DDP's gradient bucket size in MiB (--zero 0), as loom train's [25]")
      ->check(CLI::PositiveNumber);
  sub.add_option("--sequence-parallel", a->sequence_parallel, "sequence parallelism with tp > 1: on or off [on]")
      ->check(CLI::IsMember({"on", "off"}));
  sub.add_option("--tp-3d", a->tp_3d,
                 "also search 3D tensor-parallel grids dp x row x col x depth: on or off; with --dp, R,C,D prices "
                 "that one grid [off]");
  sub.add_flag("--crossover", a->crossover,
               "with --tp-3d on: the best 1D and the best 3D layout at 8, 16, ... up to --gpus devices, and which wins");
  sub.add_option("--graph", a->graph, "with --model gcn: the graph (data/cora, a text-format prefix or rmat:scale=S,...)");
  sub.add_option("--gcn-layers", a->gcn_layers, "with --model gcn: graph convolutions [2]");
  sub.add_option("--gcn-hidden", a->gcn_hidden, "with --model gcn: hidden width [16]");
  return [a, &sub]() {
    check(std::isfinite(a->net_gbps) && a->net_gbps >= 0, "--net-gbps must be >= 0 (0: off), got ", a->net_gbps);
    // Leaving a size out means the preset's or the search's; given, 0 or less is no size (a
    // zero --chunks divided by zero).
    for (const auto& [flag, value] :
         {std::pair{"--layers", a->layers}, {"--hidden", a->hidden}, {"--heads", a->heads}, {"--seq", a->seq},
          {"--vocab", a->vocab}, {"--top", a->top}, {"--dp", a->dp}, {"--pp", a->pp}, {"--tp", a->tp}, {"--cp", a->cp},
          {"--micro-batch-size", a->micro_batch}, {"--chunks", a->chunks}})
      check(sub.count(flag) == 0 || value >= 1, flag, " must be >= 1, got ", value);
    check(sub.count("--cp-from-seq") == 0 || a->cp_from_seq >= 1, "--cp-from-seq must be >= 1, got ", a->cp_from_seq);
    // Without --dp the planner searches every layout: the one layout's degrees would be ignored.
    for (const char* flag : {"--pp", "--tp", "--cp", "--micro-batch-size", "--chunks"})
      check(sub.count(flag) == 0 || sub.count("--dp") > 0, flag,
            " sets a degree of the one layout to price: give --dp too (without --dp every layout is searched)");
    if (a->model == "gcn") return plan_gcn(*a);
    auto is_toml = [](const std::string& s) { return s.size() > 5 && s.substr(s.size() - 5) == ".toml"; };
    if (a->model_file.empty() && is_toml(a->model)) a->model_file = a->model;
    if (a->cluster_file.empty() && is_toml(a->cluster)) a->cluster_file = a->cluster;
    plan::ModelSpec model = a->model_file.empty() ? plan::model_preset(a->model) : plan::model_from_file(a->model_file);
    for (auto [field, value] : {std::pair{&model.layers, a->layers}, {&model.hidden, a->hidden},
                                {&model.heads, a->heads}, {&model.seq, a->seq}, {&model.vocab, a->vocab}})
      if (value > 0 && value != *field) {
        *field = value;
        model.name = "custom";
      }
    model.moe = {.experts = a->moe_experts, .top_k = a->moe_top_k, .every = a->moe_every,
                 .capacity_factor = a->moe_capacity_factor, .rank_imbalance = a->moe_rank_imbalance};
    check(a->moe_experts >= 0 && a->moe_top_k >= 1 && a->moe_every >= 1 && a->ep >= 1 &&
              (a->moe_experts == 0 || a->moe_top_k <= a->moe_experts),
          "--moe-experts must be >= 0, --moe-top-k between 1 and the experts, --moe-every and --ep >= 1");
    check(std::isfinite(a->moe_capacity_factor) && a->moe_capacity_factor >= 0,
          "--moe-capacity-factor must be >= 0 (0: dropless), got ", a->moe_capacity_factor);
    check(std::isfinite(a->moe_rank_imbalance) && a->moe_rank_imbalance >= 1,
          "--moe-rank-imbalance must be >= 1 (the busiest rank's rows over the mean's; 1: balanced), got ",
          a->moe_rank_imbalance);
    check(std::isfinite(a->hidden_dropout) && a->hidden_dropout >= 0 && a->hidden_dropout < 1,
          "--hidden-dropout must be in [0, 1), got ", a->hidden_dropout);
    model.hidden_dropout = a->hidden_dropout;
    check(model.hidden % model.heads == 0, "hidden (", model.hidden, ") must be divisible by heads (", model.heads, ")");
    check(a->devices >= 1 && a->global_batch >= 1, "--gpus and --global-batch must be >= 1");
    plan::SearchSpace space;
    space.zero = a->zero;
    check(a->zero3_reshard == "micro-batch" || a->zero == 3, "--zero3-reshard step frees ZeRO-3's gathered units: give --zero 3");
    space.zero3_reshard_per_step = a->zero3_reshard == "step";
    check(std::isfinite(a->bucket_mb) && a->bucket_mb * (1 << 20) >= 1.0 && a->bucket_mb <= 1e9,
          "--bucket-mb must be between one byte's worth and 1e9 MiB, got ", a->bucket_mb);
    space.bucket_bytes = static_cast<int64_t>(a->bucket_mb * (1 << 20));
    space.sequence_parallel = a->sequence_parallel == "on";
    space.cp_from_seq = a->cp_from_seq;
    if (a->recompute != "any") space.recompute = {a->recompute == "on"};
    if (a->selective_recompute.empty()) a->selective_recompute = "on";  // the bare flag, as loom train's
    if (a->selective_recompute != "any") space.selective_recompute = {a->selective_recompute == "on"};
    space.tensor_parallel_3d = a->tp_3d == "on";
    const bool one_grid = a->tp_3d != "on" && a->tp_3d != "off";
    const std::array<int64_t, 3> grid = one_grid ? train::parse_tp_3d_grid(a->tp_3d) : std::array<int64_t, 3>{1, 1, 1};
    check(!one_grid || a->dp > 0, "--tp-3d R,C,D prices one layout: give --dp too (or --tp-3d on to search grids)");
    std::vector<plan::Layout> layouts;  // the one layout asked for, or the shapes the search will price
    if (a->dp > 0) {
      plan::Layout l;
      l.dp = a->dp;
      l.row = grid[0];
      l.col = grid[1];
      l.depth = grid[2];
      l.pp = std::max<int64_t>(1, a->pp);
      l.tp = std::max<int64_t>(1, a->tp);
      l.chunks = a->chunks;
      l.cp = std::max<int64_t>(1, a->cp);
      const int64_t per_replica = a->global_batch / l.dp;
      l.micro_batch = a->micro_batch > 0 ? a->micro_batch : std::max<int64_t>(1, per_replica / (l.pp * l.depth));
      l.zero = a->zero;
      l.zero3_reshard_per_step = space.zero3_reshard_per_step;
      l.bucket_bytes = space.bucket_bytes;
      l.recompute = a->recompute == "on";
      l.selective_recompute = a->selective_recompute == "on";
      l.sequence_parallel = space.sequence_parallel && l.tp > 1;
      l.ep = a->ep;
      const int64_t g = l.row * l.col * l.depth;
      check(!l.tensor_parallel_3d() || l.tp == 1, "--tp-3d R,C,D and --tp (", l.tp, ") are two tensor-parallel layouts: give one");
      check(l.dp * l.pp * l.tp * l.cp * g == a->devices, "dp (", l.dp, ") x pp (", l.pp, ") x tp (", l.tp, ")",
            l.cp > 1 ? " x cp (" + std::to_string(l.cp) + ")" : std::string(),
            g > 1 ? " x tp_3d (" + a->tp_3d + ")" : std::string(), " = ", l.dp * l.pp * l.tp * l.cp * g,
            " != --gpus ", a->devices);
      layouts.push_back(l);
    } else if (a->cluster == "local") {
      for (int64_t tp = 1; tp <= a->devices; ++tp)
        if (a->devices % tp == 0 && model.heads % tp == 0)
          for (int64_t mb : space.micro_batches) layouts.push_back(plan::Layout{1, 1, tp, 1, mb});
    }
    plan::ClusterSpec cluster = !a->cluster_file.empty() ? plan::cluster_from_file(a->cluster_file)
                                : a->cluster == "local"
                                    ? measure_local_cluster(model, layouts, a->devices,
                                                            a->precision == "bf16" ? plan::Precision::Bf16 : plan::Precision::Fp32)
                                    : plan::cluster_preset(a->cluster);
    // A preset or file's peak is its training precision's; the precision sets the memory prices.
    if (!a->precision.empty()) cluster.precision = plan::parse_plan_precision(a->precision);
    apply_link_flags(*a, cluster);
    if (!a->save_cluster.empty()) data::write_file_atomically(a->save_cluster, plan::cluster_to_toml(cluster));
    if (a->crossover) {
      check(space.tensor_parallel_3d && a->dp == 0, "--crossover compares searches: give --tp-3d on and no --dp");
      print_crossover(model, cluster, *a, space);
      return 0;
    }
    std::vector<plan::LayoutCost> ranked;
    if (a->dp > 0)
      ranked.push_back(plan::predict(model, cluster, layouts.front(), a->global_batch));
    else
      ranked = plan::search(model, cluster, a->devices, a->global_batch, space);
    const auto first_invalid =
        std::find_if(ranked.begin(), ranked.end(), [](const plan::LayoutCost& c) { return !c.valid; });
    const int64_t valid = first_invalid - ranked.begin();
    if (a->json) {
      nlohmann::json out = nlohmann::json::array();
      // The step on undisturbed cores (ranks still take turns): what a rank's CPU time shows
      // on a machine that other jobs share.
      plan::ClusterSpec undisturbed = cluster;
      undisturbed.alone_core_speed = undisturbed.shared_core_speed = 1.0;
      for (const plan::LayoutCost& c : ranked) {
        const plan::Layout& l = c.layout;
        plan::StepTime dedicated = c.time;
        dedicated.sharing_s = 0.0;
        const double undisturbed_s =
            dedicated.total() + plan::core_sharing_seconds(dedicated, l.dp * l.pp * l.tp * l.cp * l.row * l.col * l.depth, undisturbed);
        out.push_back({{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"cp", l.cp}, {"virtual_stages", l.pp * l.chunks},
                       {"micro_batch_size", l.micro_batch}, {"zero", l.dp > 1 ? l.zero : 0},
                       {"zero3_reshard", l.zero3_reshard_per_step ? "step" : "micro-batch"}, {"recompute", l.recompute}, {"selective_recompute", l.selective_recompute},
                       {"sequence_parallel", l.sequence_parallel}, {"tp_3d", {l.row, l.col, l.depth}}, {"valid", c.valid}, {"why_not", c.why_not},
                       {"memory_bytes_per_device", c.memory_bytes()},
                       {"state_bytes", c.state_bytes}, {"activation_bytes", c.activation_bytes},
                       {"step_s", c.valid ? c.step_s() : 0.0}, {"undisturbed_step_s", c.valid ? undisturbed_s : 0.0},
                       {"tflops_per_device", c.flops_per_device / 1e12}, {"micro_batches", c.micro_batches},
                       {"ep", l.ep}, {"expert_state_bytes_per_device", c.expert_state_bytes},
                       {"all_to_all_bytes_per_step", plan::all_to_all_bytes_per_step(model, l, c.micro_batches, plan::wire_bytes(cluster.precision))},
                       {"time_s", {{"compute", c.time.compute_s}, {"tp_comm", c.time.tp_comm_s},
                                   {"bubble", c.time.bubble_s}, {"pp_comm", c.time.pp_comm_s},
                                   {"dp_comm", c.time.dp_comm_s}, {"optimizer", c.time.optimizer_s},
                                   {"sharing", c.time.sharing_s}, {"cp_ring_exposed", c.time.cp_comm_s},
                                   {"cp_ring_link", c.time.cp_link_s}, {"ep_comm", c.time.ep_comm_s},
                                   {"overlapped_comm", c.time.overlapped_comm_s}}}});
      }
      std::printf("%s\n", out.dump(1).c_str());
      return 0;
    }
    std::printf("%s (%lld parameters) on %lld x %s, global batch %lld, precision %s\n", model.name.c_str(),
                static_cast<long long>(plan::total_parameters(model)), static_cast<long long>(a->devices), cluster.name.c_str(),
                static_cast<long long>(a->global_batch), plan::plan_precision_name(cluster.precision));
    if (model.moe.experts > 0) {
      char capacity[48] = ", dropless";
      if (model.moe.capacity_factor > 0)
        std::snprintf(capacity, sizeof capacity, ", capacity factor %g", model.moe.capacity_factor);
      std::printf("mixture of experts: %lld experts, top-%lld, every %lld block(s)%s: %lld parameters in all, %lld active per token\n",
                  static_cast<long long>(model.moe.experts), static_cast<long long>(model.moe.top_k),
                  static_cast<long long>(model.moe.every), capacity, static_cast<long long>(plan::total_parameters(model)),
                  static_cast<long long>(plan::active_parameters(model)));
      if (model.moe.rank_imbalance > 1)
        std::printf("experts shared out over ranks (ep, a grid's plane): priced at the busiest rank's rows, %.2fx the mean's\n",
                    model.moe.rank_imbalance);
    }
    if (cluster.name == "local")
      std::printf("local: %lld cores (a process per rank, 1 thread each), %.1f GiB a rank, GEMM %.1f-%.1f GFLOP/s by "
                  "shape, attention %.1f GFLOP/s, GELU %.1f + %.1f ns a value, copy %.1f GB/s, a core's speed alone %.2f, all busy %.2f\n",
                  static_cast<long long>(cluster.cores_per_node), static_cast<double>(cluster.memory_bytes) / (1 << 30),
                  min_rate(cluster.gemm_rates) / 1e9, cluster.peak_flops / 1e9, min_rate(cluster.attention_rates) / 1e9,
                  cluster.gelu_forward_s * 1e9, cluster.gelu_backward_s * 1e9, cluster.memory_bandwidth / 1e9,
                  cluster.alone_core_speed, cluster.shared_core_speed);
    check(valid > 0, "no layout fits: ", ranked.empty() ? "no layout divides the devices" : ranked.front().why_not);
    // Memory in GiB, or MiB for models that do not need a GiB.
    const bool mib = ranked.front().memory_bytes() < (int64_t{1} << 30);
    const double unit = mib ? double(1 << 20) : double(1 << 30);
    const bool giga = cluster.peak_flops < 1e12;  // devices below a TFLOP/s: GFLOP/s
    // A CPU's ranks share cores: one more column, the time lost to that.
    const bool shared = cluster.cores_per_node > 0;
    // Context parallelism among the layouts shown: one more column, the K/V ring's exposed
    // seconds and the share of its time on the link that the block attention hides.
    const bool ring = std::any_of(ranked.begin(), ranked.begin() + std::min(valid, a->top),
                                  [](const plan::LayoutCost& c) { return c.layout.cp > 1; });
    int name_width = 44;  // the longest name shown, at least this
    for (int64_t i = 0; i < std::min(valid, a->top); ++i)
      name_width = std::max(name_width, static_cast<int>(layout_name(ranked[static_cast<size_t>(i)].layout).size()));
    std::printf("%-*s %9s %9s %9s %9s %9s %9s %9s%s%s %10s  %s\n", name_width, "layout", mib ? "mem MiB" : "mem GiB", "step s",
                "compute", "bubble", "tp comm", "pp comm", "dp comm", shared ? "   sharing" : "",
                ring ? "    cp ring (hidden)" : "", giga ? "GFLOP/s" : "TFLOP/s", "why the runners-up lose");
    for (int64_t i = 0; i < std::min(valid, a->top); ++i) {
      const plan::LayoutCost& c = ranked[static_cast<size_t>(i)];
      char sharing[16] = "";
      if (shared) std::snprintf(sharing, sizeof sharing, " %9.3f", c.time.sharing_s);
      char cp_ring[32] = "";
      if (ring && c.layout.cp > 1)
        std::snprintf(cp_ring, sizeof cp_ring, " %9.3f (%3.0f%% hidden)", c.time.cp_comm_s,
                      c.time.cp_link_s > 0 ? 100.0 * (1.0 - c.time.cp_comm_s / c.time.cp_link_s) : 100.0);
      else if (ring)
        std::snprintf(cp_ring, sizeof cp_ring, " %20s", "-");
      std::printf("%-*s %9.1f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f%s%s %10.1f  %s\n", name_width, layout_name(c.layout).c_str(),
                  static_cast<double>(c.memory_bytes()) / unit, c.step_s(), c.time.compute_s, c.time.bubble_s,
                  c.time.tp_comm_s, c.time.pp_comm_s, c.time.dp_comm_s, sharing, cp_ring,
                  c.flops_per_device / (giga ? 1e9 : 1e12),
                  ((i == 0 ? std::string("best") : why_slower(c, ranked[0])) + memory_note(c, cluster)).c_str());
    }
    if (space.tensor_parallel_3d) std::printf("%s\n", one_d_against_3d(ranked).c_str());
    // Each reason with its count and its first layout's own words, which say what did not divide.
    std::map<std::string, std::pair<int, std::string>> reasons;
    for (auto it = first_invalid; it != ranked.end(); ++it) {
      const size_t colon = it->why_not.find(':');
      auto& [count, example] = reasons[it->why_not.substr(0, colon)];
      if (count++ == 0) example = layout_name(it->layout) + (colon == std::string::npos ? "" : it->why_not.substr(colon));
    }
    for (const auto& [why, seen] : reasons)
      std::printf("rejected %d layout(s) for %s, e.g. %s\n", seen.first, why.c_str(), seen.second.c_str());
    return 0;
  };
}

}  // namespace loom::apps
