// A checkpoint's model identity: what its tensors mean. Every checkpoint stores the resolved
// configuration and the tokenizer; the model is every [model] key but `recompute` (how
// backward gets its activations, not what it computes) and `padded_vocab_size` (rows no loss
// reads: a load re-pads the token table, so a run saved under tp 4 resumes under tp 1), plus
// the vocabulary and the tokenizer. Layout keys (dp, pp, tp, zero, ...) and training keys (lr,
// steps, ...) may change on resume; these may not.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

// Every key whose value differs, "n_layer 6 (checkpoint) vs 4 (config)" first and "n_head 8
// vs 4" after; empty when the checkpoint holds the model of config (whose vocab_size and
// padded vocabulary the trainer has resolved) with tokenizer_spec. loom::Error when the
// checkpoint's configuration or tokenizer cannot be read.
std::vector<std::string> model_differences(const CheckpointInfo& checkpoint, const TrainConfig& config,
                                           const std::string& tokenizer_spec);

// "checkpoint '<path>' holds a different model: <differences>; resume with the checkpoint's
// values or start a new out_dir", or "" for the same model.
std::string different_model_message(const std::string& path, const CheckpointInfo& checkpoint,
                                    const TrainConfig& config, const std::string& tokenizer_spec);

// Throws different_model_message as a loom::Error when it is not "".
void check_same_model(const std::string& path, const CheckpointInfo& checkpoint, const TrainConfig& config,
                      const std::string& tokenizer_spec);

// "token table re-padded from 256 to 128 rows ..." when the checkpoint's token table has
// other padding than config's model (resolved by the trainer), else "".
std::string token_table_repadding(const CheckpointInfo& checkpoint, const TrainConfig& config);

// loom::Error unless a checkpoint's token table of stored_rows rows is the one its own
// configuration and tokenizer give: before a table is re-padded into another vocabulary's, a
// tokenizer spec edited or damaged into a smaller alphabet (whose rows re-padding would drop)
// is named. Nothing to check for a GCN's checkpoint.
void check_token_table_is_its_checkpoints(const std::string& path, const CheckpointInfo& checkpoint,
                                          int64_t stored_rows);

// Collective over world: check_same_model for the checkpoint at path
// (its metadata only, read by every rank), failing on every rank alike.
void check_resume_model(const std::string& path, const TrainConfig& config, const std::string& tokenizer_spec,
                        comm::ProcessGroup& world);

}  // namespace loom::train
