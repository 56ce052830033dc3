// The training loop: deterministic batches, micro-batch gradient accumulation, global-norm
// clipping, AdamW/SGD with warm-up + cosine LR, NaN/inf guard, periodic validation,
// progress lines, metrics.jsonl and atomic checkpoints with exact resume. With dp > 1 each
// rank takes its slice of every global micro-batch and DDP (zero = 0) or sharded data
// parallelism (ZeRO 1-3, HSDP) averages the gradients; rank 0 alone prints. Checkpoints
// are sharded (each rank writes its own pieces) or single files in the serial layout, and
// either resumes under any layout.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "loom/comm/device_mesh.hpp"
#include "loom/comm/process_group.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/lr_schedule.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/parallel/ddp.hpp"
#include "loom/parallel/pipeline/executor.hpp"
#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_cross_entropy.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/train/config.hpp"
#include "loom/train/metrics_log.hpp"
#include "loom/train/run_directory.hpp"
#include "loom/train/trace_window.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

struct StepResult {
  int64_t step = 0;  // the step just completed (1-based count of optimizer steps)
  float loss = 0.0f;
  float lr = 0.0f;
  double grad_norm = 0.0;
  bool skipped = false;  // non-finite loss or gradient with on_nan = "skip"
  // Tensor parallel: this rank's collectives on its tp group in the step (all blocking, so
  // their time is not hidden behind compute) and the bytes of the tensors they reduced.
  double tp_comm_seconds = 0.0;
  int64_t tp_comm_bytes = 0;
  // Pipeline: the measured idle time over compute time of the step, and the theory's (p-1)/(m v).
  double pipeline_bubble = -1.0;
  double pipeline_bubble_theory = -1.0;
};

class Trainer {
 public:
  // Validates the config, reads the data, builds the model and optimizer, and resumes
  // from a checkpoint when config.resume says so. quiet: no progress lines. world: the
  // processes of the job (required when dp x pp x tp > 1; its size must equal that product).
  explicit Trainer(TrainConfig config, bool quiet = false, comm::ProcessGroup* world = nullptr);

  // Runs until config.steps with logging, evaluation and checkpoints; returns the final val loss.
  float run();
  StepResult train_step();
  float evaluate();
  // Collective: writes a checkpoint in config().checkpoint_format and returns its path
  // (single files: rank 0 writes, the other ranks wait and get "").
  std::string save_checkpoint_now();
  // This rank's pieces of the logical (serial-layout) model and optimizer state, as views of
  // its storage, each marked owner on exactly one rank (trainer_state.cpp).
  std::vector<StatePiece> local_state();
  // The layout a sharded checkpoint records.
  CheckpointLayout layout() const;
  // "memory on rank 0: params 3.2 MiB (formula 3.2 MiB) | ...": the tracker's current bytes
  // of model state next to the ZeRO formula for this layout, and the peaks of the rest.
  std::string memory_report() const;
  // This rank's memory by category next to the formulas, as memory.json records it.
  nlohmann::json memory_json() const;
  plan::StateBytes state_formula() const;  // the ZeRO formula's model state of this rank

  // Collective: full copies of every parameter ("model.<name>") and optimizer state tensor
  // ("optim.<kind>.<name>"), gathered from the shards in sharded modes; what a checkpoint holds.
  std::map<std::string, Tensor> state_dict();
  // Collective: the averaged gradient of every parameter ("grad.<name>") after a step, in the
  // serial layout (what `loom verify` compares).
  std::map<std::string, Tensor> gradient_dict();

  // The model, or this rank's first pipeline chunk.
  nn::GPT& model() { return *chunks_.front(); }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const TrainConfig& config() const { return config_; }
  const data::TextDataset& dataset() const { return *dataset_; }
  int64_t step() const { return step_; }
  parallel::DistributedDataParallel* ddp() { return ddp_.get(); }
  parallel::ShardedDataParallel* sharded() { return sharded_.get(); }

 private:
  void setup_mesh();
  void setup_pipeline(const nn::LayerBuilder& layers);
  void setup_data_parallel();
  double global_grad_sum_squares();
  // The tensor-parallel split of a state tensor ("model.<param>", "optim.<kind>.<param>").
  nn::ShardSpec tensor_parallel_spec(const std::string& key);
  void resume_from(const std::string& path);
  void resume_auto();  // the newest complete checkpoint of out_dir, or a fresh start
  float forward_backward(const data::Batch& batch, float loss_scale);
  // The loss of logits against targets (vocabulary-parallel under tp); with backward, the
  // logits become dlogits of loss * scale.
  float loss_of(Tensor& logits, const Tensor& targets, bool backward, float scale);
  // One step's gradients, averaged over data parallelism; returns the mean loss of this
  // data-parallel rank's micro-batches.
  float local_gradients();
  float pipeline_gradients();
  // Collective: this rank's slices of model and optimizer tensors gathered across tensor
  // parallelism and the pipeline into full tensors.
  std::map<std::string, Tensor> serial_layout(std::map<std::string, Tensor> local);
  // Pipeline: every stage's tensors gathered onto pp rank 0 (collective over the pipeline).
  std::map<std::string, Tensor> gather_pipeline(std::map<std::string, Tensor> local);
  // The matmul peak of one rank (its threads), measured by rank 0 alone and shared.
  double measure_peak_gflops();
  // The share of its threads' cores a rank gets: below 1 when the node's ranks x threads
  // exceed its cores.
  double core_share() const;
  // keep: a logged step (a lasting line and a metrics record); otherwise only the live line.
  void log_progress(const StepResult& r, double step_seconds, bool keep);

  TrainConfig config_;
  bool quiet_;
  std::unique_ptr<RunDirectory> run_directory_;  // locks out_dir; released last
  std::unique_ptr<data::TextDataset> dataset_;
  std::unique_ptr<nn::Module> model_;  // the GPT, or this rank's pipeline chunks under one module
  std::vector<nn::GPT*> chunks_;       // the GPT, or this rank's chunks in virtual-stage order
  std::unique_ptr<optim::Optimizer> optimizer_;
  comm::ProcessGroup* world_ = nullptr;
  std::unique_ptr<comm::DeviceMesh> mesh_;  // when tp or pp > 1
  comm::ProcessGroup* pp_group_ = nullptr;  // this rank's pipeline (pp > 1)
  std::unique_ptr<comm::ProcessGroup> embedding_group_;  // the first and last stage: the tied token table
  std::unique_ptr<parallel::pipeline::PipelineExecutor> pipeline_;
  std::vector<parallel::pipeline::Action> pipeline_actions_;  // this rank's part of the schedule
  parallel::pipeline::Timeline last_timeline_;                // the last step's, measured
  comm::ProcessGroup* dp_group_ = nullptr;   // this rank's data-parallel group (MPI runs)
  comm::ProcessGroup* tp_group_ = nullptr;   // this rank's tensor-parallel group
  std::unique_ptr<parallel::tp::TensorParallelLayers> tp_layers_;     // tp > 1
  std::unique_ptr<parallel::tp::VocabParallelCrossEntropy> tp_loss_;  // tp > 1
  std::unique_ptr<parallel::tp::ReplicatedGradientSum> replicated_sum_;  // sequence parallel
  std::map<std::string, nn::ShardSpec> param_specs_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<comm::ProcessGroup> shard_group_, replicate_group_;  // sharded modes
  std::unique_ptr<parallel::ShardedDataParallel> sharded_;
  int dp_rank_ = 0;
  optim::LrSchedule schedule_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<TraceWindow> trace_window_;
  int64_t step_ = 0;
  double peak_gflops_ = 0.0;
  bool live_progress_ = false;  // stdout is a terminal
  double elapsed_train_seconds_ = 0.0;
  int64_t steps_timed_ = 0;
};

}  // namespace loom::train
