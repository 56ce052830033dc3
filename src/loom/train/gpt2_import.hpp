// Pre-trained GPT-2 weights into a Loom checkpoint. Reads a directory in the layout GPT-2's
// public releases use: config.json (n_positions, n_embd, n_layer, n_head, vocab_size,
// layer_norm_epsilon), model.safetensors (GPT-2's tensor names; its Conv1D weights stored
// input-major, i.e. transposed against Loom's Linear; c_attn the fused [q | k | v]
// projection, which is Loom's qkv layout; the LM head tied to wte) and the tokenizer's
// vocab.json + merges.txt. The result is a serial-layout checkpoint at step 0 with zero
// AdamW state, so `loom sample` reads it and `loom train --resume` continues from it.
#pragma once

#include <map>
#include <string>

#include "loom/tensor/tensor.hpp"
#include "loom/train/checkpoint_info.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

struct Gpt2Checkpoint {
  TrainConfig config;                      // the model's sizes; tokenizer "gpt2" from the directory
  std::map<std::string, Tensor> tensors;   // "model.*" and zero "optim.*" AdamW state
  CheckpointInfo info;
};

// Throws loom::Error naming the file and the problem: a missing or malformed config.json
// (a key absent, a size that is not a positive integer, a LayerNorm epsilon or activation
// Loom's model does not compute), a safetensors file that is not one, a missing tensor, a
// tensor of the wrong shape or an unexpected one, tokenizer files that do not fit.
Gpt2Checkpoint read_gpt2_checkpoint(const std::string& dir);

// Reads dir and writes the checkpoint: to `to` when it ends in .safetensors, else into the
// run directory `to` (as checkpoint 0, its `latest`). Returns the path written.
std::string convert_gpt2_checkpoint(const std::string& dir, const std::string& to);

}  // namespace loom::train
