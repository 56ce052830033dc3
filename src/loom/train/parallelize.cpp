#include "loom/train/parallelize.hpp"

#include "loom/comm/core_placement.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/expert_parallel/expert_data_parallel.hpp"
#include "loom/parallel/pipeline/model_chunks.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/zero.hpp"
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

std::unique_ptr<parallel::GradientSync> build_data_parallel(const TrainConfig& config, ModelSpec& spec, Parallelized& p) {
  const comm::AllReduceAlgorithm algorithm = comm::parse_algorithm(config.allreduce);
  if (config.ep > 1)  // experts averaged over their own replicas only
    return std::make_unique<parallel::ep::ExpertDataParallel>(
        *p.model, p.group("dp"), p.group("expert_dp"), config.ep,
        parallel::DdpOptions{static_cast<int64_t>(config.bucket_mb * 1048576.0), algorithm});
  if (config.zero == 0) {
    if (p.group("dp").size() == 1) return std::make_unique<parallel::LocalGradients>(*p.model);
    return std::make_unique<parallel::DistributedDataParallel>(
        *p.model, p.group("dp"), parallel::DdpOptions{static_cast<int64_t>(config.bucket_mb * 1048576.0), algorithm});
  }
  parallel::ZeroOptions options;
  options.stage = static_cast<int>(config.zero);
  for (nn::Module* chunk : p.chunks)
    for (nn::Module* layer : spec.layers_of(*chunk)) options.units.push_back(layer);
  options.algorithm = algorithm;
  return std::make_unique<parallel::ShardedDataParallel>(*p.model, p.group("shard"), &p.group("replicate"), options);
}

}  // namespace

std::unique_ptr<comm::DeviceMesh> parallel_mesh(const TrainConfig& config, comm::ProcessGroup& world) {
  // Every group the run waits on is watched with comm_timeout: the world's, and the groups
  // split from it (which inherit it, ZeRO-3's gather group too).
  world.set_timeout(config.comm_timeout);
  // dp x pp x tp (tp fastest: tensor-parallel partners are neighbouring ranks), dp split for
  // sharding (shard groups are neighbouring dp ranks), and the tied table's group.
  auto mesh = std::make_unique<comm::DeviceMesh>(world, config.mesh_dims());
  mesh->split_dim("dp", "replicate", "shard", static_cast<int>(config.shard_size()));
  mesh->split_dim("dp", "expert_dp", "ep", static_cast<int>(config.ep));
  mesh->add_position_group("embedding", "pp", {0, static_cast<int>(config.pp) - 1});
  world.set_emulated_link(config.net_gbps, config.net_latency_us);
  for (const char* name : {"dp", "tp", "shard", "replicate", "ep", "expert_dp"})
    mesh->group(name).set_emulated_link(config.net_gbps, config.net_latency_us);
  for (const char* name : {"dp", "pp", "tp", "shard", "replicate", "ep", "expert_dp", "embedding"}) mesh->group(name).set_timeout(config.comm_timeout);
  return mesh;
}

Parallelized parallelize(const TrainConfig& config, ModelSpec& spec, comm::ProcessGroup& world) {
  // Before any other collective: ranks started with different configurations or binaries
  // would call collectives of different sizes.
  check_ranks_agree(config, world);
  // Before any model tensor: a model that cannot fit is refused, not allocated until it fails.
  check_fits_in_memory(training_memory(config), world.ranks_on_node(), "the model");
  Parallelized p;
  // 0. Placement: oversubscribed one-thread ranks pinned to cores, a stage's ranks apart.
  if (config.pin_ranks == "auto" && config.threads == 1) {
    p.placement = comm::pin_ranks_when_oversubscribed(config.mesh_layout(), world);
    if (!p.placement.empty())
      p.placement += ", each rank on one core and a pipeline stage's ranks on different ones (pin_ranks = \"off\" "
                     "leaves it to the OS)";
  }
  // 1. The mesh: every group the later steps take is an axis or a named group of it.
  p.mesh = parallel_mesh(config, world);
  comm::ProcessGroup &tp = p.group("tp"), &pp = p.group("pp");

  // 2. Tensor parallelism by layer substitution: the model asks this builder for its layers,
  // and the loss works on the tp-split outputs.
  if (config.tp > 1) p.tp_layers = std::make_unique<parallel::tp::TensorParallelLayers>(tp, config.sequence_parallel);
  const nn::LayerBuilder& tp_or_serial =
      p.tp_layers ? static_cast<const nn::LayerBuilder&>(*p.tp_layers) : nn::serial_layers();
  spec.build_loss(tp);

  // 2b. Expert parallelism, likewise: every mixture of experts holds this rank's E/ep experts
  // and exchanges tokens all-to-all over ep (a split of dp).
  if (config.ep > 1) p.ep_layers = std::make_unique<parallel::ep::ExpertParallelLayers>(tp_or_serial, p.group("ep"));
  const nn::LayerBuilder& layers = p.ep_layers ? static_cast<const nn::LayerBuilder&>(*p.ep_layers) : tp_or_serial;

  // 3. The model, or this rank's pipeline chunks and its part of the schedule.
  build_model(config, spec, layers, pp, p);

  // 4. Sequence parallelism's partial gradients of replicated parameters, summed over tp from
  // grad-ready hooks installed before data parallelism's, so the sum comes first.
  if (config.tp > 1 && config.sequence_parallel)
    p.replicated_sum = std::make_unique<parallel::tp::ReplicatedGradientSum>(*p.model, tp, config.zero >= 2);

  // 5. Data parallelism: one face for DDP, ZeRO 1-3 and HSDP.
  p.gradient_sync = build_data_parallel(config, spec, p);

  // 6. What happens between the last backward and the optimizer step.
  parallel::FinalizeParts parts;
  parts.sync = p.gradient_sync.get();
  parts.replicated_sum = p.replicated_sum.get();
  nn::Module &first = *p.chunks.front(), &last = *p.chunks.back();
  nn::Parameter* tied = spec.tied_parameter(first) != nullptr ? spec.tied_parameter(first) : spec.tied_parameter(last);
  if (p.group("embedding").size() > 1 && tied != nullptr) {
    parts.embedding_group = &p.group("embedding");
    parts.token_table = tied;
  }
  // The copy on a rank whose first chunk does not own it (another stage's does).
  if (config.pp > 1 && spec.tied_parameter(last) != nullptr && !spec.owns_tied_parameter(first))
    p.tied_copy = spec.tied_parameter(last);
  parts.reduce_during_backward = parallel::reduce_during_last_backward(*p.gradient_sync, config.pp > 1, config.chunks);
  parts.model_parallel_groups = {&tp, &pp, &p.group("ep")};
  const bool all_replicas = tp.rank() == 0, dense_here = p.group("ep").rank() == 0;
  const nn::Parameter* table_copy = p.tied_copy;
  // Experts differ across ep (each rank's block counts), dense parameters are replicas there.
  parts.counted = [all_replicas, dense_here, table_copy](const nn::Parameter& param) {
    const bool expert = parallel::ep::is_expert_parameter(param);
    return &param != table_copy && (all_replicas || (param.shard_spec().sharded() && !expert)) && (dense_here || expert);
  };
  p.finalizer = std::make_unique<parallel::GradientFinalizer>(std::move(parts));
  return p;
}

}  // namespace loom::train
