// `resume = "auto"`: the newest checkpoint of a run directory that passes every check, so a
// restarted job skips a checkpoint a crash or a full disk left damaged instead of stopping
// on it. A checkpoint is damaged (skipped, with the reason printed) when its header or
// manifest does not parse, its step disagrees with its name, its configuration or tokenizer
// is unreadable, it lacks a tensor this rank needs, or any size or CRC-32 (of every rank file
// and every piece) disagrees. A sound checkpoint of another model or optimizer is an error,
// never skipped: falling back past it would start a run that prunes it. Unfinished writes
// (".tmp") are never candidates.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/config.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

struct CheckpointVerdict {
  std::string misfit;  // a sound checkpoint that does not fit the run: an error
  std::string damage;  // why the checkpoint cannot be trusted: skip it
};

// One rank's verdict on the checkpoint at path for a run of config (vocabulary resolved)
// whose rank holds `needed` (names and full shapes), with the tokenizer tokenizer_spec. A
// checkpoint without a tensor of `expected` (the rank's StateShapes, whatever its pieces ask
// for) is damaged: written without it, it would resume with that tensor's initial values.
CheckpointVerdict judge_checkpoint(const std::string& path, const std::vector<StatePiece>& needed,
                                   const TrainConfig& config, const std::string& tokenizer_spec,
                                   const StateShapes& expected = {}, const PaddedRows& padded = {});

// Collective over world: every rank judges the candidates of config.out_dir
// newest first, and all take the first that every rank found sound; "" when none is (start
// fresh). speak: print each skipped checkpoint and why, and a fresh start.
std::string choose_auto_resume(const std::vector<StatePiece>& needed, const TrainConfig& config,
                               const std::string& tokenizer_spec, comm::ProcessGroup& world, bool speak,
                               const StateShapes& expected = {}, const PaddedRows& padded = {});

}  // namespace loom::train
