// Shared by the single-process trainer tests: a tiny GPT run on Tiny Shakespeare in its own
// fresh run directory, and training a trainer up to a step while recording the losses.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "loom/train/trainer.hpp"
#include "tiny_config.hpp"

namespace loom::train {

inline TrainConfig tiny_run(const std::string& name) {
  TrainConfig c = testing::tiny_config();
  c.batch_size = 4;
  c.steps = 6;
  c.warmup_steps = 2;
  c.lr = 3e-3;
  c.threads = 1;
  c.eval_batches = 2;
  c.peak_gflops = 100;  // skip the start-up measurement
  c.out_dir = (std::filesystem::temp_directory_path() / ("loom_train_" + name)).string();
  std::filesystem::remove_all(c.out_dir);
  return c;
}

inline std::vector<float> losses_of(Trainer& t, int64_t until) {
  std::vector<float> out;
  while (t.step() < until) out.push_back(t.train_step().loss);
  return out;
}

}  // namespace loom::train
