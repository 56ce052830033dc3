// The configuration `loom train` runs a planned layout with, so the planner's memory can be
// compared with the trainer's memory check: model m (vocabulary 65, its token table padded to
// m's), layout l's degrees, grid, schedule, ZeRO stage and recompute, `micro_batches` of
// l.micro_batch sequences, in fp32 or bf16.
#pragma once

#include <cstdint>
#include <string>

#include "loom/plan/layout_cost.hpp"
#include "loom/train/config.hpp"

namespace loom::testing {

inline train::TrainConfig trainer_config_of(const plan::ModelSpec& m, const plan::Layout& l, int64_t micro_batches,
                                            bool bf16) {
  train::TrainConfig c;
  c.model = nn::GPTConfig{.vocab_size = 65, .block_size = m.seq, .n_layer = m.layers, .n_head = m.heads, .n_embd = m.hidden};
  c.model.padded_vocab_size = m.vocab;
  c.model.recompute = l.recompute;
  c.model.selective_recompute = l.selective_recompute;
  c.model.moe.experts = m.moe.experts;
  c.model.moe.top_k = m.moe.top_k;
  c.model.moe.every = m.moe.every;
  c.model.moe.capacity_factor = m.moe.capacity_factor;
  c.batch_size = l.micro_batch;
  c.micro_batches = micro_batches;
  c.dp = l.dp;
  c.tp = l.tp;
  c.pp = l.pp;
  c.cp = l.cp;
  c.ep = l.ep;
  c.chunks = l.chunks;
  c.zero = l.zero;
  c.sequence_parallel = l.sequence_parallel && l.tp > 1;
  c.schedule = l.gpipe ? "gpipe" : l.chunks > 1 ? "interleaved" : "1f1b";
  if (l.tensor_parallel_3d())
    c.tp_3d = std::to_string(l.row) + "," + std::to_string(l.col) + "," + std::to_string(l.depth);
  c.precision = bf16 ? "bf16" : "fp32";
  return c;
}

}  // namespace loom::testing
