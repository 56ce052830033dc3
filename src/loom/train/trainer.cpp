#include "loom/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "loom/comm/core_placement.hpp"
#include "loom/error.hpp"
#include "loom/kernels/peak_flops.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/clip.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/parallel/pipeline/model_chunks.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_check.hpp"
#include "loom/parallel/pipeline/schedules.hpp"
#include "loom/parallel/pipeline/timeline_svg.hpp"
#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_file.hpp"
#include "loom/train/model_identity.hpp"
#include "loom/train/resume_auto.hpp"

namespace loom::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Trainer::Trainer(TrainConfig config, bool quiet, comm::ProcessGroup* world)
    : config_(std::move(config)), quiet_(quiet), world_(world) {
  config_.validate();
  const int64_t ranks = config_.dp * config_.pp * config_.tp;
  const int64_t world_size = world_ != nullptr ? world_->size() : 1;
  check(ranks == world_size, "layout dp(", config_.dp, ") x pp(", config_.pp, ") x tp(", config_.tp, ") = ", ranks,
        " != world size ", world_size, ranks > 1 && world_ == nullptr ? " (start it with mpirun -np N loom train ...)" : "");
  if (world_ != nullptr && world_->rank() != 0) quiet_ = true;  // rank 0 speaks for the job
  kernels::set_num_threads(static_cast<int>(config_.threads));
  dataset_ = std::make_unique<data::TextDataset>(config_.data, config_.tokenizer, config_.model.block_size,
                                                 config_.val_fraction);
  config_.model.vocab_size = dataset_->tokenizer().vocab_size();
  // Tensor parallel: the vocabulary is padded to a multiple of 64 x tp, so every rank's
  // slice of the embedding and of the logits has the same size (as Megatron-LM pads it).
  if (config_.tp > 1 && config_.model.padded_vocab_size == 0)
    config_.model.padded_vocab_size = (config_.model.vocab_size + 64 * config_.tp - 1) / (64 * config_.tp) * 64 * config_.tp;
  setup_mesh();
  const nn::LayerBuilder& layers =
      tp_layers_ ? static_cast<const nn::LayerBuilder&>(*tp_layers_) : nn::serial_layers();
  if (pp_group_ == nullptr) {
    auto gpt = std::make_unique<nn::GPT>(config_.model, static_cast<uint64_t>(config_.seed), layers);
    chunks_ = {gpt.get()};
    model_ = std::move(gpt);
  } else {
    setup_pipeline(layers);
  }
  if (tp_layers_) {
    const int64_t Vl = config_.model.resolved_padded_vocab() / config_.tp;
    tp_loss_ = std::make_unique<parallel::tp::VocabParallelCrossEntropy>(config_.model.vocab_size,
                                                                         tp_group_->rank() * Vl, *tp_group_);
    // Before DDP/ZeRO install their hooks: partial replicated gradients are summed first.
    if (config_.sequence_parallel)
      replicated_sum_ = std::make_unique<parallel::tp::ReplicatedGradientSum>(*model_, *tp_group_, config_.zero >= 2);
  }
  setup_data_parallel();
  // Sharded modes: the optimizer steps this rank's shards, not the model's parameters.
  const std::vector<nn::Parameter*> stepped = sharded_ ? sharded_->shard_parameters() : model_->parameters();
  if (config_.optimizer == "adamw") {
    optimizer_ = std::make_unique<optim::AdamW>(
        stepped, optim::AdamWConfig{static_cast<float>(config_.beta1), static_cast<float>(config_.beta2),
                                    static_cast<float>(config_.eps), static_cast<float>(config_.weight_decay)});
  } else {
    optimizer_ = std::make_unique<optim::SGD>(
        stepped, optim::SGDConfig{static_cast<float>(config_.momentum), static_cast<float>(config_.weight_decay)});
  }
  schedule_ = optim::LrSchedule{static_cast<float>(config_.lr), static_cast<float>(config_.min_lr),
                                config_.warmup_steps, config_.decay_steps > 0 ? config_.decay_steps : config_.steps};
  run_directory_ = std::make_unique<RunDirectory>(config_, world_, quiet_);  // before anything is read or written there
  if (config_.resume == "auto") {
    resume_auto();
  } else if (!config_.resume.empty()) {
    resume_from(resolve_checkpoint_path(config_.resume == "latest" ? config_.out_dir : config_.resume));
  }
  run_directory_->start();
  if (!config_.out_dir.empty() && (world_ == nullptr || world_->rank() == 0)) {
    fs::create_directories(config_.out_dir);
    metrics_ = std::make_unique<MetricsLog>((fs::path(config_.out_dir) / "metrics.jsonl").string());
  } else {
    metrics_ = std::make_unique<MetricsLog>("");
  }
  trace_window_ = std::make_unique<TraceWindow>(config_, world_);
  peak_gflops_ = config_.peak_gflops > 0 ? config_.peak_gflops : 0.0;
  // Under mpirun a rank's stdout is a pseudo-terminal even when the job's output goes to a log.
  live_progress_ = ::isatty(::fileno(stdout)) != 0 && world_ == nullptr;
}

void Trainer::setup_pipeline(const nn::LayerBuilder& layers) {
  namespace pl = parallel::pipeline;
  const std::vector<int64_t> blocks = config_.pipeline_layers();
  // This rank holds virtual stages rank, rank + p, ... (one per chunk).
  const int64_t p = config_.pp, v = config_.chunks, rank = pp_group_->rank();
  const std::vector<nn::GPTStage> stages = pl::partition_stages(config_.model, p, v, blocks);
  std::vector<std::unique_ptr<nn::GPT>> chunks;
  for (int64_t c = 0; c < v; ++c)
    chunks.push_back(std::make_unique<nn::GPT>(config_.model, static_cast<uint64_t>(config_.seed), layers,
                                               stages[static_cast<size_t>(c * p + rank)]));
  auto holder = std::make_unique<pl::ModelChunks>(std::move(chunks));
  chunks_ = holder->chunks();
  model_ = std::move(holder);
  // Every rank checks the whole schedule before the first step (it is data, so a bad one is
  // named here instead of hanging later), then keeps its own part.
  const pl::Schedule schedule = pl::build_schedule(pl::parse_schedule_kind(config_.schedule), static_cast<int>(p),
                                                   static_cast<int>(config_.micro_batches), static_cast<int>(v));
  pl::check_schedule(schedule);
  pipeline_actions_ = schedule.ranks.at(static_cast<size_t>(rank));
  const int64_t T = config_.model.block_size, t = config_.sequence_parallel ? config_.tp : 1;
  pipeline_ = std::make_unique<pl::PipelineExecutor>(chunks_, *pp_group_, config_.micro_batches,
                                                     Shape{config_.batch_size, T / t, config_.model.n_embd});
}

void Trainer::setup_mesh() {
  if (world_ == nullptr) return;
  world_->set_emulated_link(config_.net_gbps, config_.net_latency_us);
  if (config_.pin_ranks == "auto" && config_.threads == 1) {
    const std::string pinned = comm::pin_ranks_when_oversubscribed(config_.mesh_layout(), world_->rank());
    if (!pinned.empty() && !quiet_)
      std::printf("%s, each rank on one core and a pipeline stage's ranks on different ones (pin_ranks = \"off\" "
                  "leaves it to the OS)\n", pinned.c_str());
  }
  if (config_.tp == 1 && config_.pp == 1) {
    dp_group_ = world_;  // data parallelism over every rank
  } else {
    // tp varies fastest: tensor-parallel partners are neighbouring ranks.
    mesh_ = std::make_unique<comm::DeviceMesh>(*world_, config_.mesh_dims());
    dp_group_ = &mesh_->group("dp");
    tp_group_ = &mesh_->group("tp");
    for (comm::ProcessGroup* g : {dp_group_, tp_group_}) g->set_emulated_link(config_.net_gbps, config_.net_latency_us);
    if (config_.pp > 1) {
      pp_group_ = &mesh_->group("pp");
      // The first and last stage of a pipeline each hold the tied token table (embedding and
      // LM head): they form a group to sum its two gradients. Other ranks get groups of one.
      const int pp_rank = pp_group_->rank(), last = static_cast<int>(config_.pp) - 1;
      const int end = mesh_->coordinate("dp") * static_cast<int>(config_.tp) + mesh_->coordinate("tp");
      const bool holds_table = pp_rank == 0 || pp_rank == last;
      embedding_group_ = world_->split(holds_table ? end : world_->size() + world_->rank(), pp_rank, "embedding");
    }
    if (config_.tp > 1)
      tp_layers_ = std::make_unique<parallel::tp::TensorParallelLayers>(*tp_group_, config_.sequence_parallel);
  }
  dp_rank_ = dp_group_->rank();
}

void Trainer::setup_data_parallel() {
  if (dp_group_ == nullptr || (dp_group_->size() == 1 && config_.zero == 0)) return;
  const comm::AllReduceAlgorithm algorithm = comm::parse_algorithm(config_.allreduce);
  if (config_.zero == 0) {
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(
        *model_, *dp_group_, parallel::DdpOptions{static_cast<int64_t>(config_.bucket_mb * 1048576.0), algorithm});
    return;
  }
  // Shard over groups of K neighbouring ranks; the ranks holding the same chunk in each
  // group form a replicate group (HSDP; with K = dp it has one member).
  const int K = static_cast<int>(config_.shard_size());
  shard_group_ = dp_group_->split(dp_rank_ / K, dp_rank_ % K, "shard");
  replicate_group_ = dp_group_->split(dp_rank_ % K, dp_rank_ / K, "replicate");
  for (comm::ProcessGroup* g : {shard_group_.get(), replicate_group_.get()})
    g->set_emulated_link(config_.net_gbps, config_.net_latency_us);
  parallel::ZeroOptions options;
  options.stage = static_cast<int>(config_.zero);
  for (nn::GPT* chunk : chunks_)
    for (nn::Block* block : chunk->blocks()) options.units.push_back(block);
  options.algorithm = algorithm;
  sharded_ = std::make_unique<parallel::ShardedDataParallel>(*model_, *shard_group_, replicate_group_.get(), options);
}

void Trainer::resume_from(const std::string& path) {
  // Any checkpoint, whatever layout wrote it: each rank fills its own pieces (reshard.hpp).
  // A rank that cannot read its pieces fails the resume on every rank.
  CheckpointInfo info;
  check_resume_model(path, config_, dataset_->tokenizer().spec(), world_);
  on_every_rank(world_, [&] { info = load_state(path, local_state(), config_.optimizer); });
  optimizer_->set_steps_taken(info.optimizer_steps);
  check(info.tokenizer_spec == dataset_->tokenizer().spec(), "checkpoint '", path,
        "' was trained with a different tokenizer/vocabulary than '", config_.data, "'");
  step_ = info.step;
  if (!quiet_) std::printf("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(step_));
}

void Trainer::resume_auto() {
  const std::string path = choose_auto_resume(local_state(), config_, dataset_->tokenizer().spec(), world_, !quiet_);
  if (!path.empty()) resume_from(path);
}

float Trainer::loss_of(Tensor& logits, const Tensor& targets, bool backward, float scale) {
  trace::Span span("loss", backward ? "loss forward+backward" : "loss");
  const int64_t V = config_.model.vocab_size;
  if (tp_loss_) {
    const float loss = tp_loss_->forward(logits, targets);
    if (backward) tp_loss_->backward(logits, targets, scale);
    return loss;
  }
  const float loss = nn::cross_entropy_loss(logits, targets, V);
  if (backward) nn::cross_entropy_loss_backward(logits, targets, V, scale);
  return loss;
}

float Trainer::forward_backward(const data::Batch& batch, float loss_scale) {
  MemoryScope scope(MemoryCategory::Activations);
  nn::Context ctx;
  nn::GPT& model = *chunks_.front();
  Tensor logits = model.forward(batch.inputs, ctx);  // (B, T, Vp), or (B, T, Vp/tp)
  const float loss = loss_of(logits, batch.targets, /*backward=*/true, loss_scale);
  model.backward(logits, ctx);  // logits now hold dlogits
  return loss;
}

float Trainer::local_gradients() {
  const int64_t M = config_.micro_batches, B = config_.batch_size, T = config_.model.block_size;
  double loss_sum = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    // This rank's B rows of global micro-batch m (B * dp rows), so every layout reads the
    // same global batch.
    const int64_t row = (m * config_.dp + dp_rank_) * B;
    trace::set_micro_batch(m);
    data::Batch batch;
    {
      trace::Span load("data", "load batch");
      batch = dataset_->batch(data::Split::Train, static_cast<uint64_t>(config_.seed), step_, row, B, T);
    }
    if (ddp_) ddp_->set_sync(m == M - 1);  // communicate once, after the last micro-batch
    if (sharded_) sharded_->set_sync(m == M - 1);
    if (replicated_sum_) replicated_sum_->set_sync(m == M - 1);
    loss_sum += forward_backward(batch, 1.0f / static_cast<float>(M));
  }
  trace::set_micro_batch(-1);
  if (ddp_) ddp_->finish_gradient_sync();
  if (sharded_) sharded_->finish_gradient_sync();
  return static_cast<float>(loss_sum / static_cast<double>(M));
}

float Trainer::pipeline_gradients() {
  const int64_t M = config_.micro_batches, B = config_.batch_size, T = config_.model.block_size;
  std::vector<data::Batch> batches;  // this rank's rows of every micro-batch (token ids: small)
  for (int64_t m = 0; m < M; ++m) {
    trace::Span load("data", "load batch");
    batches.push_back(dataset_->batch(data::Split::Train, static_cast<uint64_t>(config_.seed), step_,
                                      (m * config_.dp + dp_rank_) * B, B, T));
  }
  // DDP with one chunk per rank reduces its buckets during each stage's last backward (as
  // outside a pipeline), so the reduction overlaps it; the tied token table's two copies,
  // each averaged over data parallelism, are summed afterwards (sums commute). With
  // interleaving a bucket can span chunks whose last backwards are far apart, and ZeRO-1's
  // shards of the table differ between the first and last stage: those reduce once, after
  // the pipeline's last backward and the table's sum.
  const bool overlap_dp = ddp_ && chunks_.size() == 1;
  if (ddp_) ddp_->set_sync(false);
  if (sharded_) sharded_->set_sync(false);
  const double loss_sum = pipeline_->run(
      pipeline_actions_, [&](int64_t mb) { return batches[mb].inputs; },
      [&](Tensor& logits, int64_t mb) {
        return loss_of(logits, batches[mb].targets, /*backward=*/true, 1.0f / static_cast<float>(M));
      },
      [&](int64_t mb, int64_t) {
        if (replicated_sum_) replicated_sum_->set_sync(mb == M - 1);
        if (overlap_dp) ddp_->set_sync(mb == M - 1);
      });
  if (overlap_dp) ddp_->finish_gradient_sync();  // every bucket was launched in the last backward
  if (embedding_group_->size() > 1) {
    // Rank 0's first chunk holds the embedding, rank p-1's last chunk the head.
    nn::Parameter& table = chunks_.front()->has_embedding() ? chunks_.front()->embedding().wte() : chunks_.back()->head_weight();
    embedding_group_->all_reduce(table.grad(), comm::ReduceOp::Sum);
  }
  if (ddp_ && !overlap_dp) {
    ddp_->sync_now();
    ddp_->finish_gradient_sync();
  }
  if (sharded_) {
    sharded_->sync_now();
    sharded_->finish_gradient_sync();
  }
  float loss = static_cast<float>(loss_sum / static_cast<double>(M));  // the last stage's; 0 elsewhere
  pp_group_->all_reduce(&loss, 1, comm::ReduceOp::Sum);
  return loss;
}

double Trainer::global_grad_sum_squares() {
  // The whole model's gradient, each parameter counted once: summed over data-parallel
  // shards (ZeRO) and tensor-parallel slices; a parameter replicated across tp (LayerNorm,
  // row-parallel bias) only from tp rank 0.
  // The last pipeline stage's copy of the tied token table is not counted: the first
  // stage's holds the same (summed) gradient.
  const bool all_replicas = tp_group_ == nullptr || tp_group_->rank() == 0;
  const nn::Parameter* table_copy =
      chunks_.back()->has_head() && !chunks_.front()->has_embedding() ? &chunks_.back()->head_weight() : nullptr;
  auto counted = [all_replicas, table_copy](const nn::Parameter& p) {
    return &p != table_copy && (all_replicas || p.shard_spec().sharded());
  };
  double sum = 0.0;
  if (sharded_) {
    sum = sharded_->grad_sum_squares(counted);
  } else {
    std::vector<nn::Parameter*> params;
    for (nn::Parameter* p : optimizer_->params())
      if (counted(*p)) params.push_back(p);
    sum = optim::grad_sum_squares(params);
  }
  for (comm::ProcessGroup* g : {tp_group_, pp_group_})
    if (g != nullptr && g->size() > 1) {
      float s = static_cast<float>(sum);
      g->all_reduce(&s, 1, comm::ReduceOp::Sum);
      sum = s;
    }
  return sum;
}

StepResult Trainer::train_step() {
  trace::Span span("step", "step");
  span.arg("step", step_ + 1);
  StepResult r;
  r.lr = schedule_.at(step_);
  if (tp_group_ != nullptr) tp_group_->reset_stats();
  optimizer_->zero_grad();
  if (sharded_) sharded_->zero_grad();
  r.loss = pipeline_ ? pipeline_gradients() : local_gradients();
  if (pipeline_) {
    last_timeline_ = pipeline_->gather_timeline();
    r.pipeline_bubble = last_timeline_.bubble_over_compute();
    r.pipeline_bubble_theory = parallel::pipeline::theoretical_bubble(static_cast<int>(config_.pp),
                                                                      static_cast<int>(config_.micro_batches),
                                                                      static_cast<int>(config_.chunks));
  }
  if (dp_group_ != nullptr) dp_group_->all_reduce(&r.loss, 1, comm::ReduceOp::Avg);  // the global batch's mean
  {
    trace::Span norm_span("optimizer", "grad norm");
    r.grad_norm = std::sqrt(global_grad_sum_squares());
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    check(config_.on_nan == "skip", "non-finite ", std::isfinite(r.loss) ? "gradient norm" : "loss", " at step ",
          step_ + 1, " (loss ", r.loss, ", grad norm ", r.grad_norm,
          "); lower lr or set on_nan = \"skip\" to skip such steps");
    r.skipped = true;
  } else {
    trace::Span step_span("optimizer", "optimizer step");
    optim::clip_grads_to_norm(optimizer_->params(), r.grad_norm, static_cast<float>(config_.grad_clip));
    optimizer_->step(r.lr);
    if (sharded_) sharded_->after_optimizer_step();
  }
  ++step_;
  r.step = step_;
  if (tp_group_ != nullptr) {
    const comm::CommStats s = tp_group_->stats();
    r.tp_comm_seconds = s.seconds;
    r.tp_comm_bytes = s.bytes;
  }
  return r;
}

float Trainer::evaluate() {
  trace::Span span("eval", "evaluate");
  MemoryScope scope(MemoryCategory::Activations);
  const int64_t B = config_.batch_size, T = config_.model.block_size;
  double sum = 0.0;
  if (pipeline_) {
    std::vector<data::Batch> batches;
    for (int64_t i = 0; i < config_.eval_batches; ++i)
      batches.push_back(dataset_->batch(data::Split::Val, 0, i, dp_rank_ * B, B, T));
    float last_stage = static_cast<float>(pipeline_->run_forward(
        [&](int64_t i) { return batches[i].inputs; },
        [&](Tensor& logits, int64_t i) { return loss_of(logits, batches[i].targets, false, 1.0f); }, config_.eval_batches));
    pp_group_->all_reduce(&last_stage, 1, comm::ReduceOp::Sum);
    sum = last_stage;
  }
  for (int64_t i = 0; i < (pipeline_ ? 0 : config_.eval_batches); ++i) {
    // The same validation batches at every evaluation: a fixed seed, step = batch index;
    // each data-parallel rank takes its rows of the global batch, as in training.
    const data::Batch batch = dataset_->batch(data::Split::Val, 0, i, dp_rank_ * B, B, T);
    nn::Context ctx;
    Tensor logits = chunks_.front()->forward(batch.inputs, ctx);
    sum += loss_of(logits, batch.targets, /*backward=*/false, 1.0f);
  }
  float loss = static_cast<float>(sum / static_cast<double>(config_.eval_batches));
  if (dp_group_ != nullptr) dp_group_->all_reduce(&loss, 1, comm::ReduceOp::Avg);
  return loss;
}

nn::ShardSpec Trainer::tensor_parallel_spec(const std::string& key) {
  // "model.<param>" or "optim.<kind>.<param>": the parameter's spec.
  if (tp_layers_ == nullptr) return {};
  if (param_specs_.empty())
    for (nn::Parameter* p : model_->parameters()) param_specs_[p->name()] = p->shard_spec();
  std::string name = key.substr(key.find('.') + 1);
  if (key.rfind("optim.", 0) == 0) name = name.substr(name.find('.') + 1);
  auto it = param_specs_.find(name);
  check(it != param_specs_.end(), "state tensor '", key, "' belongs to no parameter");
  return it->second;
}

std::map<std::string, Tensor> Trainer::state_dict() {
  return serial_layout(sharded_ ? sharded_->full_state_dict(optimizer_->state(), optimizer_->state_kinds())
                                : checkpoint_tensors(*model_, optimizer_.get()));
}

std::map<std::string, Tensor> Trainer::gradient_dict() {
  // Named like optimizer state ("optim.grad.<param>") so the data-parallel shards, the
  // tensor-parallel slices and the pipeline stages are gathered by the same code.
  std::map<std::string, Tensor> grads;
  for (nn::Parameter* p : optimizer_->params()) grads["grad." + p->name()] = p->grad();
  std::map<std::string, Tensor> local;
  if (sharded_) {
    for (auto& [key, t] : sharded_->full_state_dict(grads, {"grad"}))
      if (key.rfind("optim.", 0) == 0) local.emplace(key, t);
  } else {
    for (auto& [key, t] : grads) local.emplace("optim." + key, t);
  }
  std::map<std::string, Tensor> out;
  for (auto& [key, t] : serial_layout(std::move(local))) out.emplace(key.substr(std::string("optim.").size()), t);
  return out;
}

std::map<std::string, Tensor> Trainer::serial_layout(std::map<std::string, Tensor> local) {
  if (tp_layers_ == nullptr) return pp_group_ ? gather_pipeline(std::move(local)) : local;
  // Tensor parallel: gather every split tensor's slices (in key order on every rank).
  std::map<std::string, Tensor> full;
  const int t = tp_group_->size();
  for (auto& [key, slice] : local) {
    nn::ShardSpec spec = tensor_parallel_spec(key);
    if (!spec.sharded()) {
      full[key] = slice;
      continue;
    }
    const int64_t n = slice.numel();
    Tensor gathered = Tensor::empty({t * n}, DType::F32, MemoryCategory::Other);
    tp_group_->all_gather(slice.view({n}), gathered);
    Tensor whole = Tensor::empty(spec.full_shape(slice.shape()), DType::F32, MemoryCategory::Other);
    for (int r = 0; r < t; ++r) {
      spec.index = r;
      place_shard(gathered.narrow(r * n, n).view(slice.shape()), whole, spec);
    }
    full[key] = whole;
  }
  return pp_group_ ? gather_pipeline(std::move(full)) : full;
}

std::map<std::string, Tensor> Trainer::gather_pipeline(std::map<std::string, Tensor> local) {
  // Each stage in turn broadcasts its tensors over the pipeline: a header of floats (count;
  // per tensor name length, rank, dims), the name's characters, the values. The first and
  // last stage both hold the tied token table; the first stage's copy is kept.
  std::map<std::string, Tensor> all;
  auto broadcast = [&](std::vector<float>& v, int root) {
    pp_group_->broadcast_async(v.data(), static_cast<int64_t>(v.size()), root).wait();
  };
  for (int owner = 0; owner < pp_group_->size(); ++owner) {
    const bool mine = owner == pp_group_->rank();
    std::vector<float> count{static_cast<float>(mine ? local.size() : 0)};
    broadcast(count, owner);
    auto it = local.begin();
    for (int64_t i = 0; i < static_cast<int64_t>(count[0]); ++i) {
      std::vector<float> header(2 + 8, 0.0f);  // name length, rank, up to 8 dims
      if (mine) {
        header[0] = static_cast<float>(it->first.size());
        header[1] = static_cast<float>(it->second.ndim());
        for (int d = 0; d < it->second.ndim(); ++d) header[2 + d] = static_cast<float>(it->second.size(d));
      }
      broadcast(header, owner);
      std::vector<float> name(static_cast<size_t>(header[0]));
      if (mine) std::copy(it->first.begin(), it->first.end(), name.begin());
      broadcast(name, owner);
      Shape shape;
      for (int d = 0; d < static_cast<int>(header[1]); ++d) shape.push_back(static_cast<int64_t>(header[2 + d]));
      Tensor t = mine ? it->second : Tensor::empty(shape, DType::F32, MemoryCategory::Other);
      pp_group_->broadcast(t, owner);
      all.emplace(std::string(name.begin(), name.end()), t);
      if (mine) ++it;
    }
  }
  return all;
}

std::string Trainer::save_checkpoint_now() {
  const CheckpointInfo info{step_, to_toml(config_), dataset_->tokenizer().spec(), config_.optimizer,
                            optimizer_->steps_taken()};
  const bool sharded_format =
      config_.checkpoint_format == "sharded" || (config_.checkpoint_format == "auto" && world_ != nullptr && world_->size() > 1);
  if (sharded_format)
    return save_sharded_checkpoint(config_.out_dir, local_state(), info, layout(), config_.keep_checkpoints, world_);
  // Single file: the serial layout gathered (collective), rank 0 writes; the others wait so
  // none runs ahead of a checkpoint it may need to resume from.
  const std::map<std::string, Tensor> tensors = state_dict();
  std::string path;
  if (world_ == nullptr || world_->rank() == 0) path = save_checkpoint(config_.out_dir, tensors, info, config_.keep_checkpoints);
  if (world_ != nullptr) world_->barrier();
  return path;  // "" on other ranks: rank 0's file, which this rank may not even see
}

std::string Trainer::memory_report() const {
  const MemorySnapshot m = MemoryTracker::instance().snapshot();
  const plan::StateBytes want = state_formula();
  auto at = [&](MemoryCategory c) { return static_cast<size_t>(c); };
  std::string out = "memory on rank " + std::to_string(world_ != nullptr ? world_->rank() : 0) + ": params " +
                    format_bytes(m.current[at(MemoryCategory::Parameters)]) + " (formula " + format_bytes(want.params) +
                    ") | grads " + format_bytes(m.current[at(MemoryCategory::Gradients)]) + " (formula " +
                    format_bytes(want.grads) + ") | optimizer " +
                    format_bytes(m.current[at(MemoryCategory::OptimizerState)]) + " (formula " +
                    format_bytes(want.optimizer) + ")" +
                    (sharded_ ? " | unit buffers up to " +
                                    format_bytes(sharded_->gathered_buffer_bytes() + sharded_->gradient_buffer_bytes())
                              : std::string()) +
                    " | peak activations " +
                    format_bytes(m.peak[at(MemoryCategory::Activations)]) + " | peak comm buffers " +
                    format_bytes(m.peak[at(MemoryCategory::CommBuffers)]) + " | peak total " + format_bytes(m.total_peak);
  return out;
}

double Trainer::measure_peak_gflops() {
  // One rank measures while the others wait: ranks measuring side by side on shared cores
  // would each see a fraction of the peak.
  if (world_ == nullptr) return kernels::measure_matmul_gflops();
  float peak = world_->rank() == 0 ? static_cast<float>(kernels::measure_matmul_gflops()) : 0.0f;
  world_->broadcast_async(&peak, 1, 0).wait();
  return peak;
}

double Trainer::core_share() const {
  // Ranks oversubscribing a node's cores (4 ranks x 1 thread on 2 cores) each get a share
  // of a core's peak, so the job's peak is the cores it can use.
  if (world_ == nullptr) return 1.0;
  const double wanted = static_cast<double>(world_->ranks_on_node()) * kernels::num_threads();
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min(1.0, cores / wanted);
}

plan::StateBytes Trainer::state_formula() const {
  return plan::model_state_bytes(model_->num_parameters(), static_cast<int>(config_.shard_size()),
                                 static_cast<int>(config_.zero), config_.optimizer == "adamw" ? 8 : 4);
}

nlohmann::json Trainer::memory_json() const {
  // Activations: the per-layer formula x this rank's blocks per chunk x the (micro-batch,
  // chunk) pairs a pipeline schedule holds at once (1 without a pipeline).
  const int64_t in_flight = pipeline_ ? last_timeline_.peak_activations.at(static_cast<size_t>(pp_group_->rank())) : 1;
  const int64_t activations = plan::activation_bytes_per_layer(config_.batch_size, config_.model.block_size,
                                                               config_.model.n_embd, config_.model.n_head, config_.tp,
                                                               config_.sequence_parallel) *
                              static_cast<int64_t>(chunks_.front()->blocks().size()) * in_flight;
  const int rank = world_ != nullptr ? world_->rank() : 0;
  nlohmann::json record = memory_record(rank, rank_name(config_, rank), state_formula(), activations);
  record["cpus"] = comm::allowed_cpus();  // where the rank could run: one CPU when pinned
  return record;
}

void Trainer::log_progress(const StepResult& r, double step_seconds, bool keep) {
  // Tokens of the global batch; MFU against the peak of all the job's processes.
  const double ranks = static_cast<double>(config_.dp * config_.pp * config_.tp);
  const double tokens = static_cast<double>(config_.batch_size * config_.micro_batches * config_.model.block_size) *
                        static_cast<double>(config_.dp);
  const double tok_per_s = tokens / step_seconds;
  const double mfu =
      config_.model.flops_per_token(config_.model.block_size) * tok_per_s / (peak_gflops_ * 1e9 * ranks * core_share());
  const double avg = elapsed_train_seconds_ / static_cast<double>(std::max<int64_t>(1, steps_timed_));
  const double eta = avg * static_cast<double>(config_.steps - step_);
  const int64_t mem = MemoryTracker::instance().total_peak();
  // Data parallel: the share of the gradient all-reduce time that backward hid.
  std::string overlap;
  double comm_s = 0.0, exposed_s = 0.0;
  if (ddp_ || sharded_) {
    comm_s = ddp_ ? ddp_->comm_seconds() : sharded_->comm_seconds();
    exposed_s = ddp_ ? ddp_->exposed_comm_seconds() : sharded_->exposed_comm_seconds();
    char buf[64];
    std::snprintf(buf, sizeof buf, " | comm %.0f ms, %.0f%% hidden", 1e3 * comm_s,
                  comm_s > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_s / comm_s) : 0.0);
    overlap = buf;
  }
  if (r.pipeline_bubble >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | bubble %.0f%% (theory %.0f%%)", 100.0 * r.pipeline_bubble,
                  100.0 * r.pipeline_bubble_theory);
    overlap += buf;
  }
  if (tp_group_ != nullptr && tp_group_->size() > 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | tp comm %.0f ms, %s", 1e3 * r.tp_comm_seconds, format_bytes(r.tp_comm_bytes).c_str());
    overlap += buf;
  }
  // On a terminal every step rewrites one live line and logged steps stay; in a log file
  // (CI, Slurm) only the logged steps appear, as plain lines.
  if (!quiet_ && (keep || live_progress_))
    std::printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | MFU %4.1f%% | mem %s%s | ETA %s%s%s",
                live_progress_ ? "\r\033[K" : "", static_cast<long long>(r.step), static_cast<long long>(config_.steps),
                r.loss, r.lr, r.grad_norm, tok_per_s, 100.0 * mfu, format_bytes(mem).c_str(), overlap.c_str(),
                format_duration(eta).c_str(), r.skipped ? " | SKIPPED (non-finite)" : "", keep ? "\n" : "");
  std::fflush(stdout);
  if (!keep) return;
  metrics_->write({{"kind", "train"}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens_per_s", tok_per_s}, {"mfu", mfu}, {"peak_mem_bytes", mem}, {"skipped", r.skipped},
                   {"elapsed_s", elapsed_train_seconds_}, {"comm_s", comm_s}, {"comm_exposed_s", exposed_s},
                   {"tp_comm_s", r.tp_comm_seconds}, {"tp_comm_bytes", r.tp_comm_bytes},
                   {"pipeline_bubble", r.pipeline_bubble}});
}

float Trainer::run() {
  if (peak_gflops_ <= 0.0) peak_gflops_ = measure_peak_gflops();
  if (!quiet_)
    std::printf("model: %lld parameters | %lld layers, %lld heads, %lld wide, context %lld, vocab %lld | %d threads, "
                "matmul peak %.0f GFLOP/s\n",
                static_cast<long long>(config_.model.num_parameters()), static_cast<long long>(config_.model.n_layer),
                static_cast<long long>(config_.model.n_head), static_cast<long long>(config_.model.n_embd),
                static_cast<long long>(config_.model.block_size), static_cast<long long>(config_.model.vocab_size),
                kernels::num_threads(), peak_gflops_);
  float val_loss = NAN;
  auto evaluate_and_log = [&]() {
    val_loss = evaluate();
    if (!quiet_)
      std::printf("%sstep %5lld | val loss %.4f\n", live_progress_ ? "\r\033[K" : "", static_cast<long long>(step_),
                  val_loss);
    metrics_->write({{"kind", "val"}, {"step", step_}, {"val_loss", val_loss}});
  };
  while (step_ < config_.steps) {
    const auto t0 = Clock::now();
    trace_window_->before_step(step_ + 1);
    const StepResult r = train_step();
    trace_window_->after_step(r.step);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    elapsed_train_seconds_ += dt;
    ++steps_timed_;
    log_progress(r, dt, r.step % config_.log_every == 0 || r.step == 1 || r.step == config_.steps);
    if (config_.eval_every > 0 && r.step % config_.eval_every == 0 && r.step != config_.steps) evaluate_and_log();
    if (config_.checkpoint_every > 0 && r.step % config_.checkpoint_every == 0 && r.step != config_.steps)
      save_checkpoint_now();
  }
  trace_window_->finish();
  evaluate_and_log();
  if (!quiet_) std::printf("%s\n", memory_report().c_str());
  if (!config_.out_dir.empty()) write_memory_file((fs::path(config_.out_dir) / "memory.json").string(), world_, memory_json());
  if (pipeline_ && !config_.pipeline_svg.empty() && (world_ == nullptr || world_->rank() == 0)) {
    std::ofstream svg(config_.pipeline_svg);
    svg << parallel::pipeline::timeline_svg(
        last_timeline_, "measured pipeline, last step: " + config_.schedule + ", pp " + std::to_string(config_.pp) + ", " +
                            std::to_string(config_.micro_batches) + " micro-batches; bubble " +
                            std::to_string(static_cast<int>(100 * last_timeline_.bubble_over_compute() + 0.5)) + "% of compute");
    check(svg.good(), "cannot write the pipeline picture to '", config_.pipeline_svg, "'");
    if (!quiet_) std::printf("wrote %s\n", config_.pipeline_svg.c_str());
  }
  if (!config_.out_dir.empty()) {
    const std::string path = save_checkpoint_now();
    if (!quiet_) std::printf("saved %s\n", path.c_str());
  }
  return val_loss;
}

}  // namespace loom::train
