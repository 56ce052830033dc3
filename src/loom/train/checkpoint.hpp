// Training checkpoints: model parameters, optimizer state, step, configuration and
// tokenizer in one tensor file, written atomically, so resuming continues bit-exactly
// (batches and the learning rate are pure functions of the step). The run directory keeps
// the newest `keep` checkpoints and a `latest` link to the newest complete one.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/nn/module.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::train {

struct CheckpointInfo {
  int64_t step = 0;  // optimizer steps completed
  std::string config_toml;
  std::string tokenizer_spec;
  std::string optimizer;
  int64_t optimizer_steps = -1;  // the optimizer's step count; -1: no optimizer state
};

// What a checkpoint holds for a model and optimizer: "model.<param>" and "optim.<state>"
// (views of their storage).
std::map<std::string, Tensor> checkpoint_tensors(nn::Module& model, optim::Optimizer* optimizer);

// Writes <dir>/checkpoint-<step>.safetensors, points <dir>/latest at it, prunes old ones.
std::string save_checkpoint(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                            const CheckpointInfo& info, int64_t keep);
std::string save_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer* optimizer,
                            const std::string& optimizer_name, const CheckpointInfo& info, int64_t keep);

// Resolves a checkpoint argument: a file, a run directory (its latest), or "<dir>/latest".
std::string resolve_checkpoint_path(const std::string& path_or_dir);

// Reads only the metadata (for `loom sample` to rebuild the model first).
CheckpointInfo read_checkpoint_info(const std::string& path);

// Loads values into model (and optimizer when given); every parameter must be present with
// its exact shape, else loom::Error naming the tensor.
CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                               const std::string& optimizer_name);
// Loads into each destination tensor by name (a sharded run's full-size buffers); with
// "optim." names, the checkpoint's optimizer must be optimizer_name.
CheckpointInfo load_checkpoint(const std::string& path, const std::map<std::string, Tensor>& destinations,
                               const std::string& optimizer_name);

}  // namespace loom::train
