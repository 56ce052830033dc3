// The metadata every checkpoint carries beside its tensors, whatever its format: a header of
// its own so the single-file, manifest and sharded headers all name it without including
// one another.
#pragma once

#include <cstdint>
#include <string>

namespace loom::train {

struct CheckpointInfo {
  int64_t step = 0;  // optimizer steps completed
  std::string config_toml;
  std::string tokenizer_spec;
  std::string optimizer;
  int64_t optimizer_steps = -1;  // the optimizer's step count; -1: no optimizer state
};

}  // namespace loom::train
