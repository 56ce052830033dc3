// The training loop: deterministic batches, micro-batch gradient accumulation, global-norm
// clipping, AdamW/SGD with warm-up + cosine LR, NaN/inf guard, periodic validation,
// progress lines, metrics.jsonl and atomic checkpoints with exact resume. Everything
// parallel comes from the parallelize recipe (parallelize.hpp); the loop itself is the same
// for every layout, the serial run being the one-rank layout. Checkpoints are sharded (each
// rank writes its own pieces) or single files in the serial layout; either resumes under any
// layout.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loom/comm/process_group.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/lr_schedule.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/expert_parallel/expert_data_parallel.hpp"
#include "loom/parallel/pipeline/timeline.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/train/async_checkpoint.hpp"
#include "loom/train/config.hpp"
#include "loom/train/model_spec.hpp"
#include "loom/train/parallelize.hpp"
#include "loom/train/progress.hpp"
#include "loom/train/run_directory.hpp"
#include "loom/train/serial_state.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "loom/train/trace_window.hpp"

namespace loom::train {

// on_nan = "skip" ends the run at this many non-finite steps in a row.
inline constexpr int64_t kMaxStepsSkippedInARow = 10;

class Trainer {
 public:
  // Validates the config, reads the data, builds the model and optimizer, and resumes
  // from a checkpoint when config.resume says so. quiet: no progress lines. world: the
  // processes of the job (its size must equal dp x pp x tp); none: this process alone.
  explicit Trainer(TrainConfig config, bool quiet = false, comm::ProcessGroup* world = nullptr);

  // Runs until config.steps with logging, evaluation and checkpoints; returns the final val
  // loss. A stop signal (stop_request.hpp) ends it after the step every rank is at, with a
  // checkpoint saved and NaN returned.
  float run();
  // The signal that stopped run() early, or 0 when it ran to config.steps.
  int stopped_by() const { return stopped_by_; }
  // One optimizer step: compute_gradients() then apply_update(). Between the two the
  // gradients are the step's final (reduced) gradients before clipping, as gradient_dict()
  // gathers them, and the result's grad_norm is their norm: what equivalence tests compare.
  StepResult train_step();
  StepResult compute_gradients();
  // Clips to the result's grad_norm and steps the optimizer (or skips a non-finite step);
  // completes r with the step count and the tensor-parallel traffic.
  void apply_update(StepResult& r);
  float evaluate();
  // The family's test split (ModelSpec::test_batches), once; its metrics are the spec's last_metrics().
  float evaluate_test();
  // Collective: writes a checkpoint in config().checkpoint_format and returns its path
  // (single files: rank 0 writes, the other ranks wait and get ""); a checkpoint still being
  // written behind training is finished first.
  std::string save_checkpoint_now();
  // Collective: this step's checkpoint encoded in memory and handed to a writer thread
  // (async_checkpoint.hpp), once the write in flight, if any, has finished; training may step on.
  void save_checkpoint_async();
  // Collective: waits for the checkpoint being written behind training and returns it (nullopt
  // when none is in flight); its failure is a loom::Error on every rank.
  std::optional<AsyncCheckpointWriter::Written> finish_checkpoint_write();
  // This rank's pieces of the logical (serial-layout) model and optimizer state (serial_state.hpp).
  std::vector<StatePiece> local_state() { return serial_state_->pieces(); }
  // The tensors (full shapes) of the serial state this rank's part of the model has: what
  // a checkpoint must hold, checked on saving and resuming.
  StateShapes state_shapes() const { return serial_state_->shapes(); }
  // The layout a sharded checkpoint records.
  CheckpointLayout layout() const;
  std::string memory_report() const;
  // This rank's memory by category next to the formulas, as memory.json records it.
  nlohmann::json memory_json() const;
  plan::StateBytes state_formula() const;  // the ZeRO formula's model state of this rank
  // What ZeRO-2/3's units hold whole at once in a step (plan/zero_gathered.hpp); 0 without ZeRO.
  int64_t gathered_formula() const;

  // Collective: the serial layout's parameters and optimizer state, and gradients (what a
  // checkpoint holds and `loom verify` compares).
  std::map<std::string, Tensor> state_dict() { return serial_state_->state_dict(); }
  std::map<std::string, Tensor> gradient_dict() { return serial_state_->gradient_dict(); }
  // Collective: the inverse of state_dict(): every piece this rank holds set from the full
  // tensors ("model.<name>", "optim.<kind>.<name>"; all of them needed), as a checkpoint load
  // sets them (`loom verify --reanchor` sets the serial twin to the layout's state).
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // The GPT family's model, or this rank's first pipeline chunk of it.
  nn::GPT& model() { return dynamic_cast<nn::GPT&>(*p_.chunks.front()); }
  optim::Optimizer& optimizer() { return *optimizer_; }
  ModelSpec& spec() { return *spec_; }
  const TrainConfig& config() const { return config_; }
  int64_t step() const { return step_; }
  const Parallelized& parallelized() const { return p_; }
  parallel::DistributedDataParallel* ddp() { return dynamic_cast<parallel::DistributedDataParallel*>(p_.gradient_sync.get()); }
  parallel::ShardedDataParallel* sharded() const {
    if (const auto* experts = dynamic_cast<const parallel::ep::ExpertDataParallel*>(p_.gradient_sync.get()))
      return experts->sharded();  // the dense parameters' ZeRO
    return dynamic_cast<parallel::ShardedDataParallel*>(p_.gradient_sync.get());
  }

 private:
  void resume_from(const std::string& path);
  void resume_auto();  // the newest complete checkpoint of out_dir, or a fresh start
  // One step's final gradients on this rank; returns the mean loss of this
  // data-parallel rank's micro-batches (a pipeline's last stage computes it; all get it).
  float local_gradients();
  // What a training micro-batch's dropout masks are drawn from: the run's seed, this step and
  // the batch's first row in the step's whole batch.
  nn::DropoutRows dropout_rows(const data::Batch& batch) const;
  float pipeline_gradients();
  // The mean loss over count batches (forward only, any layout).
  float evaluate_on(const std::function<data::Batch(int64_t)>& batch_of, int64_t count);
  void write_memory_records();  // the memory report line and memory.json
  void stop_saved();            // run()'s end after a stop signal: checkpoint, memory, what happened
  // Collective under the single-file format (the gather); encoded into buffer when given.
  PreparedCheckpoint prepare_checkpoint(std::shared_ptr<std::string> buffer = nullptr);

  TrainConfig config_;
  std::unique_ptr<comm::ProcessGroup> own_world_;  // the single-process world when none is given
  comm::ProcessGroup& world_;
  std::unique_ptr<RunDirectory> run_directory_;  // locks out_dir; released last
  std::unique_ptr<ModelSpec> spec_;  // the model family: its data, model and loss
  Parallelized p_;
  comm::ProcessGroup &dp_;
  comm::ProcessGroup &batch_;  // the ranks sharing out the global batch: dp (x depth under tp_3d)
  comm::ProcessGroup &tp_;     // the model-parallel group within a replica: tp, or the whole 3D grid
  comm::ProcessGroup &pp_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<SerialState> serial_state_;
  parallel::pipeline::Timeline last_timeline_;  // the pipeline's last step, measured
  optim::LrSchedule lr_schedule_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<TraceWindow> trace_window_;
  int64_t step_ = 0;
  int64_t skipped_in_a_row_ = 0;  // on_nan = "skip": steps skipped since the last good one
  int stopped_by_ = 0;            // the signal run() stopped on, 0: none
  // Checkpoints written behind training; made at the first one. Last: it is destroyed first,
  // waiting for its write while everything that write reports to still exists.
  std::unique_ptr<AsyncCheckpointWriter> checkpoint_writer_;
  double checkpoint_encode_seconds_ = 0.0;  // the pause of the checkpoint in flight
  // What checkpoints written behind training are encoded into, one after another (held between
  // them: the peak holds it during a write anyway).
  std::shared_ptr<std::string> checkpoint_buffer_;
};

}  // namespace loom::train
