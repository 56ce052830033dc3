#include "loom/train/gpt_spec.hpp"

#include "loom/error.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::train {

namespace {

nn::GPT& gpt(nn::Module& chunk) { return dynamic_cast<nn::GPT&>(chunk); }

}  // namespace

GptSpec::GptSpec(TrainConfig& config)
    : config_(config), dataset_(config.data, config.tokenizer, config.model.block_size, config.val_fraction) {
  config.model.vocab_size = dataset_.tokenizer().vocab_size();
  config.model.moe.micro_batches = config.micro_batches;  // the aux loss is averaged like the loss
  if (config.tp > 1 && config.model.padded_vocab_size == 0)
    config.model.padded_vocab_size = (config.model.vocab_size + 64 * config.tp - 1) / (64 * config.tp) * 64 * config.tp;
}

std::vector<std::unique_ptr<nn::Module>> GptSpec::build(const nn::LayerBuilder& layers, int64_t pp_rank) {
  const uint64_t seed = static_cast<uint64_t>(config_.seed);
  std::vector<std::unique_ptr<nn::Module>> chunks;
  if (config_.pp == 1) {
    chunks.push_back(std::make_unique<nn::GPT>(config_.model, seed, layers));
    return chunks;
  }
  const int64_t p = config_.pp, v = config_.chunks;
  const std::vector<nn::GPTStage> stages =
      parallel::pipeline::partition_stages(config_.model, p, v, config_.pipeline_layers());
  for (int64_t c = 0; c < v; ++c)
    chunks.push_back(std::make_unique<nn::GPT>(config_.model, seed, layers, stages[static_cast<size_t>(c * p + pp_rank)]));
  return chunks;
}

std::vector<nn::Module*> GptSpec::layers_of(nn::Module& chunk) {
  std::vector<nn::Module*> blocks;
  for (nn::Block* block : gpt(chunk).blocks()) blocks.push_back(block);
  return blocks;
}

nn::Parameter* GptSpec::tied_parameter(nn::Module& chunk) {
  nn::GPT& g = gpt(chunk);
  if (g.has_embedding()) return &g.embedding().wte();
  return g.has_head() ? &g.head_weight() : nullptr;
}

bool GptSpec::owns_tied_parameter(nn::Module& chunk) { return gpt(chunk).has_embedding(); }

Shape GptSpec::stage_activation_shape() const {
  const int64_t T = config_.model.block_size, t = config_.sequence_parallel ? config_.tp : 1;
  return Shape{config_.batch_size, T / t, config_.model.n_embd};
}

void GptSpec::build_loss(comm::ProcessGroup& tp) {
  if (tp.size() == 1) return;
  const int64_t Vl = config_.model.resolved_padded_vocab() / tp.size();
  tp_loss_ = std::make_unique<parallel::tp::VocabParallelCrossEntropy>(config_.model.vocab_size, tp.rank() * Vl, tp);
}

float GptSpec::loss(Tensor& logits, const Tensor& targets, bool backward, float scale) {
  trace::Span span("loss", backward ? "loss forward+backward" : "loss");
  if (tp_loss_) {
    const float loss = tp_loss_->forward(logits, targets);
    if (backward) tp_loss_->backward(logits, targets, scale);
    return loss;
  }
  const int64_t V = config_.model.vocab_size;
  const float loss = nn::cross_entropy_loss(logits, targets, V);
  if (backward) nn::cross_entropy_loss_backward(logits, targets, V, scale);
  return loss;
}

data::Batch GptSpec::train_batch(int64_t step, int64_t m, int dp_rank) {
  // This rank's B rows of global micro-batch m (B * dp rows).
  trace::Span load("data", "load batch");
  const int64_t B = config_.batch_size;
  return dataset_.batch(data::Split::Train, static_cast<uint64_t>(config_.seed), step, (m * config_.dp + dp_rank) * B, B,
                        config_.model.block_size);
}

data::Batch GptSpec::eval_batch(int64_t i, int dp_rank) {
  // A fixed seed and step = batch index: the same validation batches at every evaluation.
  const int64_t B = config_.batch_size;
  return dataset_.batch(data::Split::Val, 0, i, dp_rank * B, B, config_.model.block_size);
}

std::unique_ptr<ModelSpec> make_model_spec(TrainConfig& config) { return std::make_unique<GptSpec>(config); }

}  // namespace loom::train
