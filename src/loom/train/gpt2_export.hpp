// A Loom GPT checkpoint out in the layout GPT-2's public releases use, the inverse of
// gpt2_import.hpp: config.json (GPT2LMHeadModel's keys), model.safetensors (GPT-2's tensor
// names, the Conv1D weights input-major, the token table's padding rows dropped, the LM head
// tied to wte and so not stored; metadata "format": "pt", which Hugging Face's loader asks
// for) and, for a checkpoint with GPT-2's tokenizer, its vocab.json and merges.txt. So a model
// trained by Loom loads into PyTorch (`GPT2LMHeadModel.from_pretrained(dir)`) or back into
// Loom (`loom convert --from-gpt2 dir`).
#pragma once

#include <string>

namespace loom::train {

// Reads `checkpoint` (a file, a sharded checkpoint or a run directory) and writes `dir` (new or
// empty). Returns a line for the log: what was written, and whether the tokenizer is GPT-2's.
// loom::Error, naming the problem, for a model GPT-2's layout cannot hold (a mixture of
// experts, a graph network) or a `dir` that holds files.
std::string export_gpt2_checkpoint(const std::string& checkpoint, const std::string& dir);

}  // namespace loom::train
