#include "loom/train/gpt_spec.hpp"

#include <cstdio>

#include "loom/error.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::train {

namespace {

nn::GPT& gpt(nn::Module& chunk) { return dynamic_cast<nn::GPT&>(chunk); }

}  // namespace

GptSpec::GptSpec(TrainConfig& config)
    : config_(config), dataset_(config.data, config.tokenizer, config.model.block_size, config.val_fraction, config.tokenizer_dir) {
  check(config.split.empty(), "split ('", config.split, "') picks a graph's train, validation and test nodes; a GPT "
        "holds out val_fraction of its text instead");
  config.model.vocab_size = dataset_.tokenizer().vocab_size();
  config.model.moe.micro_batches = config.micro_batches;  // the aux loss is averaged like the loss
  if (config.tp > 1 && config.model.padded_vocab_size == 0)
    config.model.padded_vocab_size = config.model.padded_vocab_for(config.tp);
  config.model.validate();  // padded_vocab_size against the data's vocabulary
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
  // This rank's tokens of each sequence: T / cp under context parallelism, of which 1/tp under
  // sequence parallelism.
  const int64_t T = config_.model.block_size / config_.cp, t = config_.sequence_parallel ? config_.tp : 1;
  return Shape{config_.batch_size, T / t, config_.model.n_embd};
}

void GptSpec::build_loss(comm::ProcessGroup& tp) {
  if (tp.size() == 1) return;
  const int64_t Vl = config_.model.resolved_padded_vocab() / tp.size();
  tp_loss_ = std::make_unique<parallel::tp::VocabParallelCrossEntropy>(config_.model.vocab_size, tp.rank() * Vl, tp);
}

float GptSpec::loss(Tensor& logits, const Tensor& targets, bool backward, float scale) {
  trace::Span span("loss", backward ? "loss forward+backward" : "loss");
  float loss = 0.0f;
  if (tp_loss_) {
    loss = tp_loss_->forward(logits, targets);
    if (backward) tp_loss_->backward(logits, targets, scale);
  } else {
    const int64_t V = config_.model.vocab_size;
    loss = nn::cross_entropy_loss(logits, targets, V);
    if (backward) nn::cross_entropy_loss_backward(logits, targets, V, scale);
  }
  // Every cp rank holds as many tokens of each sequence: the mean of the ranks' means is the
  // whole sequence's. The gradient stays the local mean's; data parallelism averages over cp too.
  if (cp_ != nullptr) cp_->all_reduce(&loss, 1, comm::ReduceOp::Avg);
  return loss;
}

void GptSpec::use_context_parallel(comm::ProcessGroup& cp, const std::string& split) {
  cp_split_ = parallel::cp::parse_split(split);
  cp_ = cp.size() > 1 ? &cp : nullptr;
}

data::Batch GptSpec::context_chunks(data::Batch batch) const {
  if (cp_ == nullptr) return batch;
  return {parallel::cp::take_chunks(batch.inputs, cp_->rank(), cp_->size(), cp_split_),
          parallel::cp::take_chunks(batch.targets, cp_->rank(), cp_->size(), cp_split_), batch.first_row};
}

data::Batch GptSpec::train_batch(int64_t step, int64_t m, int dp_rank) {
  // This rank's B rows of global micro-batch m (B * dp rows; B * dp * depth under tp_3d).
  trace::Span load("data", "load batch");
  const int64_t B = config_.batch_size;
  return context_chunks(dataset_.batch(data::Split::Train, static_cast<uint64_t>(config_.seed), step,
                                      (m * config_.batch_shards() + dp_rank) * B, B, config_.model.block_size));
}

data::Batch GptSpec::eval_batch(int64_t i, int dp_rank) {
  // This rank's B rows of micro-batch i % M of global validation batch i / M (M micro-batches
  // of B * dp rows, as a training step's), so every split of the same global batch evaluates
  // the same sequences. A fixed seed and step = batch index: the same at every evaluation.
  const int64_t B = config_.batch_size, M = config_.micro_batches;
  return context_chunks(dataset_.batch(data::Split::Val, 0, i / M, ((i % M) * config_.batch_shards() + dp_rank) * B, B,
                                       config_.model.block_size));
}

std::string GptSpec::describe() const {
  const nn::GPTConfig& m = config_.model;
  char line[160];
  std::snprintf(line, sizeof line, "%lld parameters | %lld layers, %lld heads, %lld wide, context %lld, vocab %lld",
                static_cast<long long>(m.num_parameters()), static_cast<long long>(m.n_layer),
                static_cast<long long>(m.n_head), static_cast<long long>(m.n_embd), static_cast<long long>(m.block_size),
                static_cast<long long>(m.vocab_size));
  return line;
}

StepWork GptSpec::step_work() const {
  // The tokens of the global batch.
  const double tokens = static_cast<double>(config_.batch_size * config_.micro_batches * config_.model.block_size) *
                        static_cast<double>(config_.batch_shards());
  return {"tok", "tokens_per_s", tokens, tokens * config_.model.flops_per_token(config_.model.block_size)};
}

int64_t GptSpec::activation_bytes(nn::Module& chunk) {
  return layer_activation_bytes(config_) * static_cast<int64_t>(layers_of(chunk).size());
}

}  // namespace loom::train
