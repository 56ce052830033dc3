// The model seam: what the parallelize recipe and the trainer need of a model family, so
// every family shares `loom train`, `loom verify`, checkpoints, metrics and the report
// without a trainer of its own (as torchtitan's TrainSpec). A spec owns the family's data:
// it reads it, completes the config from it (a tokenizer's vocabulary), builds this rank's
// part of the model through the layer builder the recipe gives it, and computes the loss.
// The GPT (gpt_spec.hpp) is the first family, the GCN (gcn_spec.hpp) the second;
// make_model_spec builds the family the config's `model` key names.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/error.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/nn/module.hpp"
#include "loom/train/config.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

// What one optimizer step processes, for the progress line and metrics.jsonl: the GPT's
// tokens of the global batch, a GCN's edges of the graph; and the step's training FLOPs (MFU).
struct StepWork {
  std::string unit;         // "tok": the progress line prints "tok/s"
  std::string metrics_key;  // "tokens_per_s"
  double units = 0.0;
  double flops = 0.0;
};

// A number the family reports beside the loss ("train_acc" 0.92).
struct Metric {
  std::string name;
  double value = 0.0;
};

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;

  // This rank's part of the model built with `layers` (serial or tensor-parallel): the whole
  // model without a pipeline, else the chunks of pipeline rank pp_rank in virtual-stage order
  // (virtual stages pp_rank, pp_rank + pp, ...).
  virtual std::vector<std::unique_ptr<nn::Module>> build(const nn::LayerBuilder& layers, int64_t pp_rank) = 0;
  // The modules of a chunk that form one FSDP unit each (and one activation-memory layer), in
  // forward order.
  virtual std::vector<nn::Module*> layers_of(nn::Module& chunk) = 0;
  // A parameter that two pipeline stages each hold a copy of (the GPT's token table, tied to
  // its LM head): this chunk's copy or null, and whether that copy is the owning one (the
  // copies' gradients are summed; the owner's counts in the norm and in checkpoints).
  virtual nn::Parameter* tied_parameter(nn::Module& chunk) = 0;
  virtual bool owns_tied_parameter(nn::Module& chunk) = 0;
  // What one micro-batch sends between pipeline stages (sequence parallel: tp-split).
  virtual Shape stage_activation_shape() const = 0;

  // The loss over this rank's outputs; tp: the group the outputs are split over.
  virtual void build_loss(comm::ProcessGroup& tp) = 0;
  // With backward, outputs become d(loss * scale)/d(outputs) in place.
  virtual float loss(Tensor& outputs, const Tensor& targets, bool backward, float scale) = 0;
  // Context parallelism: every sequence split over the ranks of `cp` (their chunks in
  // train_batch and eval_batch), the loss averaged over them so each reports the whole
  // sequence's. A family whose input has no sequence to split refuses cp > 1.
  virtual void use_context_parallel(comm::ProcessGroup& cp, const std::string& split) {
    check(cp.size() == 1, "this model family does not support context parallelism (cp = ", cp.size(), ")");
    (void)split;
  }
  // This data-parallel rank's rows of training micro-batch m of a step, and of validation
  // micro-batch i (micro-batch i % micro_batches of validation batch i / micro_batches, the
  // same at every evaluation); every layout reads the same global batch.
  virtual data::Batch train_batch(int64_t step, int64_t m, int dp_rank) = 0;
  virtual data::Batch eval_batch(int64_t i, int dp_rank) = 0;
  // The data's identity as checkpoints record it (the tokenizer's spec).
  virtual std::string data_identity() const = 0;

  // The model in one line for the start of a run: its parameters and sizes.
  virtual std::string describe() const = 0;
  virtual StepWork step_work() const = 0;
  // Predicted bytes per rank (checked against the machine before the model is built), and the
  // activations of one micro-batch through `chunk` (memory.json's formula).
  virtual MemoryNeed memory_need() const = 0;
  virtual int64_t activation_bytes(nn::Module& chunk) = 0;
  // The input data this rank holds beside its batches (a GCN's graph: features, Â, per-node
  // arrays), predicted as the memory check counts it for this rank and measured after build:
  // memory.json's "formula" "data" and "data_held". None for the GPT, which reads its batches
  // from the dataset as it goes.
  struct DataBytes {
    int64_t predicted = 0, held = 0;
  };
  virtual DataBytes data_bytes() const { return {}; }
  // What the last loss() measured besides the loss, named by the split of the batch it was
  // given ("train_acc", "val_acc"); none for the GPT.
  virtual std::vector<Metric> last_metrics() const { return {}; }
  // A held-out test split evaluated once after training (none for the GPT).
  virtual int64_t test_batches() const { return 0; }
  virtual data::Batch test_batch(int64_t i, int dp_rank);
};

// Reads config.data for the family and completes config from it.
std::unique_ptr<ModelSpec> make_model_spec(TrainConfig& config);

}  // namespace loom::train
