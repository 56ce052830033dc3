#include "loom/train/parallelize.hpp"

#include <chrono>

#include "loom/comm/comm_priority.hpp"
#include "loom/comm/core_placement.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/graph_3d/graph_layers_3d.hpp"
#include "loom/parallel/expert_parallel/expert_data_parallel.hpp"
#include "loom/parallel/expert_parallel/grid_expert_dispatcher.hpp"
#include "loom/parallel/pipeline/model_chunks.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/tensor/malloc_reuse.hpp"
#include "loom/train/rank_agreement.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

namespace {

namespace pl = parallel::pipeline;

// The model, or this rank's pipeline chunks under one module, and (pipeline) its part of the
// schedule and the executor that runs it.
void build_model(const TrainConfig& config, ModelSpec& spec, const nn::LayerBuilder& layers, comm::ProcessGroup& pp,
                 Parallelized& out) {
  std::vector<std::unique_ptr<nn::Module>> chunks = spec.build(layers, pp.rank());
  if (config.pp == 1) {
    out.chunks = {chunks.front().get()};
    out.model = std::move(chunks.front());
    return;
  }
  auto holder = std::make_unique<pl::ModelChunks>(std::move(chunks));
  out.chunks = holder->chunks();
  out.model = std::move(holder);
  // Every rank checks the whole schedule before the first step (it is data, so a bad one is
  // named here instead of hanging later), then keeps its own part.
  const pl::Schedule schedule =
      pl::checked_schedule(config.schedule, config.schedule_file, static_cast<int>(config.pp),
                           static_cast<int>(config.micro_batches), static_cast<int>(config.chunks));
  out.pipeline_actions = schedule.ranks.at(static_cast<size_t>(pp.rank()));
  out.pipeline = std::make_unique<pl::PipelineExecutor>(out.chunks, pp, config.micro_batches, spec.stage_activation_shape());
}

// The parameters whose gradient buffers ZeRO-2/3 renews every backward (a sum over tp or cp
// then runs each backward): all but, under expert parallelism, the experts, which
// ExpertDataParallel keeps out of ZeRO, whole and accumulating over micro-batches. None
// below stage 2 (null).
parallel::tp::ReplicatedGradientSum::Predicate renewed_each_backward(const TrainConfig& config) {
  if (config.zero < 2) return nullptr;
  if (config.ep == 1) return [](const nn::Parameter&) { return true; };
  return [](const nn::Parameter& q) { return !parallel::ep::is_expert_parameter(q); };
}

// 3D tensor parallelism after the model is built: the layers kept serial named for the log;
// the parameters whole on every grid rank numbered as replicas (grid rank 0 counts them in
// the norm); the gradients not split over depth averaged over it (each depth rank's are the
// mean over its own batch rows), from hooks installed before data parallelism's: blocking,
// or, when overlapped (no data parallelism reads them at grad-ready), started there and
// waited for by the finalizer.
// The ranks sharing a mixture's experts out (`experts`: ep, or a grid's plane) again, for the
// busiest rank's share of the routed rows (moe_metrics.hpp): a group of their own, so those
// reductions count in no layout group's traffic. Collective over `experts`; null without
// experts, or where one rank holds them all (nothing to reduce).
comm::ProcessGroup* expert_statistics(const TrainConfig& config, comm::ProcessGroup& experts, Parallelized& p) {
  if (!config.model.moe.enabled() || experts.size() == 1) return nullptr;
  p.expert_statistics.push_back(experts.split(0, experts.rank(), experts.name() + " statistics"));
  return p.expert_statistics.back().get();
}

void prepare_3d(const parallel::tp3d::Layers3D& layers, bool overlapped_mean,
                const parallel::tp::ReplicatedGradientSum::Predicate& every_backward, Parallelized& p) {
  for (const parallel::tp3d::Layers3D::Fallback& f : layers.fallbacks())
    p.notes.push_back("tp_3d: " + f.layer->name() + " stays serial (replicated): " + f.why);
  if (const auto* graph = dynamic_cast<const parallel::graph3d::GraphLayers3D*>(&layers))
    p.notes.push_back(graph->describe());
  const int grid_rank = layers.grid().grid_rank();
  for (nn::Parameter* param : p.model->parameters())
    if (!param->shard_spec().sharded()) {
      nn::ShardSpec spec = param->shard_spec();
      spec.replica = grid_rank;
      param->set_shard_spec(spec);
    }
  comm::ProcessGroup& depth = p.group("depth");
  if (depth.size() == 1) return;
  auto averaged = [&layers](const nn::Parameter& param) { return !layers.depth_sharded(param); };
  const parallel::tp3d::Grid3D* grid = &layers.grid();
  if (overlapped_mean) {
    p.replicated_sum = std::make_unique<parallel::tp::ReplicatedGradientSum>(
        *p.model, depth, /*every_backward=*/nullptr, comm::ReduceOp::Avg, averaged, /*deferred=*/true);
    // What finish() waits for is 3D communication compute did not hide.
    p.replicated_sum->count_waits_into([grid](double seconds) { grid->add_waited_seconds(seconds); });
    return;
  }
  // Its blocking all-reduces are 3D communication the compute thread waits for: a hook
  // before and one after the mean's own time them into the grid's exposed seconds.
  auto started = std::make_shared<std::chrono::steady_clock::time_point>();
  for (nn::Parameter* param : p.model->parameters())
    if (averaged(*param)) param->add_grad_ready_hook([started](nn::Parameter&) { *started = std::chrono::steady_clock::now(); });
  p.replicated_sum = std::make_unique<parallel::tp::ReplicatedGradientSum>(*p.model, depth, every_backward,
                                                                          comm::ReduceOp::Avg, averaged);
  for (nn::Parameter* param : p.model->parameters())
    if (averaged(*param))
      param->add_grad_ready_hook([started, grid](nn::Parameter&) {
        grid->add_waited_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - *started).count());
      });
}

// This rank's copy of a pipeline's tied token table (the first and last stage each hold one),
// summed over the embedding group; null where the rank holds none or the group has one member.
nn::Parameter* tied_table_copy(ModelSpec& spec, Parallelized& p) {
  if (p.group("embedding").size() == 1) return nullptr;
  nn::Module &first = *p.chunks.front(), &last = *p.chunks.back();
  return spec.tied_parameter(first) != nullptr ? spec.tied_parameter(first) : spec.tied_parameter(last);
}

std::unique_ptr<parallel::GradientSync> build_data_parallel(const TrainConfig& config, ModelSpec& spec, Parallelized& p) {
  const comm::AllReduceAlgorithm algorithm = comm::parse_algorithm(config.allreduce);
  const bool reduce_in_bf16 = config.grad_reduce_dtype == "bf16";
  const parallel::DdpOptions ddp{.bucket_bytes = static_cast<int64_t>(config.bucket_mb * 1048576.0),
                                 .algorithm = algorithm, .reduce_in_bf16 = reduce_in_bf16};
  // Expert parallelism: the dense parameters below, the experts averaged over their own
  // replicas only (whole: ZeRO leaves them out).
  const auto dense = [](const nn::Parameter& q) { return !parallel::ep::is_expert_parameter(q); };
  const auto with_experts = [&](std::unique_ptr<parallel::GradientSync> sync) -> std::unique_ptr<parallel::GradientSync> {
    if (config.ep == 1) return sync;
    // Under interleaved chunks the experts' buckets wait for the pipeline's end (the dense
    // part's ZeRO-2/3 reduce in every backward regardless).
    const bool experts_after_backward = config.pp > 1 && config.chunks > 1 && config.zero >= 2;
    return std::make_unique<parallel::ep::ExpertDataParallel>(*p.model, std::move(sync), p.group("expert_dp"),
                                                              p.group("ep"), ddp, experts_after_backward);
  };
  if (config.zero == 0) {
    // Context parallelism: every cp rank holds a replica too (its gradient is its tokens'), so
    // DDP averages over dp x cp.
    comm::ProcessGroup& replicas = p.data_and_context ? *p.data_and_context : p.group("dp");
    if (replicas.size() == 1) return std::make_unique<parallel::LocalGradients>(*p.model);
    parallel::DdpOptions options = ddp;
    if (config.ep > 1) options.only = dense;
    return with_experts(std::make_unique<parallel::DistributedDataParallel>(*p.model, replicas, options));
  }
  parallel::ZeroOptions options;
  options.stage = static_cast<int>(config.zero);
  for (nn::Module* chunk : p.chunks) options.chunks.push_back({chunk, spec.layers_of(*chunk)});
  // Stages 2-3 keep a pipeline's tied table shards alike on both end stages (the finalizer sums them).
  if (config.zero >= 2) options.own_unit = tied_table_copy(spec, p);
  options.algorithm = algorithm;
  options.reduce_in_bf16 = reduce_in_bf16;
  options.gather_in_bf16 = config.precision == "bf16";
  options.reshard_each_micro_batch = config.zero3_reshard != "step";
  if (config.ep > 1) options.only = dense;
  if (p.tp3d_layers) options.before_reduce = [layers = p.tp3d_layers.get()] { layers->land_gradients(); };
  return with_experts(std::make_unique<parallel::ShardedDataParallel>(*p.model, p.group("shard"), &p.group("replicate"), options));
}

}  // namespace

std::unique_ptr<comm::DeviceMesh> parallel_mesh(const TrainConfig& config, comm::ProcessGroup& world) {
  // Every group the run waits on is watched with comm_timeout: the world's, and the groups
  // split from it (which inherit it, ZeRO-3's gather group too).
  world.set_timeout(config.comm_timeout);
  // dp x pp x cp x tp (tp fastest: tensor-parallel partners are neighbouring ranks), dp split for
  // sharding (shard groups are neighbouring dp ranks), and the tied table's group.
  auto mesh = std::make_unique<comm::DeviceMesh>(world, config.mesh_dims());
  mesh->split_dim("dp", "replicate", "shard", static_cast<int>(config.shard_size()));
  mesh->split_dim("dp", "expert_dp", "ep", static_cast<int>(config.ep));
  mesh->add_position_group("embedding", "pp", {0, static_cast<int>(config.pp) - 1});
  world.set_emulated_link(config.net_gbps, config.net_latency_us);
  for (const char* name : {"dp", "cp", "tp", "shard", "replicate", "ep", "expert_dp"})
    mesh->group(name).set_emulated_link(config.net_gbps, config.net_latency_us);
  for (const char* name : {"dp", "pp", "cp", "tp", "shard", "replicate", "ep", "expert_dp", "embedding"})
    mesh->group(name).set_timeout(config.comm_timeout);
  // The batch is shared out over dp (x depth under tp_3d); "tensor" is one replica's
  // model-parallel group (tp, or the 3D grid).
  mesh->add_group("batch", config.tp_3d_on() ? std::vector<std::string>{"dp", "depth"} : std::vector<std::string>{"dp"});
  mesh->add_group("tensor", config.tp_3d_on() ? std::vector<std::string>{"depth", "row", "col"} : std::vector<std::string>{"tp"});
  // A mixture of experts shares its experts out over a grid's plane (row x col).
  if (config.tp_3d_on()) mesh->add_group("plane", {"row", "col"});
  if (config.tp_3d_on())
    for (const char* name : {"row", "col", "depth", "batch", "tensor", "plane"}) {
      mesh->group(name).set_emulated_link(config.net_gbps, config.net_latency_us);
      mesh->group(name).set_timeout(config.comm_timeout);
    }
  // Mixed precision: the model-parallel groups move activations and their gradients in bf16
  // (comm/activation_wire.hpp), the 3D grid's depth axis its weight gathers too; gradients,
  // the loss's statistics and the data-parallel groups keep their own precision. Set either
  // way: an axis as large as the world is the caller's world group, which outlives this run.
  const DType wire = config.precision == "bf16" ? DType::BF16 : DType::F32;
  for (const char* name : {"tp", "pp", "cp", "ep"}) mesh->group(name).set_activation_dtype(wire);
  if (config.tp_3d_on())
    for (const char* name : {"row", "col", "depth", "plane"}) mesh->group(name).set_activation_dtype(wire);
  return mesh;
}

Parallelized parallelize(const TrainConfig& config, ModelSpec& spec, comm::ProcessGroup& world) {
  // Before any other collective: ranks started with different configurations or binaries
  // would call collectives of different sizes.
  check_ranks_agree(config, world);
  // Before any model tensor: a model that cannot fit is refused, not allocated until it fails.
  check_fits_in_memory(spec.memory_need(), world.ranks_on_node(), "the model", {"loom train --dry-run", "", kTrainingMemoryRemedy});
  Parallelized p;
  // 0. Placement: oversubscribed one-thread ranks pinned to cores, a stage's ranks apart.
  if (config.pin_ranks == "auto" && config.threads == 1) {
    p.placement = comm::pin_ranks_when_oversubscribed(config.mesh_layout(), world);
    if (!p.placement.empty())
      p.placement += ", each rank on one core and a pipeline stage's ranks on different ones (pin_ranks = \"off\" "
                     "leaves it to the OS)";
  }
  if (world.size() > 1) {  // how this process's communication runs (a single rank has none)
    for (std::string note : {comm::comm_priority_report(), malloc_reuse_report()})
      if (!note.empty()) p.notes.push_back(std::move(note));
  }
  // 1. The mesh: every group the later steps take is an axis or a named group of it.
  p.mesh = parallel_mesh(config, world);
  comm::ProcessGroup &tp = p.group("tp"), &pp = p.group("pp");
  p.tensor_comm_groups = config.tp_3d_on()
                             ? std::vector<comm::ProcessGroup*>{&p.group("row"), &p.group("col"), &p.group("depth"),
                                                                &p.group("plane")}
                             : std::vector<comm::ProcessGroup*>{&tp};
  // Each part of a sequence routes its own tokens: its loads are added too (each part's
  // load-balancing loss is the whole sequence's, counted once a part like its forwards).
  p.moe_stat_groups = {&p.group("dp"), &pp};
  if (config.cp > 1) p.moe_stat_groups.push_back(&p.group("cp"));
  if (config.sequence_parallel) p.moe_stat_groups.push_back(&tp);
  if (config.tp_3d_on()) p.moe_stat_groups.push_back(&p.group("depth"));  // each depth rank routes its own rows

  // 2. Tensor parallelism by layer substitution: the model asks this builder for its layers,
  // and the loss works on the tp-split outputs.
  if (config.tp > 1)
    p.tp_layers =
        std::make_unique<parallel::tp::TensorParallelLayers>(tp, config.sequence_parallel, config.tp_overlap == "on");
  if (config.tp > 1 && config.model.moe.enabled() && !config.sequence_parallel)
    p.notes.push_back("mixture of experts under tp " + std::to_string(config.tp) +
                      " without sequence parallelism: every tp rank runs every token through the experts (the same "
                      "work tp times); --sequence-parallel splits the tokens over tp");
  // 3D tensor parallelism, the same way: the builder swaps each linear layer for a 3D one.
  comm::ProcessGroup* plane_statistics = nullptr;  // the grid's plane again (expert_statistics)
  if (config.tp_3d_on()) {
    p.grid = std::make_unique<parallel::tp3d::Grid3D>(p.group("row"), p.group("col"), p.group("depth"));
    // A GCN's graph convolutions become Plexus's (graph_3d), its linear layers AxoNN's.
    if (config.family == "gcn")
      p.tp3d_layers = std::make_unique<parallel::graph3d::GraphLayers3D>(
          *p.grid, config.gcn.layers, config.graph_permute, static_cast<uint64_t>(config.seed),
          config.graph_aggregation_chunks);
    else {
      plane_statistics = expert_statistics(config, p.group("plane"), p);
      p.tp3d_layers = std::make_unique<parallel::tp3d::Layers3D>(*p.grid, config.tp_3d_overlap == "on", &p.group("plane"),
                                                                 plane_statistics);
    }
  }
  const nn::LayerBuilder* layers = p.tp_layers     ? static_cast<const nn::LayerBuilder*>(p.tp_layers.get())
                                   : p.tp3d_layers ? static_cast<const nn::LayerBuilder*>(p.tp3d_layers.get())
                                                   : &nn::serial_layers();
  spec.build_loss(tp);

  // 2b. Context parallelism by layer substitution: attention becomes a ring over the cp group
  // and the embedding takes the true positions of this rank's chunks, which the spec gives it.
  comm::ProcessGroup& cp = p.group("cp");
  if (config.cp > 1) {
    p.cp_layers =
        std::make_unique<parallel::cp::ContextParallelLayers>(*layers, cp, parallel::cp::parse_split(config.cp_split));
    layers = p.cp_layers.get();
    p.data_and_context = p.mesh->make_group({"dp", "cp"});
    p.data_and_context->set_timeout(config.comm_timeout);
    p.data_and_context->set_emulated_link(config.net_gbps, config.net_latency_us);
  }
  spec.use_context_parallel(cp, config.cp_split);

  // 2c. Expert parallelism, likewise: every mixture of experts holds this rank's E/ep experts
  // and exchanges tokens all-to-all over ep (a split of dp); on a 3D grid E / (plane x ep),
  // the plane's block of them split over ep. The ranks of the model-parallel group holding
  // the same experts (tp ranks; depth ranks on a grid) number their copies.
  if (config.ep > 1) {
    comm::ProcessGroup& ep = p.group("ep");
    std::unique_ptr<nn::ExpertDispatcher> dispatcher;
    if (config.tp_3d_on())
      dispatcher = std::make_unique<parallel::ep::GridExpertDispatcher>(
          p.group("plane"), ep, plane_statistics, expert_statistics(config, ep, p));
    else
      dispatcher = std::make_unique<parallel::ep::AllToAllDispatcher>(ep, expert_statistics(config, ep, p));
    const int64_t replica = config.tp_3d_on() ? p.group("depth").rank() : tp.rank();
    p.ep_layers = std::make_unique<parallel::ep::ExpertParallelLayers>(*layers, std::move(dispatcher), replica);
    layers = p.ep_layers.get();
  }

  // 3. The model, or this rank's pipeline chunks and its part of the schedule.
  build_model(config, spec, *layers, pp, p);

  // 4. Sequence parallelism's partial gradients of replicated parameters, summed over tp from
  // grad-ready hooks installed before data parallelism's, so the sum comes first.
  // Without data parallelism nothing reads them before the finalizer: under tp_overlap the
  // sums then run under the rest of backward.
  // A mixture of experts' parameters are replicated over tp too (each tp rank routes its own
  // tokens), experts included, though expert parallelism shards them over ep.
  if (config.tp > 1 && config.sequence_parallel) {
    const bool local_gradients = config.zero == 0 && config.dp * config.cp == 1;
    p.replicated_sum = std::make_unique<parallel::tp::ReplicatedGradientSum>(
        *p.model, tp, renewed_each_backward(config), comm::ReduceOp::Sum,
        [](const nn::Parameter& q) { return !q.shard_spec().sharded() || parallel::ep::is_expert_parameter(q); },
        local_gradients && config.tp_overlap == "on");
  }
  // Likewise a replicated gradient's mean over depth under --tp-3d runs under the rest of
  // backward (GCN's layers keep the blocking one), where nothing reads the gradients at
  // grad-ready: no data parallelism, nor DDP over the cp ranks (which read them before the mean
  // landed: a cp 2 x 1,1,2 run's qkv bias gradient 63% off), nor ZeRO's unit reductions.
  const bool overlapped_depth_mean = p.tp3d_layers && config.tp_3d_overlap == "on" && config.family != "gcn" &&
                                     config.dp * config.cp == 1 && config.zero == 0 && p.group("depth").size() > 1;
  if (p.tp3d_layers) prepare_3d(*p.tp3d_layers, overlapped_depth_mean, renewed_each_backward(config), p);

  // Context parallelism under ZeRO: every parameter is a replica over cp (tp-split ones and
  // experts too), averaged over cp first (ZeRO then averages its shards over dp); without
  // ZeRO, DDP averages over dp x cp at once, and under expert parallelism the experts (reduced
  // over expert_dp) are averaged over cp here.
  if (config.cp > 1 && (config.zero > 0 || config.ep > 1)) {
    const bool all = config.zero > 0;
    p.context_mean = std::make_unique<parallel::tp::ReplicatedGradientSum>(
        *p.model, cp, renewed_each_backward(config), comm::ReduceOp::Avg,
        [all](const nn::Parameter& q) { return all || parallel::ep::is_expert_parameter(q); });
  }

  // 5. Data parallelism: one face for DDP, ZeRO 1-3 and HSDP.
  p.gradient_sync = build_data_parallel(config, spec, p);

  // 6. What happens between the last backward and the optimizer step.
  parallel::FinalizeParts parts;
  parts.sync = p.gradient_sync.get();
  parts.replicated_sum = p.replicated_sum.get();
  parts.context_mean = p.context_mean.get();
  nn::Module &first = *p.chunks.front(), &last = *p.chunks.back();
  if (nn::Parameter* tied = tied_table_copy(spec, p)) {
    parts.embedding_group = &p.group("embedding");
    parts.token_table = tied;
  }
  // The copy on a rank whose first chunk does not own it (another stage's does).
  if (config.pp > 1 && spec.tied_parameter(last) != nullptr && !spec.owns_tied_parameter(first))
    p.tied_copy = spec.tied_parameter(last);
  parts.reduce_during_backward = parallel::reduce_during_last_backward(*p.gradient_sync, config.pp > 1, config.chunks);
  parts.model_parallel_groups = {&p.group("tensor"), &pp, &p.group("ep")};
  const bool all_replicas = tp.rank() == 0;
  const nn::Parameter* table_copy = p.tied_copy;
  if (p.tp3d_layers) {  // each piece counted by its replica 0 within the grid (prepare_3d)
    parts.counted = [table_copy](const nn::Parameter& param) {
      return &param != table_copy && param.shard_spec().replica == 0;
    };
  } else {
    // Experts differ across ep (each rank's block counts), dense parameters are replicas there
    // (ExpertDataParallel counts them on ep rank 0 only).
    parts.counted = [all_replicas, table_copy](const nn::Parameter& param) {
      const bool expert = parallel::ep::is_expert_parameter(param);
      return &param != table_copy && (all_replicas || (param.shard_spec().sharded() && !expert));
    };
  }
  p.finalizer = std::make_unique<parallel::GradientFinalizer>(std::move(parts));
  return p;
}

}  // namespace loom::train
