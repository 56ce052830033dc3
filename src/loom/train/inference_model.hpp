// A GPT rebuilt from a checkpoint's own configuration and tokenizer for generation: whole
// on one process, or tensor-parallel over a group (heads and MLP split as in training,
// each rank loading its slices of the checkpoint through the re-sharding loader).
#pragma once

#include <memory>
#include <string>

#include "loom/comm/process_group.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/config.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

struct InferenceModel {
  TrainConfig config;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<nn::LayerBuilder> layers;  // null: the serial layers
  std::unique_ptr<nn::GPT> model;
};

// What the model is loaded for, which sets what the memory check counts beside it: generation
// (a KV cache of `batch` sequences, one sequence's activations) or scoring (`batch` windows
// through one forward pass, their activations and logits; no cache).
enum class InferenceUse { Generation, Scoring };

// checkpoint: a file, a checkpoint directory or a run directory (its latest). tp: the
// tensor-parallel group (every rank calls this; null or a group of one: serial). batch: the
// sequences run together, whose memory (as `use` needs it) the check counts with the model
// (in bf16 compute precision, kernels/precision.hpp, with the weights' bf16 copies); by: the
// command and its batch flag, which a refusal names.
InferenceModel load_inference_model(const std::string& checkpoint, comm::ProcessGroup* tp, int64_t batch,
                                    const MemoryCheckBy& by, InferenceUse use = InferenceUse::Generation);

}  // namespace loom::train
