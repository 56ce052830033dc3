#include "loom/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/agreed_error.hpp"
#include "loom/comm/core_placement.hpp"
#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/clip.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/parallel/pipeline/timeline_svg.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/memory_file.hpp"
#include "loom/train/model_identity.hpp"
#include "loom/train/moe_metrics.hpp"
#include "loom/train/reshard.hpp"
#include "loom/train/resume_auto.hpp"
#include "loom/train/stop_request.hpp"

namespace loom::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// What to change when mpirun started another number of processes than the layout's: a
// first multi-rank run usually forgets the degrees (mpirun -np 2 loom train, no --dp 2).
std::string world_size_remedy(int64_t ranks, int64_t world_size) {
  const std::string n = std::to_string(world_size);
  return " (the job has " + n + " processes: give degrees whose product is " + n +
         (ranks == 1 ? ", e.g. --dp " + n + ", or run it without mpirun)"
                     : ", or start " + std::to_string(ranks) + " with mpirun -np " + std::to_string(ranks) + ")");
}

// Validates the config against the world and sets the kernels' threads before anything runs.
TrainConfig started(TrainConfig config, comm::ProcessGroup* world) {
  config.validate();
  const int64_t ranks = config.world_ranks(), world_size = world != nullptr ? world->size() : 1;
  const auto wrong_size = [&]() {
    return "layout dp(" + std::to_string(config.dp) + ") x pp(" + std::to_string(config.pp) + ") x cp(" +
           std::to_string(config.cp) + ") x tp(" + std::to_string(config.tp) + ")" +
           (config.tp_3d_on() ? " x tp_3d(" + config.tp_3d + ")" : "") + " = " + std::to_string(ranks) +
           " != world size " + std::to_string(world_size) +
           (world == nullptr ? " (start it with mpirun -np N loom train ...)" : world_size_remedy(ranks, world_size));
  };
  if (world != nullptr && world->size() > 1) {
    // Ranks whose layouts are all one size refuse a wrong one together, so the job ends without
    // MPI_Abort's noise; ranks that differ are named by check_ranks_agree, the next collective.
    float size_range[2] = {static_cast<float>(ranks), -static_cast<float>(ranks)};
    world->all_reduce(size_range, 2, comm::ReduceOp::Max);
    if (size_range[0] == -size_range[1]) check_agreed(ranks == world_size, world->size(), wrong_size());
  } else {
    check(ranks == world_size, wrong_size());
  }
  kernels::set_num_threads(config.threads);  // 0: the cores this process may run on
  // threads 0 under mpirun: the node's cores shared among the job's ranks on it (never more
  // than a rank bound to fewer may use). Every rank taking them all runs each core several
  // times over, and the ranks' compute threads wait on each other (3 ranks on 2 cores: 1.7 s
  // a step instead of 10 ms).
  if (config.threads == 0 && world != nullptr && world->ranks_on_node() > 1)
    kernels::set_num_threads(std::max<int64_t>(
        1, std::min<int64_t>(kernels::num_threads(), kernels::cpu_count() / world->ranks_on_node())));
  return config;
}

}  // namespace

Trainer::Trainer(TrainConfig config, bool quiet, comm::ProcessGroup* world)
    : config_(started(std::move(config), world)),
      own_world_(world == nullptr ? comm::ProcessGroup::single_process() : nullptr),
      world_(world != nullptr ? *world : *own_world_),
      spec_(make_model_spec(config_)),
      p_(parallelize(config_, *spec_, world_)),
      dp_(p_.group("dp")),
      batch_(p_.group("batch")),
      tp_(p_.group("tensor")),
      pp_(p_.group("pp")) {
  progress_ = std::make_unique<Progress>(config_, world_, quiet, spec_->step_work());
  if (!p_.placement.empty()) progress_->say(p_.placement);
  for (const std::string& note : p_.notes) progress_->say(note);
  // Before anything is read or written in out_dir: one run owns it.
  run_directory_ = std::make_unique<RunDirectory>(config_, world_, progress_->quiet());
  const std::vector<nn::Parameter*> stepped = p_.gradient_sync->optimizer_parameters();
  if (config_.optimizer == "adamw") {
    optimizer_ = std::make_unique<optim::AdamW>(
        stepped, optim::AdamWConfig{static_cast<float>(config_.beta1), static_cast<float>(config_.beta2),
                                    static_cast<float>(config_.eps), static_cast<float>(config_.weight_decay)});
  } else {
    optimizer_ = std::make_unique<optim::SGD>(
        stepped, optim::SGDConfig{static_cast<float>(config_.momentum), static_cast<float>(config_.weight_decay)});
  }
  serial_state_ = std::make_unique<SerialState>(*p_.model, *optimizer_, sharded(), dp_, tp_, pp_, p_.group("ep"),
                                                config_.shard_size(), p_.tied_copy, &p_.group("cp"));
  lr_schedule_ = optim::LrSchedule{static_cast<float>(config_.lr), static_cast<float>(config_.min_lr),
                                   config_.warmup_steps, config_.decay_steps > 0 ? config_.decay_steps : config_.steps};
  if (config_.resume == "auto") {
    resume_auto();
  } else if (!config_.resume.empty()) {
    resume_from(resolve_checkpoint_path(config_.resume == "latest" ? config_.out_dir : config_.resume));
  }
  run_directory_->start();
  progress_->open_metrics();
  trace_window_ = std::make_unique<TraceWindow>(config_, world_);
}

CheckpointLayout Trainer::layout() const {
  return {config_.dp, config_.pp, config_.tp, config_.zero, config_.chunks, config_.hsdp_shard, config_.sequence_parallel,
          config_.tp_3d};
}

void Trainer::resume_from(const std::string& path) {
  // Any checkpoint, whatever layout wrote it: each rank fills its own pieces (reshard.hpp).
  // A rank that cannot read its pieces fails the resume on every rank.
  CheckpointInfo info;
  check_resume_model(path, config_, spec_->data_identity(), world_);
  // What the pieces would not load would keep its initial values without a word: checked first.
  check_owners_tile_state(local_state(), serial_state_->shapes(), "resuming from '" + path + "'", world_);
  on_every_rank(world_, [&] {
    info = load_state(path, local_state(), config_.optimizer, serial_state_->shapes(), serial_state_->padded_rows());
  });
  p_.gradient_sync->after_optimizer_step();  // ZeRO: the loaded shards reach the model's parameters
  optimizer_->set_steps_taken(info.optimizer_steps);
  check(info.tokenizer_spec == spec_->data_identity(), "checkpoint '", path,
        "' was trained with a different tokenizer/vocabulary than '", config_.data, "'");
  step_ = info.step;
  const std::string repadded = token_table_repadding(info, config_);
  progress_->say("resumed from " + path + " at step " + std::to_string(step_) + (repadded.empty() ? "" : ": " + repadded));
}

void Trainer::load_state_dict(const std::map<std::string, Tensor>& state) {
  kernels::weights_overwritten();  // masters change outside the optimizer: no bf16 copy stays current
  for (const StatePiece& piece : local_state()) {
    const auto it = state.find(piece.name);
    check(it != state.end(), "load_state_dict: no tensor '", piece.name, "'");
    check(it->second.shape() == piece.full_shape, "load_state_dict: '", piece.name, "' is ", shape_str(it->second.shape()),
          ", the model expects ", shape_str(piece.full_shape));
    copy_overlap(piece.full_shape, whole_piece(piece.full_shape), it->second.f32(), piece.layout, piece.data.f32());
  }
  p_.gradient_sync->after_optimizer_step();  // ZeRO: the loaded shards reach the model's parameters
}

void Trainer::resume_auto() {
  const std::string path =
      choose_auto_resume(local_state(), config_, spec_->data_identity(), world_, !progress_->quiet(), state_shapes(),
                         serial_state_->padded_rows());
  if (!path.empty()) resume_from(path);
}

nn::DropoutRows Trainer::dropout_rows(const data::Batch& batch) const {
  return {static_cast<uint64_t>(config_.seed), static_cast<uint64_t>(step_), batch.first_row};
}

float Trainer::local_gradients() {
  const int64_t M = config_.micro_batches;
  double loss_sum = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    trace::set_micro_batch(m);
    const data::Batch batch = spec_->train_batch(step_, m, batch_.rank());
    p_.finalizer->before_backward(m == M - 1);  // communicate once, after the last micro-batch
    MemoryScope scope(MemoryCategory::Activations);
    nn::Context ctx;
    ctx.set_dropout_rows(dropout_rows(batch));
    Tensor logits = p_.chunks.front()->forward(batch.inputs, ctx);  // (B, T, Vp), or (B, T, Vp/tp)
    loss_sum += spec_->loss(logits, batch.targets, /*backward=*/true, 1.0f / static_cast<float>(M));
    p_.chunks.front()->backward(logits, ctx);  // logits now hold dlogits
  }
  trace::set_micro_batch(-1);
  p_.finalizer->finish();
  return static_cast<float>(loss_sum / static_cast<double>(M));
}

float Trainer::pipeline_gradients() {
  const int64_t M = config_.micro_batches;
  std::vector<data::Batch> batches;  // this rank's rows of every micro-batch (token ids: small)
  for (int64_t m = 0; m < M; ++m) batches.push_back(spec_->train_batch(step_, m, batch_.rank()));
  const double loss_sum = p_.pipeline->run(
      p_.pipeline_actions, [&](int64_t mb) { return batches[mb].inputs; },
      [&](Tensor& logits, int64_t mb) {
        return spec_->loss(logits, batches[mb].targets, /*backward=*/true, 1.0f / static_cast<float>(M));
      },
      [&](bool last) { p_.finalizer->before_backward(last); },
      [&](nn::Context& ctx, int64_t mb) { ctx.set_dropout_rows(dropout_rows(batches[mb])); });
  p_.finalizer->finish();
  float loss = static_cast<float>(loss_sum / static_cast<double>(M));  // the last stage's; 0 elsewhere
  pp_.all_reduce(&loss, 1, comm::ReduceOp::Sum);
  return loss;
}

StepResult Trainer::train_step() {
  trace::Span span("step", "step");
  span.arg("step", step_ + 1);
  StepResult r = compute_gradients();
  apply_update(r);
  return r;
}

StepResult Trainer::compute_gradients() {
  // This run's precision for its GEMMs (several trainers may share a process in tests); the
  // weights may have changed since the last step, so their bf16 copies are converted anew.
  const kernels::PrecisionScope precision(kernels::parse_precision(config_.precision));
  kernels::new_weights_generation();
  StepResult r;
  r.lr = lr_schedule_.at(step_);
  for (comm::ProcessGroup* g : p_.tensor_comm_groups) g->reset_stats();
  if (p_.grid) p_.grid->take_waited_seconds();  // not the evaluation's
  if (p_.cp_layers) p_.cp_layers->stats() = {};
  if (config_.model.moe.enabled()) nn::take_moe_stats(*p_.model);  // not the evaluation's forwards
  optimizer_->zero_grad();
  p_.gradient_sync->zero_grad();
  r.loss = p_.pipeline ? pipeline_gradients() : local_gradients();
  r.metrics = spec_->last_metrics();
  if (p_.pipeline) {
    last_timeline_ = p_.pipeline->gather_timeline();
    r.pipeline_bubble = last_timeline_.bubble_over_compute();
    r.pipeline_bubble_theory = parallel::pipeline::theoretical_bubble(
        static_cast<int>(config_.pp), static_cast<int>(config_.micro_batches), static_cast<int>(config_.chunks));
  }
  if (p_.cp_layers) {
    const parallel::cp::RingStats& ring = p_.cp_layers->stats();
    r.cp_compute_seconds = ring.compute_seconds;
    r.cp_wait_seconds = ring.wait_seconds;
    r.cp_bytes = ring.bytes_sent;
    r.cp_link_seconds = ring.link_seconds;
    r.cp_link_exposed_seconds = ring.link_exposed_seconds;
  }
  batch_.all_reduce(&r.loss, 1, comm::ReduceOp::Avg);  // the global batch's mean
  if (config_.model.moe.enabled()) r.moe = gather_moe_stats(*p_.model, config_.model.moe.experts, p_.moe_stat_groups);
  {
    trace::Span norm_span("optimizer", "grad norm");
    r.grad_norm = std::sqrt(p_.finalizer->grad_sum_squares());
  }
  return r;
}

void Trainer::apply_update(StepResult& r) {
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    check(config_.on_nan == "skip", "non-finite ", std::isfinite(r.loss) ? "gradient norm" : "loss", " at step ",
          step_ + 1, " (loss ", r.loss, ", grad norm ", r.grad_norm,
          "); lower lr or set on_nan = \"skip\" to skip such steps");
    r.skipped = true;
    // Skipping is for a rare bad batch: a model that only makes non-finite steps has diverged,
    // and would otherwise "finish" with the weights of its last good step and a NaN loss.
    ++skipped_in_a_row_;
    check(skipped_in_a_row_ < kMaxStepsSkippedInARow, "on_nan = \"skip\": ", skipped_in_a_row_,
          " steps in a row (", step_ + 2 - skipped_in_a_row_, "-", step_ + 1,
          ") had a non-finite loss or gradient norm: the model has diverged; lower lr and start again, or resume "
          "from a checkpoint before it diverged");
  } else {
    skipped_in_a_row_ = 0;
    trace::Span step_span("optimizer", "optimizer step");
    optim::clip_grads_to_norm(optimizer_->params(), r.grad_norm, static_cast<float>(config_.grad_clip));
    optimizer_->step(r.lr);
    p_.gradient_sync->after_optimizer_step();
  }
  r.step = ++step_;
  r.tp_comm_seconds = 0;
  r.tp_comm_bytes = 0;
  double waited_s = 0;  // 1D tp: what the layers waited for their group's collectives
  for (comm::ProcessGroup* g : p_.tensor_comm_groups) {
    const comm::CommStats s = g->stats();
    r.tp_comm_seconds += s.seconds;
    r.tp_comm_bytes += s.bytes;
    waited_s += s.waited_seconds;
  }
  if (p_.grid)  // the grid's collectives, and a mixture of experts' gathers over its plane (blocking)
    r.tp_comm_exposed_seconds = p_.grid->take_waited_seconds() + p_.group("plane").stats().waited_seconds;
  else if (config_.tp > 1)
    r.tp_comm_exposed_seconds = waited_s;
}

float Trainer::evaluate() {
  // eval_batches global batches, each the micro-batches a step draws (ModelSpec::eval_batch).
  return evaluate_on([&](int64_t i) { return spec_->eval_batch(i, batch_.rank()); },
                     config_.eval_batches * config_.micro_batches);
}

float Trainer::evaluate_test() {
  return evaluate_on([&](int64_t i) { return spec_->test_batch(i, batch_.rank()); }, spec_->test_batches());
}

float Trainer::evaluate_on(const std::function<data::Batch(int64_t)>& batch_of, int64_t count) {
  trace::Span span("eval", "evaluate");
  const kernels::PrecisionScope precision(kernels::parse_precision(config_.precision));
  kernels::new_weights_generation();
  MemoryScope scope(MemoryCategory::Activations);
  std::vector<data::Batch> batches;
  for (int64_t i = 0; i < count; ++i) batches.push_back(batch_of(i));
  auto loss = [&](Tensor& logits, int64_t i) { return spec_->loss(logits, batches[i].targets, false, 1.0f); };
  double sum = 0.0;
  if (p_.pipeline) {
    float last_stage = static_cast<float>(
        p_.pipeline->run_forward([&](int64_t i) { return batches[i].inputs; }, loss, count));
    pp_.all_reduce(&last_stage, 1, comm::ReduceOp::Sum);
    sum = last_stage;
  } else {
    for (int64_t i = 0; i < count; ++i) {
      nn::Context ctx;
      Tensor logits = p_.chunks.front()->forward(batches[i].inputs, ctx);
      sum += loss(logits, i);
    }
  }
  p_.gradient_sync->after_evaluation();  // no backward released what the forwards gathered
  float mean = static_cast<float>(sum / static_cast<double>(count));
  batch_.all_reduce(&mean, 1, comm::ReduceOp::Avg);
  return mean;
}

PreparedCheckpoint Trainer::prepare_checkpoint(std::shared_ptr<std::string> buffer) {
  const CheckpointInfo info{step_, to_toml(config_), spec_->data_identity(), config_.optimizer,
                            optimizer_->steps_taken()};
  const bool sharded_format =
      config_.checkpoint_format == "sharded" || (config_.checkpoint_format == "auto" && world_.size() > 1);
  if (sharded_format)
    return prepare_sharded_checkpoint(config_.out_dir, local_state(), serial_state_->shapes(), info, layout(),
                                      config_.keep_checkpoints, std::move(buffer));
  // Single file: the serial layout gathered (collective), rank 0 writes. "" on other ranks:
  // rank 0's file, which this rank may not even see.
  return prepare_single_checkpoint(config_.out_dir, state_dict(), serial_state_->shapes(), info,
                                   config_.keep_checkpoints, world_.rank(), std::move(buffer));
}

std::string Trainer::save_checkpoint_now() {
  finish_checkpoint_write();
  trace::Span span("checkpoint", "save checkpoint");
  return prepare_checkpoint().write(world_);
}

void Trainer::save_checkpoint_async() {
  finish_checkpoint_write();  // one write in flight at a time
  if (!checkpoint_writer_) checkpoint_writer_ = std::make_unique<AsyncCheckpointWriter>(world_);
  // Each checkpoint encoded into the same buffer: the next copies into pages already mapped (a
  // first copy of a GB into fresh memory paid 1.2-1.7 s on the 2-core VM).
  if (!checkpoint_buffer_) checkpoint_buffer_ = std::make_shared<std::string>();
  const auto t0 = Clock::now();
  {
    trace::Span span("checkpoint", "encode checkpoint");
    checkpoint_writer_->start(prepare_checkpoint(checkpoint_buffer_));
  }
  checkpoint_encode_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

std::optional<AsyncCheckpointWriter::Written> Trainer::finish_checkpoint_write() {
  if (!checkpoint_writer_ || !checkpoint_writer_->in_flight()) return std::nullopt;
  const std::optional<AsyncCheckpointWriter::Written> w = checkpoint_writer_->finish();
  char seconds[96];
  std::snprintf(seconds, sizeof seconds, "%.2f s (training paused %.2f s to encode it)", w->seconds,
                checkpoint_encode_seconds_);
  if (!w->path.empty())
    progress_->say("checkpoint of step " + std::to_string(w->step) + " written behind training in " + seconds + ": " +
                   w->path);
  return w;
}

std::string Trainer::memory_report() const { return train::memory_report(world_.rank(), state_formula(), gathered_formula()); }

// This rank's: a pipeline's stages hold different units.
int64_t Trainer::gathered_formula() const {
  return sharded() ? static_cast<int64_t>(rank_training_memory(config_, pp_.rank()).gathered) : 0;
}

plan::StateBytes Trainer::state_formula() const {
  const int64_t optimizer_bytes = config_.optimizer == "adamw" ? 8 : 4;
  const bool bf16 = config_.precision == "bf16";
  // Under ep (or DDP) this rank's experts stay whole, outside ZeRO (ExpertDataParallel); without
  // ep they carry no expert shard spec, only their module's name (nn::MoE's "experts").
  int64_t params = 0, experts = 0, expert_copies = 0;
  int64_t fp32_read = 0;  // the parameters that keep an fp32 value beside the bf16 copy under ZeRO-1/2
  int64_t kept = 0;       // those with no bf16 copy at all (a router's weight)
  int64_t gemm_free = 0;  // of fp32_read, those no GEMM reads: no bf16 copy under DDP
  for (const nn::Parameter* q : p_.model->parameters()) {
    const bool expert = parallel::ep::is_expert_parameter(*q) || q->name().find(".experts.") != std::string::npos;
    if ((config_.ep > 1 || config_.zero == 0) && expert) {
      experts += q->numel();
      if (q->read_by_gemms()) expert_copies += q->numel();  // a weight, GEMM-read in bf16; a bias gets no copy
      continue;
    }
    params += q->numel();
    if (q->kept_in_fp32()) kept += q->numel();
    else if (!q->read_only_by_gemms()) fp32_read += q->numel();
    if (!q->kept_in_fp32() && !q->read_by_gemms()) gemm_free += q->numel();
  }
  const plan::StateBytes dense =
      bf16 ? plan::mixed_precision_state_bytes(params, fp32_read, static_cast<int>(config_.shard_size()),
                                               static_cast<int>(config_.zero), optimizer_bytes, kept, gemm_free)
           : plan::model_state_bytes(params, static_cast<int>(config_.shard_size()), static_cast<int>(config_.zero),
                                     optimizer_bytes);
  const plan::StateBytes whole = plan::unsharded_state_bytes(experts, bf16 ? expert_copies : 0, optimizer_bytes);
  return {dense.params + whole.params, dense.grads + whole.grads, dense.optimizer + whole.optimizer};
}

nlohmann::json Trainer::memory_json() const {
  // Activations: the family's formula for one micro-batch through a chunk x the (micro-batch,
  // chunk) pairs a pipeline schedule holds at once (1 without a pipeline).
  // A run resumed with nothing to train has no step's timeline: its schedule says the same.
  int64_t in_flight = 1;
  if (p_.pipeline)
    in_flight = last_timeline_.peak_activations.empty()
                    ? parallel::pipeline::peak_held_bytes(p_.pipeline_actions, std::vector<int64_t>(p_.chunks.size(), 1))
                    : last_timeline_.peak_activations.at(static_cast<size_t>(pp_.rank()));
  const int64_t activations = spec_->activation_bytes(*p_.chunks.front()) * in_flight;
  const ModelSpec::DataBytes data = spec_->data_bytes();
  nlohmann::json record = memory_record(world_.rank(), rank_name(config_, world_.rank()), state_formula(), activations,
                                        data.predicted, data.held, gathered_formula());
  record["cpus"] = comm::allowed_cpus();  // where the rank could run: one CPU when pinned
  return record;
}

void Trainer::write_memory_records() {
  progress_->say(memory_report());
  if (!config_.out_dir.empty()) write_memory_file((fs::path(config_.out_dir) / "memory.json").string(), world_, memory_json());
}

void Trainer::stop_saved() {
  // No validation: a scheduler's SIGTERM leaves seconds before its SIGKILL; the checkpoint
  // is what must make it to disk.
  std::string saved = "nothing saved (the run has no out_dir)";
  if (!config_.out_dir.empty()) {
    const std::string path = save_checkpoint_now();
    saved = "saved " + path + "; the same command with --resume latest (or auto) continues it";
  }
  write_memory_records();
  progress_->say("stopped by " + signal_name(stopped_by_) + " after step " + std::to_string(step_) + " of " +
                 std::to_string(config_.steps) + ": " + saved);
}

float Trainer::run() {
  progress_->measure_peak();
  char line[128];
  std::snprintf(line, sizeof line, " | %d threads, %s matmul peak %.0f GFLOP/s", kernels::num_threads(),
                config_.precision.c_str(), progress_->peak_gflops());
  progress_->say("model: " + spec_->describe() + line);
  if (config_.precision == "bf16")
    if (const std::string warning = kernels::bf16_speed_warning(); !warning.empty()) progress_->say(warning);
  const int64_t first_step = step_;
  progress_->run_starts(step_);
  if (step_ >= config_.steps && step_ > 0)
    progress_->say("nothing to train: resumed at step " + std::to_string(step_) + ", at or past steps = " +
                   std::to_string(config_.steps) + " (raise --steps to train on)");
  float val_loss = NAN;
  auto evaluate_and_log = [&]() {
    val_loss = evaluate();
    progress_->validation(step_, val_loss, spec_->last_metrics());
  };
  StopRequest stop_request(world_);  // Ctrl-C, SIGTERM, SIGUSR1: stop after the step, saved
  while (step_ < config_.steps) {
    const auto t0 = Clock::now();
    trace_window_->before_step(step_ + 1);
    const StepResult r = train_step();
    trace_window_->after_step(r.step);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    // Also agreed: whether the checkpoint written behind training has ended on every rank, so
    // every rank finishes it (or raises its error) after the same step.
    bool write_ended = false;
    stopped_by_ = stop_request.agreed_signal(checkpoint_writer_ && checkpoint_writer_->done_here(), write_ended);
    if (write_ended) finish_checkpoint_write();
    if (r.step == config_.steps) stopped_by_ = 0;  // a stop at the last step: the run's end saves it anyway
    progress_->step(r, dt, r.step % config_.log_every == 0 || r.step == 1 || r.step == config_.steps || stopped_by_ != 0,
                    *p_.gradient_sync);
    if (stopped_by_ != 0) break;
    if (config_.eval_every > 0 && r.step % config_.eval_every == 0 && r.step != config_.steps) evaluate_and_log();
    if (config_.checkpoint_every > 0 && r.step % config_.checkpoint_every == 0 && r.step != config_.steps) {
      if (config_.checkpoint_async)
        save_checkpoint_async();
      else
        save_checkpoint_now();
    }
  }
  trace_window_->finish();
  if (stopped_by_ != 0) {
    stop_saved();
    return val_loss;
  }
  evaluate_and_log();
  if (spec_->test_batches() > 0) {
    const float test_loss = evaluate_test();
    progress_->validation(step_, test_loss, spec_->last_metrics(), "test");
  }
  // The checkpoint first: a report that cannot be written must not lose the run's weights.
  // A run that trained nothing has nothing new to save.
  if (!config_.out_dir.empty() && (step_ > first_step || step_ == 0)) {
    const std::string path = save_checkpoint_now();
    progress_->say("saved " + path);
  }
  write_memory_records();
  if (p_.pipeline && !config_.pipeline_svg.empty() && world_.rank() == 0) {
    std::ofstream svg(config_.pipeline_svg);
    svg << parallel::pipeline::timeline_svg(
        last_timeline_, "measured pipeline, last step: " + (config_.schedule_file.empty() ? config_.schedule : config_.schedule_file) + ", pp " + std::to_string(config_.pp) + ", " +
                            std::to_string(config_.micro_batches) + " micro-batches; bubble " +
                            std::to_string(static_cast<int>(100 * last_timeline_.bubble_over_compute() + 0.5)) + "% of compute");
    check(svg.good(), "cannot write the pipeline picture to '", config_.pipeline_svg, "'");
    progress_->say("wrote " + config_.pipeline_svg);
  }
  progress_->finished(config_.family);
  return val_loss;
}

}  // namespace loom::train
