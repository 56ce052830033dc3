#include "loom/train/parallelize.hpp"

#include "loom/comm/core_placement.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/pipeline/model_chunks.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

namespace {

namespace pl = parallel::pipeline;

// Pipeline chunks: this rank holds virtual stages rank, rank + p, ... (one per chunk).
void build_pipeline(const TrainConfig& config, const nn::LayerBuilder& layers, comm::ProcessGroup& pp, Parallelized& out) {
  const int64_t p = config.pp, v = config.chunks, rank = pp.rank();
  const std::vector<nn::GPTStage> stages = pl::partition_stages(config.model, p, v, config.pipeline_layers());
  std::vector<std::unique_ptr<nn::GPT>> chunks;
  for (int64_t c = 0; c < v; ++c)
    chunks.push_back(std::make_unique<nn::GPT>(config.model, static_cast<uint64_t>(config.seed), layers,
                                               stages[static_cast<size_t>(c * p + rank)]));
  auto holder = std::make_unique<pl::ModelChunks>(std::move(chunks));
  out.chunks = holder->chunks();
  out.model = std::move(holder);
  // Every rank checks the whole schedule before the first step (it is data, so a bad one is
  // named here instead of hanging later), then keeps its own part.
  const pl::Schedule schedule = pl::checked_schedule(config.schedule, config.schedule_file, static_cast<int>(p),
                                                     static_cast<int>(config.micro_batches), static_cast<int>(v));
  out.pipeline_actions = schedule.ranks.at(static_cast<size_t>(rank));
  const int64_t T = config.model.block_size, t = config.sequence_parallel ? config.tp : 1;
  out.pipeline = std::make_unique<pl::PipelineExecutor>(out.chunks, pp, config.micro_batches,
                                                        Shape{config.batch_size, T / t, config.model.n_embd});
}

std::unique_ptr<parallel::GradientSync> build_data_parallel(const TrainConfig& config, Parallelized& p) {
  const comm::AllReduceAlgorithm algorithm = comm::parse_algorithm(config.allreduce);
  if (config.zero == 0) {
    if (p.group("dp").size() == 1) return std::make_unique<parallel::LocalGradients>(*p.model);
    return std::make_unique<parallel::DistributedDataParallel>(
        *p.model, p.group("dp"), parallel::DdpOptions{static_cast<int64_t>(config.bucket_mb * 1048576.0), algorithm});
  }
  parallel::ZeroOptions options;
  options.stage = static_cast<int>(config.zero);
  for (nn::GPT* chunk : p.chunks)
    for (nn::Block* block : chunk->blocks()) options.units.push_back(block);
  options.algorithm = algorithm;
  return std::make_unique<parallel::ShardedDataParallel>(*p.model, p.group("shard"), &p.group("replicate"), options);
}

}  // namespace

std::unique_ptr<comm::DeviceMesh> parallel_mesh(const TrainConfig& config, comm::ProcessGroup& world) {
  // dp x pp x tp (tp fastest: tensor-parallel partners are neighbouring ranks), dp split for
  // sharding (shard groups are neighbouring dp ranks), and the tied table's group.
  auto mesh = std::make_unique<comm::DeviceMesh>(world, config.mesh_dims());
  mesh->split_dim("dp", "replicate", "shard", static_cast<int>(config.shard_size()));
  mesh->add_position_group("embedding", "pp", {0, static_cast<int>(config.pp) - 1});
  world.set_emulated_link(config.net_gbps, config.net_latency_us);
  for (const char* name : {"dp", "tp", "shard", "replicate"})
    mesh->group(name).set_emulated_link(config.net_gbps, config.net_latency_us);
  return mesh;
}

Parallelized parallelize(const TrainConfig& config, comm::ProcessGroup& world) {
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

  // 2. Tensor parallelism by layer substitution: the model asks this builder for its layers.
  if (config.tp > 1) {
    p.tp_layers = std::make_unique<parallel::tp::TensorParallelLayers>(tp, config.sequence_parallel);
    const int64_t Vl = config.model.resolved_padded_vocab() / config.tp;
    p.tp_loss = std::make_unique<parallel::tp::VocabParallelCrossEntropy>(config.model.vocab_size, tp.rank() * Vl, tp);
  }
  const nn::LayerBuilder& layers = p.tp_layers ? static_cast<const nn::LayerBuilder&>(*p.tp_layers) : nn::serial_layers();

  // 3. The model, or this rank's pipeline chunks and its part of the schedule.
  if (config.pp > 1) {
    build_pipeline(config, layers, pp, p);
  } else {
    auto gpt = std::make_unique<nn::GPT>(config.model, static_cast<uint64_t>(config.seed), layers);
    p.chunks = {gpt.get()};
    p.model = std::move(gpt);
  }

  // 4. Sequence parallelism's partial gradients of replicated parameters, summed over tp from
  // grad-ready hooks installed before data parallelism's, so the sum comes first.
  if (config.tp > 1 && config.sequence_parallel)
    p.replicated_sum = std::make_unique<parallel::tp::ReplicatedGradientSum>(*p.model, tp, config.zero >= 2);

  // 5. Data parallelism: one face for DDP, ZeRO 1-3 and HSDP.
  p.gradient_sync = build_data_parallel(config, p);

  // 6. What happens between the last backward and the optimizer step.
  parallel::FinalizeParts parts;
  parts.sync = p.gradient_sync.get();
  parts.replicated_sum = p.replicated_sum.get();
  nn::GPT &first = *p.chunks.front(), &last = *p.chunks.back();
  if (p.group("embedding").size() > 1) {
    parts.embedding_group = &p.group("embedding");
    parts.token_table = first.has_embedding() ? &first.embedding().wte() : &last.head_weight();
  }
  parts.reduce_during_backward = parallel::reduce_during_last_backward(*p.gradient_sync, config.pp > 1, config.chunks);
  parts.model_parallel_groups = {&tp, &pp};
  const bool all_replicas = tp.rank() == 0;
  const nn::Parameter* table_copy = last.has_head() && !first.has_embedding() ? &last.head_weight() : nullptr;
  parts.counted = [all_replicas, table_copy](const nn::Parameter& param) {
    return &param != table_copy && (all_replicas || param.shard_spec().sharded());
  };
  p.finalizer = std::make_unique<parallel::GradientFinalizer>(std::move(parts));
  return p;
}

}  // namespace loom::train
