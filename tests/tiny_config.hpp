// The tiny debug GPT every training test starts from: 2 layers, 2 heads, width 16, context
// 16, on Tiny Shakespeare, writing no files. Tests set what they vary on top of it.
#pragma once

#include "loom/train/config.hpp"

namespace loom::testing {

inline train::TrainConfig tiny_config() {
  train::TrainConfig c;
  c.data = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.block_size = 16;
  c.out_dir = "";
  return c;
}

}  // namespace loom::testing
