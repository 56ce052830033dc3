// The GPT family behind the model seam: text through a tokenizer into GPT-2 style models,
// split into pipeline stages by blocks (the token table tied to the LM head, copied on the
// last stage), the loss a softmax cross-entropy over the vocabulary (vocabulary-parallel
// under tensor parallelism).
#pragma once

#include <memory>

#include "loom/nn/gpt.hpp"
#include "loom/parallel/context_parallel/load_balance.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_cross_entropy.hpp"
#include "loom/train/model_spec.hpp"

namespace loom::train {

class GptSpec : public ModelSpec {
 public:
  // Reads the text; sets config.model.vocab_size from the tokenizer and, under tensor
  // parallelism, pads the vocabulary to a multiple of 64 x tp, so every rank's slice of the
  // embedding and of the logits has the same size (as Megatron-LM pads it).
  explicit GptSpec(TrainConfig& config);

  std::vector<std::unique_ptr<nn::Module>> build(const nn::LayerBuilder& layers, int64_t pp_rank) override;
  std::vector<nn::Module*> layers_of(nn::Module& chunk) override;
  nn::Parameter* tied_parameter(nn::Module& chunk) override;
  bool owns_tied_parameter(nn::Module& chunk) override;
  Shape stage_activation_shape() const override;
  void build_loss(comm::ProcessGroup& tp) override;
  float loss(Tensor& logits, const Tensor& targets, bool backward, float scale) override;
  void use_context_parallel(comm::ProcessGroup& cp, const std::string& split) override;
  data::Batch train_batch(int64_t step, int64_t m, int dp_rank) override;
  data::Batch eval_batch(int64_t i, int dp_rank) override;
  std::string data_identity() const override { return dataset_.tokenizer().spec(); }
  std::string describe() const override;
  StepWork step_work() const override;
  MemoryNeed memory_need() const override { return training_memory(config_); }
  int64_t activation_bytes(nn::Module& chunk) override;

 private:
  const TrainConfig& config_;
  data::TextDataset dataset_;
  std::unique_ptr<parallel::tp::VocabParallelCrossEntropy> tp_loss_;  // tp > 1
  // This rank's chunks of every sequence (cp > 1).
  data::Batch context_chunks(data::Batch batch) const;
  comm::ProcessGroup* cp_ = nullptr;  // cp > 1
  parallel::cp::Split cp_split_ = parallel::cp::Split::ZigZag;
};

}  // namespace loom::train
