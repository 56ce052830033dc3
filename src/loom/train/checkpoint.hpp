// Training checkpoints: model parameters, optimizer state, step, configuration and
// tokenizer, written atomically, so resuming continues bit-exactly (batches and the
// learning rate are pure functions of the step). Two formats: one tensor file
// (checkpoint-<step>.safetensors, the serial layout) or a sharded directory
// (checkpoint-<step>/, sharded_checkpoint.hpp); both load through the same functions. The
// run directory keeps the newest `keep` complete checkpoints and a `latest` link to the
// newest; a checkpoint becomes `latest` only once complete.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/nn/module.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/train/checkpoint_info.hpp"
#include "loom/train/safetensors.hpp"

namespace loom::train {

// What a checkpoint holds for a model and optimizer: "model.<param>" and "optim.<state>"
// (views of their storage).
std::map<std::string, Tensor> checkpoint_tensors(nn::Module& model, optim::Optimizer* optimizer);

// Writes <dir>/checkpoint-<step>.safetensors, points <dir>/latest at it, prunes old ones.
std::string save_checkpoint(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                            const CheckpointInfo& info, int64_t keep);
std::string save_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer* optimizer,
                            const std::string& optimizer_name, const CheckpointInfo& info, int64_t keep);

// Writes one single-file checkpoint at path (atomically); no run directory bookkeeping.
void write_checkpoint_file(const std::string& path, const std::map<std::string, Tensor>& tensors,
                           const CheckpointInfo& info);
// A single-file checkpoint laid out for writing, its tensors viewed where they lie.
TensorFileParts lay_out_checkpoint_file(const std::map<std::string, Tensor>& tensors, const CheckpointInfo& info);
// A single-file checkpoint's bytes copied into bytes (keeping its allocation when large enough).
void encode_checkpoint_file_into(const std::map<std::string, Tensor>& tensors, const CheckpointInfo& info,
                                 std::string& bytes);
// save_checkpoint of a file already laid out (its bytes: parts end to end) for step.
std::string save_encoded_checkpoint(const std::string& dir, const std::vector<std::string_view>& parts, int64_t step,
                                    int64_t keep);

// "checkpoint-00000042": a sharded checkpoint's directory in the run directory.
std::string checkpoint_dir_name(int64_t step);
// Points <run_dir>/latest at the complete checkpoint `name` (atomically), then prunes: keeps
// the newest `keep` complete checkpoints and removes older ones and abandoned partial ones.
void publish_checkpoint(const std::string& run_dir, const std::string& name, int64_t keep);
// A single file, or a directory holding a manifest (a checkpoint whose writer finished).
bool is_complete_checkpoint(const std::string& path);
// The step of a run directory entry "checkpoint-<step>[.safetensors|.tmp]", or -1.
int64_t checkpoint_step(const std::string& entry);

// Resolves a checkpoint argument: a file, a checkpoint directory, a run directory (its
// latest, or when that is incomplete the newest complete checkpoint), or "<dir>/latest".
std::string resolve_checkpoint_path(const std::string& path_or_dir);

// Reads only the metadata: a file's header or a directory's manifest (for `loom sample` to
// rebuild the model first, for a resume to check the model before loading it).
CheckpointInfo read_checkpoint_info(const std::string& path);

// A single-file checkpoint's header metadata read as its CheckpointInfo; loom::Error naming
// path when it is not a checkpoint's.
CheckpointInfo checkpoint_info_from(const std::map<std::string, std::string>& metadata, const std::string& path);

// Loads values into model (and optimizer when given); every parameter must be present with
// its exact shape, else loom::Error naming the tensor.
CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                               const std::string& optimizer_name);
// Loads into each destination tensor by name (whole tensors of the serial layout); with
// "optim." names, the checkpoint's optimizer must be optimizer_name.
CheckpointInfo load_checkpoint(const std::string& path, const std::map<std::string, Tensor>& destinations,
                               const std::string& optimizer_name);

}  // namespace loom::train
