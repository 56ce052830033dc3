// The model chunks one pipeline rank holds (one stage, or v of them with the interleaved
// schedule), gathered under one module so data parallelism, the optimizer and checkpoints
// see all of this rank's parameters, under their model names ("blocks.5.mlp.fc.weight").
// The chunks themselves run through the pipeline executor, never through this module.
#pragma once

#include <memory>
#include <vector>

#include "loom/nn/module.hpp"

namespace loom::parallel::pipeline {

class ModelChunks : public nn::Module {
 public:
  explicit ModelChunks(std::vector<std::unique_ptr<nn::Module>> chunks);
  const std::vector<nn::Module*>& chunks() const { return chunks_; }

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  std::vector<nn::Module*> chunks_;
};

}  // namespace loom::parallel::pipeline
